-- Mirrors migrations/postgresql/0012: tether_invocations_open_by_session (owner, session_id, seq)
-- holds every open invocation under the same condition and leads with the owner, so it serves
-- every per-owner count of open invocations; each accept and each ending wrote one more index
-- page to the WAL for the narrower copy (2-3 % of a no-op's store calls in tether dev).
DROP INDEX IF EXISTS tether_invocations_open_by_owner;
