-- Support (issue 17): a person acknowledges a drift item ("looked at, leave
-- it"). An item's fingerprint names the provider, the payment, the kind and
-- the provider's state, so an acknowledged item whose provider state changes
-- is a new fingerprint and opens again. Rows are only appended: the newest
-- row of a fingerprint decides (reopened = false: acknowledged), and the
-- rows before it are the item's history of who looked and why.
CREATE TABLE IF NOT EXISTS drift_acks (
    id              bigserial   PRIMARY KEY,
    fingerprint     text        NOT NULL,
    provider        text        NOT NULL,
    account         text        NOT NULL DEFAULT '',
    provider_id     text        NOT NULL,
    kind            text        NOT NULL,
    provider_state  text,
    run_id          bigint      REFERENCES reconciliation_runs (id),
    note            text        NOT NULL,
    acknowledged_by text        NOT NULL,
    acknowledged_at timestamptz NOT NULL,
    reopened        boolean     NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS drift_acks_fingerprint_idx ON drift_acks (fingerprint, id);
