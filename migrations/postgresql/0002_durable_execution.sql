-- Durable execution: recorded steps, waits (input, timers) and the `waiting` status.
-- A waiting invocation holds no worker: its attempt has ended, its waits are rows here.
ALTER TABLE tether_invocations DROP CONSTRAINT tether_invocations_status_check;
ALTER TABLE tether_invocations ADD CONSTRAINT tether_invocations_status_check
    CHECK (status IN ('queued', 'active', 'waiting', 'completed', 'failed', 'cancelled'));

-- Why the next attempt runs: NULL (first), 'crash' (the reaper replaced a dead attempt) or
-- 'resume' (a wait was resolved). Only crashes count towards limits.max_attempts.
ALTER TABLE tether_invocations ADD COLUMN resumed_by text;
ALTER TABLE tether_invocations ADD COLUMN crashes integer NOT NULL DEFAULT 0;

-- A waiting invocation keeps its session's turn and counts as open for its owner.
DROP INDEX tether_invocations_open_by_session;
CREATE INDEX tether_invocations_open_by_session
    ON tether_invocations (owner, session_id, seq) WHERE status IN ('queued', 'active', 'waiting');
DROP INDEX tether_invocations_open_by_owner;
CREATE INDEX tether_invocations_open_by_owner
    ON tether_invocations (owner) WHERE status IN ('queued', 'active', 'waiting');

-- One row per completed step, by the name the handler gave it (unique within a run).
CREATE TABLE tether_steps (
    invocation_id text NOT NULL,
    name          text NOT NULL,
    result        jsonb,
    error_type    text,
    attempt       integer NOT NULL,
    created_at    double precision NOT NULL,
    PRIMARY KEY (invocation_id, name)
);

-- One row per wait: an input the handler waits for, or a durable sleep. Resolved once.
CREATE TABLE tether_waits (
    invocation_id text NOT NULL,
    name          text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('input', 'sleep')),
    details       jsonb NOT NULL,
    wake_at       double precision,
    value         jsonb,
    resolution    text CHECK (resolution IN ('input', 'timeout', 'elapsed')),
    resolved_at   double precision,
    created_at    double precision NOT NULL,
    PRIMARY KEY (invocation_id, name)
);
CREATE INDEX tether_waits_due ON tether_waits (wake_at)
    WHERE resolved_at IS NULL AND wake_at IS NOT NULL;
