-- Agent threads and request-user auth on the embedded store; mirrors migrations/postgresql/0003.
ALTER TABLE tether_invocations ADD COLUMN user_auth BOOLEAN NOT NULL DEFAULT 0;

CREATE TABLE tether_threads (
    owner      TEXT NOT NULL,
    id         TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (owner, id)
);

CREATE TABLE tether_thread_messages (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    owner         TEXT NOT NULL,
    thread_id     TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    position      INTEGER NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content       TEXT NOT NULL,
    created_at    REAL NOT NULL,
    UNIQUE (invocation_id, position)
);
CREATE INDEX tether_thread_messages_by_thread ON tether_thread_messages (owner, thread_id, seq);
