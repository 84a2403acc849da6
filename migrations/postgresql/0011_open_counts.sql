-- Open invocations (queued, active, waiting) per owner and per tenant, for the owner cap and a
-- tenant's max_queued: counting the open rows of a batch's owners on every accept read every
-- one of them (5.8 ms a batch at 600 open per owner). Each accept adds its rows here and each
-- terminal transition takes its row off, in the same transaction (tether.store.opencounts).
-- The counts are rewritten often and read by key alone: room on each page keeps the updates
-- HOT. Writes to invocations wait while the counts are taken, so they match the rows; stop
-- gateways and workers of an earlier version before migrating (they would not keep them).
LOCK TABLE tether_invocations IN SHARE MODE;

CREATE TABLE tether_open_counts (
    scope      TEXT NOT NULL CHECK (scope IN ('owner', 'tenant')),
    name       TEXT NOT NULL,
    open_count BIGINT NOT NULL,
    PRIMARY KEY (scope, name)
) WITH (fillfactor = 50);

INSERT INTO tether_open_counts (scope, name, open_count)
SELECT 'owner', owner, count(*) FROM tether_invocations
WHERE status IN ('queued', 'active', 'waiting') GROUP BY owner;

INSERT INTO tether_open_counts (scope, name, open_count)
SELECT 'tenant', tenant, count(*) FROM tether_invocations
WHERE status IN ('queued', 'active', 'waiting') GROUP BY tenant;
