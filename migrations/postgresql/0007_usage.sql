-- Model usage and budgets (docs/operations.md "Token and cost budgets").
-- What each invocation's model calls used, added to by every call (atomically, in SQL).
ALTER TABLE tether_invocations ADD COLUMN usage_input_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE tether_invocations ADD COLUMN usage_output_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE tether_invocations ADD COLUMN usage_cost double precision NOT NULL DEFAULT 0;
ALTER TABLE tether_invocations ADD COLUMN usage_estimated boolean NOT NULL DEFAULT false;
ALTER TABLE tether_invocations ADD COLUMN usage_model_calls integer NOT NULL DEFAULT 0;

-- What each tenant's model calls used per budget period; a period starts at a multiple of the
-- tenant's budget_period since the epoch (database clock).
CREATE TABLE tether_tenant_usage (
    tenant        text NOT NULL,
    period_start  double precision NOT NULL,
    tokens        bigint NOT NULL DEFAULT 0,
    cost          double precision NOT NULL DEFAULT 0,
    model_calls   bigint NOT NULL DEFAULT 0,
    updated_at    double precision NOT NULL,
    PRIMARY KEY (tenant, period_start)
);
