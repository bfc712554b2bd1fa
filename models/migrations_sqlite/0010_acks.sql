-- Support (issue 17); see the PostgreSQL migration of the same name.
CREATE TABLE IF NOT EXISTS drift_acks (
    id              INTEGER  PRIMARY KEY AUTOINCREMENT,
    fingerprint     TEXT     NOT NULL,
    provider        TEXT     NOT NULL,
    account         TEXT     NOT NULL DEFAULT '',
    provider_id     TEXT     NOT NULL,
    kind            TEXT     NOT NULL,
    provider_state  TEXT,
    run_id          INTEGER  REFERENCES reconciliation_runs (id),
    note            TEXT     NOT NULL,
    acknowledged_by TEXT     NOT NULL,
    acknowledged_at DATETIME NOT NULL,
    reopened        BOOLEAN  NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS drift_acks_fingerprint_idx ON drift_acks (fingerprint, id);
