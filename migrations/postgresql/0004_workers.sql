-- Worker processes, for crash detection through the database session (docs/operations.md).
-- Each worker process registers here and holds the session-level advisory lock
-- (classid 2122186754 = 0x7E7E0002, objid lock_id) on a dedicated connection while it lives.
-- A row whose lock has gone and whose beat is old belongs to a dead process.
CREATE SEQUENCE tether_worker_lock_ids AS integer MINVALUE 1 MAXVALUE 2147483647 CYCLE;

CREATE TABLE tether_workers (
    name        text PRIMARY KEY,            -- hostname:pid, as in tether_invocations.worker
    lock_id     integer,                     -- its advisory lock's objid (NULL: heartbeats only)
    backend_pid integer,                     -- the PostgreSQL backend of its liveness session
    state       text NOT NULL CHECK (state IN ('alive', 'dead', 'stopped')),
    started_at  double precision NOT NULL,
    beat_at     double precision NOT NULL,   -- its last liveness beat
    ended_at    double precision             -- when it was found dead, or stopped
);
CREATE INDEX tether_workers_beat ON tether_workers (beat_at);
CREATE INDEX tether_invocations_active_worker
    ON tether_invocations (worker) WHERE status = 'active';
