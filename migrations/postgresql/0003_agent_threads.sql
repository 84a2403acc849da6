-- Agent threads and request-user auth.
--
-- user_auth: the invocation's first attempt was handed the caller's access token (which lives
-- only in that process's memory, never here). A later attempt that runs where the token is not
-- fails with user_auth_recovery_unsupported unless the app can run it without the user.
ALTER TABLE tether_invocations ADD COLUMN user_auth boolean NOT NULL DEFAULT false;

-- One conversation per (owner, session_id): the turns agents of that session share.
CREATE TABLE tether_threads (
    owner      text NOT NULL,
    id         text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (owner, id)
);

-- Its messages, oldest first by seq; (invocation_id, position) makes an append idempotent
-- across attempts. Bounded per thread (agents.max_thread_messages), trimmed oldest-first.
CREATE TABLE tether_thread_messages (
    seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner         text NOT NULL,
    thread_id     text NOT NULL,
    invocation_id text NOT NULL,
    position      integer NOT NULL,
    role          text NOT NULL CHECK (role IN ('user', 'assistant')),
    content       text NOT NULL,
    created_at    double precision NOT NULL,
    UNIQUE (invocation_id, position)
);
CREATE INDEX tether_thread_messages_by_thread ON tether_thread_messages (owner, thread_id, seq);
