-- The heartbeat writes heartbeat_at into every running attempt's row every few seconds. While
-- an index held that column, each of those updates wrote a new entry into every index of the
-- row (on PostgreSQL no update that changes an indexed column can be HOT: ~50 us a row with
-- this table's indexes, 30 ms for 500 attempts, holding their row locks meanwhile). Stale
-- attempts are found among the active rows instead (through their partial indexes): at most
-- one a worker slot, and read far less often than they are beaten.
DROP INDEX IF EXISTS tether_invocations_active_heartbeat;
