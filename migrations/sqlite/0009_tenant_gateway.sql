-- Mirrors migrations/postgresql/0009.
ALTER TABLE tether_tenant_buckets ADD COLUMN granted INTEGER NOT NULL DEFAULT 0;
