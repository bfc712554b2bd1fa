-- The contract tables of DESIGN section 6, for the embedded SQLite store.
-- app-tables: begin (the application's tables: left out of a mapped install, issue 18)
CREATE TABLE IF NOT EXISTS payments (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    provider          TEXT     NOT NULL,
    account           TEXT     NOT NULL DEFAULT '',
    provider_id       TEXT     NOT NULL,
    state             TEXT     NOT NULL,
    amount            INTEGER  NOT NULL,
    currency          TEXT     NOT NULL,
    amount_refunded   INTEGER  NOT NULL DEFAULT 0,
    source_updated_at DATETIME,
    created_at        DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at        DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    UNIQUE (provider, provider_id)
);
CREATE INDEX IF NOT EXISTS payments_stuck_idx ON payments (provider, account, source_updated_at);

CREATE TABLE IF NOT EXISTS webhook_events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    source       TEXT     NOT NULL,
    event_id     TEXT     NOT NULL,
    event_type   TEXT     NOT NULL,
    payload      TEXT     NOT NULL,
    received_at  DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    claimed_at   DATETIME,
    processed_at DATETIME,
    attempts     INTEGER  NOT NULL DEFAULT 0,
    last_error   TEXT,
    synthetic    BOOLEAN  NOT NULL DEFAULT 0,
    run_id       INTEGER,
    UNIQUE (source, event_id)
);
-- app-tables: end

CREATE TABLE IF NOT EXISTS reconciliation_runs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    provider         TEXT     NOT NULL,
    account          TEXT     NOT NULL DEFAULT '',
    window_start     DATETIME NOT NULL,
    window_end       DATETIME NOT NULL,
    started_at       DATETIME NOT NULL,
    finished_at      DATETIME,
    status           TEXT     NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'interrupted')),
    trigger          TEXT     NOT NULL CHECK (trigger IN ('schedule', 'manual', 'api')),
    triggered_by     TEXT     NOT NULL DEFAULT '',
    dry_run          BOOLEAN  NOT NULL,
    mode             TEXT     NOT NULL DEFAULT '',
    examined         INTEGER  NOT NULL DEFAULT 0,
    in_sync          INTEGER  NOT NULL DEFAULT 0,
    repaired         INTEGER  NOT NULL DEFAULT 0,
    refused          INTEGER  NOT NULL DEFAULT 0,
    reported         INTEGER  NOT NULL DEFAULT 0,
    synthetic_events INTEGER  NOT NULL DEFAULT 0,
    api_requests     INTEGER  NOT NULL DEFAULT 0,
    events_read      INTEGER  NOT NULL DEFAULT 0,
    error            TEXT,
    notes            TEXT     NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS reconciliation_runs_checkpoint_idx ON reconciliation_runs (provider, account, status, window_end);

CREATE TABLE IF NOT EXISTS drift_items (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id         INTEGER  NOT NULL REFERENCES reconciliation_runs (id),
    provider       TEXT     NOT NULL,
    provider_id    TEXT     NOT NULL,
    kind           TEXT     NOT NULL CHECK (kind IN ('missing_local', 'behind', 'conflict', 'stale', 'mismatch', 'unknown_status')),
    action         TEXT     NOT NULL CHECK (action IN ('repaired', 'refused', 'reported')),
    local_state    TEXT,
    provider_state TEXT,
    detail         TEXT     NOT NULL DEFAULT '{}',
    created_at     DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE INDEX IF NOT EXISTS drift_items_run_idx ON drift_items (run_id);

CREATE TABLE IF NOT EXISTS sent_notifications (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id     INTEGER  NOT NULL REFERENCES reconciliation_runs (id),
    channel    TEXT     NOT NULL,
    status     TEXT     NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts   INTEGER  NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    sent_at    DATETIME,
    UNIQUE (run_id, channel)
);

-- PostgreSQL's advisory lock becomes a row: the holder's host and pid, so a
-- lock left by a process that died on this machine can be taken over.
CREATE TABLE IF NOT EXISTS run_locks (
    key         TEXT PRIMARY KEY,
    host        TEXT     NOT NULL,
    pid         INTEGER  NOT NULL,
    acquired_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);
