-- Mirrors migrations/postgresql/0014: the open invocations of a deleted thread's session.
CREATE TABLE tether_forgotten_turns (
    invocation_id TEXT PRIMARY KEY
);
