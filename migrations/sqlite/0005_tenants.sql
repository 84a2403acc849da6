-- Mirrors migrations/postgresql/0005.
ALTER TABLE tether_invocations ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE tether_invocations SET tenant = owner;
ALTER TABLE tether_invocations ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;

CREATE INDEX tether_invocations_tenant_queue
    ON tether_invocations (tenant, priority DESC, seq) WHERE status = 'queued';
CREATE INDEX tether_invocations_tenant_active
    ON tether_invocations (tenant) WHERE status = 'active';
CREATE INDEX tether_invocations_tenant_open
    ON tether_invocations (tenant, status) WHERE status IN ('queued', 'active', 'waiting');

CREATE TABLE tether_tenants (
    tenant                TEXT PRIMARY KEY,
    weight                REAL NOT NULL DEFAULT 1 CHECK (weight > 0),
    max_active            INTEGER CHECK (max_active >= 0),
    max_queued            INTEGER CHECK (max_queued >= 0),
    rate                  REAL CHECK (rate > 0),
    burst                 INTEGER CHECK (burst >= 1),
    tokens_per_invocation INTEGER CHECK (tokens_per_invocation >= 0),
    tokens_per_period     INTEGER CHECK (tokens_per_period >= 0),
    cost_per_period       REAL CHECK (cost_per_period >= 0),
    budget_period         REAL NOT NULL DEFAULT 86400 CHECK (budget_period > 0),
    on_budget             TEXT NOT NULL DEFAULT 'fail' CHECK (on_budget IN ('fail', 'park')),
    updated_at            REAL NOT NULL
);

CREATE TABLE tether_global_limits (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    max_active  INTEGER CHECK (max_active >= 0),
    updated_at  REAL NOT NULL
);

CREATE TABLE tether_tenant_buckets (
    tenant  TEXT PRIMARY KEY,
    tokens  REAL NOT NULL,
    at      REAL NOT NULL
);
