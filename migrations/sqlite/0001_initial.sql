-- Tether's initial schema for the embedded store (SQLite). Mirrors migrations/postgres.
CREATE TABLE tether_invocations (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE,
    owner            TEXT NOT NULL,
    session_id       TEXT,
    input            TEXT NOT NULL,
    request_hash     TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'active', 'completed', 'failed', 'cancelled')),
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
    finished_at      REAL
);

CREATE UNIQUE INDEX tether_invocations_one_active_per_session
    ON tether_invocations (owner, session_id) WHERE status = 'active' AND session_id IS NOT NULL;
CREATE INDEX tether_invocations_owner_seq ON tether_invocations (owner, seq);
CREATE INDEX tether_invocations_open_by_session
    ON tether_invocations (owner, session_id, seq) WHERE status IN ('queued', 'active');
CREATE INDEX tether_invocations_open_by_owner
    ON tether_invocations (owner) WHERE status IN ('queued', 'active');
CREATE INDEX tether_invocations_active_heartbeat
    ON tether_invocations (heartbeat_at) WHERE status = 'active';
CREATE INDEX tether_invocations_queued_enqueued
    ON tether_invocations (enqueued_at) WHERE status = 'queued';
CREATE INDEX tether_invocations_finished
    ON tether_invocations (finished_at) WHERE status IN ('completed', 'failed', 'cancelled');

CREATE TABLE tether_events (
    invocation_id TEXT NOT NULL,
    cursor        INTEGER NOT NULL,
    type          TEXT NOT NULL,
    data          TEXT NOT NULL,
    created_at    REAL NOT NULL,
    PRIMARY KEY (invocation_id, cursor)
);
