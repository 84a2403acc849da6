-- Tenants and flow control (docs/operations.md "Tenants and limits").
-- Every invocation belongs to a tenant: its owner unless the deployment maps owners to tenants.
ALTER TABLE tether_invocations ADD COLUMN tenant text NOT NULL DEFAULT '';
UPDATE tether_invocations SET tenant = owner;
ALTER TABLE tether_invocations ALTER COLUMN tenant DROP DEFAULT;
-- Higher runs first, within its tenant's share (bounded by the API: -10..10).
ALTER TABLE tether_invocations ADD COLUMN priority smallint NOT NULL DEFAULT 0;

-- The claim reads each tenant's queue head from here: cost grows with tenants, not backlog.
CREATE INDEX tether_invocations_tenant_queue
    ON tether_invocations (tenant, priority DESC, seq) WHERE status = 'queued';
-- Running attempts per tenant, for caps and fair shares (bounded by the worker slots).
CREATE INDEX tether_invocations_tenant_active
    ON tether_invocations (tenant) WHERE status = 'active';
-- Open invocations per tenant, for max_queued and the per-tenant metrics.
CREATE INDEX tether_invocations_tenant_open
    ON tether_invocations (tenant, status) WHERE status IN ('queued', 'active', 'waiting');

-- Limits, editable at run time (`tether tenants set`, PUT /api/admin/tenants/{tenant}).
-- The row '*' holds the defaults of every tenant without a row of its own; a tenant with a row
-- uses that row alone. NULL means "no limit" (weight: 1).
CREATE TABLE tether_tenants (
    tenant                text PRIMARY KEY,
    weight                double precision NOT NULL DEFAULT 1 CHECK (weight > 0),
    max_active            integer CHECK (max_active >= 0),       -- running attempts at once
    max_queued            integer CHECK (max_queued >= 0),       -- open (not terminal) invocations
    rate                  double precision CHECK (rate > 0),     -- accepts/s, sustained
    burst                 integer CHECK (burst >= 1),            -- accepts at once (default: rate)
    tokens_per_invocation bigint CHECK (tokens_per_invocation >= 0),
    tokens_per_period     bigint CHECK (tokens_per_period >= 0),
    cost_per_period       double precision CHECK (cost_per_period >= 0),
    budget_period         double precision NOT NULL DEFAULT 86400 CHECK (budget_period > 0),
    on_budget             text NOT NULL DEFAULT 'fail' CHECK (on_budget IN ('fail', 'park')),
    updated_at            double precision NOT NULL
);

-- Deployment-wide limits: one row.
CREATE TABLE tether_global_limits (
    id          integer PRIMARY KEY CHECK (id = 1),
    max_active  integer CHECK (max_active >= 0),
    updated_at  double precision NOT NULL
);

-- Each tenant's accept-rate token bucket: tokens left at `at` (refilled at `rate` per second).
CREATE TABLE tether_tenant_buckets (
    tenant  text PRIMARY KEY,
    tokens  double precision NOT NULL,
    at      double precision NOT NULL
);
