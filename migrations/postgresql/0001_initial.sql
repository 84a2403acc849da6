-- Tether's initial schema on PostgreSQL. Times are seconds since the epoch on the database clock.
CREATE TABLE tether_invocations (
    id               text PRIMARY KEY,
    seq              bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    owner            text NOT NULL,
    session_id       text,
    input            jsonb NOT NULL,
    request_hash     text NOT NULL,
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'active', 'completed', 'failed', 'cancelled')),
    attempt          integer NOT NULL DEFAULT 0,
    cancel_requested boolean NOT NULL DEFAULT false,
    output           jsonb,
    error_code       text,
    error_message    text,
    checkpoint       jsonb,
    last_event_id    bigint NOT NULL DEFAULT 0,
    worker           text,
    created_at       double precision NOT NULL,
    enqueued_at      double precision NOT NULL,
    started_at       double precision,
    heartbeat_at     double precision,
    finished_at      double precision
);

-- At most one active invocation per session: the hard guarantee behind session order.
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
    invocation_id text NOT NULL,
    cursor        bigint NOT NULL,
    type          text NOT NULL,
    data          jsonb NOT NULL,
    created_at    double precision NOT NULL,
    PRIMARY KEY (invocation_id, cursor)
);
