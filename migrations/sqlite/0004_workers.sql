-- Mirrors migrations/postgresql/0004. The embedded store keeps the table for a common schema;
-- `tether dev` recognises its own dead attempts through a file lock instead (docs/operations.md).
CREATE TABLE tether_workers (
    name        TEXT PRIMARY KEY,
    lock_id     INTEGER,
    backend_pid INTEGER,
    state       TEXT NOT NULL CHECK (state IN ('alive', 'dead', 'stopped')),
    started_at  REAL NOT NULL,
    beat_at     REAL NOT NULL,
    ended_at    REAL
);
CREATE INDEX tether_workers_beat ON tether_workers (beat_at);
CREATE INDEX tether_invocations_active_worker
    ON tether_invocations (worker) WHERE status = 'active';
