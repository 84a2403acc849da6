-- The accept token bucket remembers what its last take granted: one conditional upsert per
-- tenant and accept batch both takes and reports (RETURNING sees only the new row).
ALTER TABLE tether_tenant_buckets ADD COLUMN granted integer NOT NULL DEFAULT 0;
