-- Mirrors migrations/postgresql/0006.
CREATE TABLE tether_tenant_passes (
    tenant  TEXT PRIMARY KEY,
    pass    REAL NOT NULL
);

CREATE TABLE tether_claim_clock (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    vtime  REAL NOT NULL
);
