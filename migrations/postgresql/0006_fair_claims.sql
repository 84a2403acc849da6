-- Fair claiming (docs/architecture.md "Who runs next"): each tenant's stride pass, advanced when
-- the claim picks one of its invocations, and the scheduler's virtual time (the least pass of the
-- tenants that could run at the last claim), below which no tenant's pass counts: a tenant whose
-- queue was empty banks no credit. Claims run one at a time (a transaction advisory lock), so
-- these rows need no locks of their own; no index on the updated columns (HOT updates).
CREATE TABLE tether_tenant_passes (
    tenant  text PRIMARY KEY,
    pass    double precision NOT NULL
);

CREATE TABLE tether_claim_clock (
    id     integer PRIMARY KEY CHECK (id = 1),
    vtime  double precision NOT NULL
);
