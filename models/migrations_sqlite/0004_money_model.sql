-- The money model of DESIGN sections 2-6 as revised (issue 10); see the
-- PostgreSQL migration of the same name.
-- app-tables: begin (the application's tables: left out of a mapped install, issue 18)
ALTER TABLE payments ADD COLUMN settled_at DATETIME;
ALTER TABLE payments ADD COLUMN payout_id TEXT;
ALTER TABLE payments ADD COLUMN amount_captured INTEGER;
-- app-tables: end
ALTER TABLE reconciliation_runs ADD COLUMN settlements_recorded INTEGER NOT NULL DEFAULT 0;

-- SQLite cannot alter a CHECK constraint: the table is rebuilt to admit
-- the 'delivered' action.
CREATE TABLE drift_items_new (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id         INTEGER  NOT NULL REFERENCES reconciliation_runs (id),
    provider       TEXT     NOT NULL,
    provider_id    TEXT     NOT NULL,
    kind           TEXT     NOT NULL CHECK (kind IN ('missing_local', 'behind', 'conflict', 'stale', 'mismatch', 'unknown_status')),
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
