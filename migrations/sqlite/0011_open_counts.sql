-- Open invocations (queued, active, waiting) per owner and per tenant, for the owner cap and a
-- tenant's max_queued: counting the open rows of a batch's owners on every accept read every
-- one of them. Each accept adds its rows here and each terminal transition takes its row off,
-- in the same transaction (tether.store.opencounts). The migration's transaction holds the
-- database, so the counts taken here match the rows.
CREATE TABLE tether_open_counts (
    scope      TEXT NOT NULL CHECK (scope IN ('owner', 'tenant')),
    name       TEXT NOT NULL,
    open_count INTEGER NOT NULL,
    PRIMARY KEY (scope, name)
) WITHOUT ROWID;

INSERT INTO tether_open_counts (scope, name, open_count)
SELECT 'owner', owner, count(*) FROM tether_invocations
WHERE status IN ('queued', 'active', 'waiting') GROUP BY owner;

INSERT INTO tether_open_counts (scope, name, open_count)
SELECT 'tenant', tenant, count(*) FROM tether_invocations
WHERE status IN ('queued', 'active', 'waiting') GROUP BY tenant;
