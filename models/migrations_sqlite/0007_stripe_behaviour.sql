-- Stripe as it really behaves (issue 13); see the PostgreSQL migration of
-- the same name. SQLite cannot alter a CHECK constraint: the table is
-- rebuilt to admit the 'dispute' kind.
CREATE TABLE drift_items_new (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id         INTEGER  NOT NULL REFERENCES reconciliation_runs (id),
    provider       TEXT     NOT NULL,
    provider_id    TEXT     NOT NULL,
    kind           TEXT     NOT NULL CHECK (kind IN ('missing_local', 'behind', 'conflict', 'stale', 'mismatch', 'unknown_status', 'dispute')),
    action         TEXT     NOT NULL CHECK (action IN ('repaired', 'refused', 'reported', 'delivered')),
    local_state    TEXT,
    provider_state TEXT,
    detail         TEXT     NOT NULL DEFAULT '{}',
    created_at     DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);
INSERT INTO drift_items_new SELECT id, run_id, provider, provider_id, kind, action, local_state, provider_state, detail, created_at FROM drift_items;
DROP TABLE drift_items;
ALTER TABLE drift_items_new RENAME TO drift_items;
CREATE INDEX IF NOT EXISTS drift_items_run_idx ON drift_items (run_id);
CREATE INDEX IF NOT EXISTS drift_items_payment_idx ON drift_items (provider, provider_id);

CREATE TABLE IF NOT EXISTS reconciler_checks (
    provider    TEXT     NOT NULL,
    account     TEXT     NOT NULL DEFAULT '',
    provider_id TEXT     NOT NULL,
    checked_at  DATETIME NOT NULL,
    PRIMARY KEY (provider, provider_id)
);
