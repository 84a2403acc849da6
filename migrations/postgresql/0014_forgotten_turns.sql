-- The invocations that were open (queued, active or waiting) in a session when its thread was
-- deleted. They write nothing more to that thread: a turn still queued does not start it again
-- when it runs, and neither does a replayed write of a turn that was running. Retention deletes
-- a row with its invocation.
CREATE TABLE tether_forgotten_turns (
    invocation_id text PRIMARY KEY
);
