-- Mirrors migrations/postgresql/0007.
ALTER TABLE tether_invocations ADD COLUMN usage_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tether_invocations ADD COLUMN usage_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tether_invocations ADD COLUMN usage_cost REAL NOT NULL DEFAULT 0;
ALTER TABLE tether_invocations ADD COLUMN usage_estimated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tether_invocations ADD COLUMN usage_model_calls INTEGER NOT NULL DEFAULT 0;

CREATE TABLE tether_tenant_usage (
    tenant        TEXT NOT NULL,
    period_start  REAL NOT NULL,
    tokens        INTEGER NOT NULL DEFAULT 0,
    cost          REAL NOT NULL DEFAULT 0,
    model_calls   INTEGER NOT NULL DEFAULT 0,
    updated_at    REAL NOT NULL,
    PRIMARY KEY (tenant, period_start)
);
