-- The contract tables of DESIGN section 6.
-- app-tables: begin (the application's tables: left out of a mapped install, issue 18)
CREATE TABLE IF NOT EXISTS payments (
    id                bigserial PRIMARY KEY,
    provider          text        NOT NULL,
    account           text        NOT NULL DEFAULT '',
    provider_id       text        NOT NULL,
    state             text        NOT NULL,
    amount            bigint      NOT NULL,
    currency          text        NOT NULL,
    amount_refunded   bigint      NOT NULL DEFAULT 0,
    source_updated_at timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, provider_id)
);
-- The stuck-payment path selects non-terminal rows by age.
CREATE INDEX IF NOT EXISTS payments_stuck_idx
    ON payments (provider, account, source_updated_at)
    WHERE state IN ('created', 'authorised', 'captured');

CREATE TABLE IF NOT EXISTS webhook_events (
    id           bigserial PRIMARY KEY,
    source       text        NOT NULL,
    event_id     text        NOT NULL,
    event_type   text        NOT NULL,
    payload      jsonb       NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    claimed_at   timestamptz,
    processed_at timestamptz,
    attempts     int         NOT NULL DEFAULT 0,
    last_error   text,
    synthetic    boolean     NOT NULL DEFAULT false,
    run_id       bigint,
    UNIQUE (source, event_id)
);
-- app-tables: end

CREATE TABLE IF NOT EXISTS reconciliation_runs (
    id               bigserial PRIMARY KEY,
    provider         text        NOT NULL,
    account          text        NOT NULL DEFAULT '',
    window_start     timestamptz NOT NULL,
    window_end       timestamptz NOT NULL,
    started_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    status           text        NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'interrupted')),
    trigger          text        NOT NULL CHECK (trigger IN ('schedule', 'manual', 'api')),
    triggered_by     text        NOT NULL DEFAULT '',
    dry_run          boolean     NOT NULL,
    examined         bigint      NOT NULL DEFAULT 0,
    in_sync          bigint      NOT NULL DEFAULT 0,
    repaired         bigint      NOT NULL DEFAULT 0,
    refused          bigint      NOT NULL DEFAULT 0,
    reported         bigint      NOT NULL DEFAULT 0,
    synthetic_events bigint      NOT NULL DEFAULT 0,
    api_requests     bigint      NOT NULL DEFAULT 0,
    events_read      bigint      NOT NULL DEFAULT 0,
    error            text,
    notes            jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS reconciliation_runs_checkpoint_idx
    ON reconciliation_runs (provider, account, status, window_end);

CREATE TABLE IF NOT EXISTS drift_items (
    id             bigserial PRIMARY KEY,
    run_id         bigint      NOT NULL REFERENCES reconciliation_runs (id),
    provider       text        NOT NULL,
    provider_id    text        NOT NULL,
    kind           text        NOT NULL CHECK (kind IN ('missing_local', 'behind', 'conflict', 'stale', 'mismatch', 'unknown_status')),
    action         text        NOT NULL CHECK (action IN ('repaired', 'refused', 'reported')),
    local_state    text,
    provider_state text,
    detail         jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS drift_items_run_idx ON drift_items (run_id);
