-- Durable execution on the embedded store; mirrors migrations/postgresql/0002. SQLite cannot
-- alter a CHECK constraint, so the invocations table is rebuilt with the `waiting` status.
CREATE TABLE tether_invocations_new (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE,
    owner            TEXT NOT NULL,
    session_id       TEXT,
    input            TEXT NOT NULL,
    request_hash     TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'active', 'waiting', 'completed', 'failed',
                                       'cancelled')),
    attempt          INTEGER NOT NULL DEFAULT 0,
    cancel_requested BOOLEAN NOT NULL DEFAULT 0,
    output           TEXT,
    error_code       TEXT,
    error_message    TEXT,
    checkpoint       TEXT,
    last_event_id    INTEGER NOT NULL DEFAULT 0,
    worker           TEXT,
    created_at       REAL NOT NULL,
    enqueued_at      REAL NOT NULL,
    started_at       REAL,
    heartbeat_at     REAL,
    finished_at      REAL,
    resumed_by       TEXT,
    crashes          INTEGER NOT NULL DEFAULT 0
);
INSERT INTO tether_invocations_new (
    seq, id, owner, session_id, input, request_hash, status, attempt, cancel_requested, output,
    error_code, error_message, checkpoint, last_event_id, worker, created_at, enqueued_at,
    started_at, heartbeat_at, finished_at, crashes
)
SELECT seq, id, owner, session_id, input, request_hash, status, attempt, cancel_requested, output,
       error_code, error_message, checkpoint, last_event_id, worker, created_at, enqueued_at,
       started_at, heartbeat_at, finished_at, CASE WHEN attempt > 1 THEN attempt - 1 ELSE 0 END
FROM tether_invocations;
DROP TABLE tether_invocations;
ALTER TABLE tether_invocations_new RENAME TO tether_invocations;

CREATE UNIQUE INDEX tether_invocations_one_active_per_session
    ON tether_invocations (owner, session_id) WHERE status = 'active' AND session_id IS NOT NULL;
CREATE INDEX tether_invocations_owner_seq ON tether_invocations (owner, seq);
CREATE INDEX tether_invocations_open_by_session
    ON tether_invocations (owner, session_id, seq) WHERE status IN ('queued', 'active', 'waiting');
CREATE INDEX tether_invocations_open_by_owner
    ON tether_invocations (owner) WHERE status IN ('queued', 'active', 'waiting');
CREATE INDEX tether_invocations_active_heartbeat
    ON tether_invocations (heartbeat_at) WHERE status = 'active';
CREATE INDEX tether_invocations_queued_enqueued
    ON tether_invocations (enqueued_at) WHERE status = 'queued';
CREATE INDEX tether_invocations_finished
    ON tether_invocations (finished_at) WHERE status IN ('completed', 'failed', 'cancelled');

CREATE TABLE tether_steps (
    invocation_id TEXT NOT NULL,
    name          TEXT NOT NULL,
    result        TEXT,
    error_type    TEXT,
    attempt       INTEGER NOT NULL,
    created_at    REAL NOT NULL,
    PRIMARY KEY (invocation_id, name)
);

CREATE TABLE tether_waits (
    invocation_id TEXT NOT NULL,
    name          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('input', 'sleep')),
    details       TEXT NOT NULL,
    wake_at       REAL,
    value         TEXT,
    resolution    TEXT CHECK (resolution IN ('input', 'timeout', 'elapsed')),
    resolved_at   REAL,
    created_at    REAL NOT NULL,
    PRIMARY KEY (invocation_id, name)
);
CREATE INDEX tether_waits_due ON tether_waits (wake_at)
    WHERE resolved_at IS NULL AND wake_at IS NOT NULL;
