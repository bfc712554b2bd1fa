-- The provider key's mode, for dashboard links in reports.
ALTER TABLE reconciliation_runs ADD COLUMN IF NOT EXISTS mode text NOT NULL DEFAULT '';

-- A run's summary is delivered to each channel at most once, however often
-- the job is retried or rerun.
CREATE TABLE IF NOT EXISTS sent_notifications (
    id         bigserial PRIMARY KEY,
    run_id     bigint      NOT NULL REFERENCES reconciliation_runs (id),
    channel    text        NOT NULL,
    status     text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts   int         NOT NULL DEFAULT 0,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz,
    UNIQUE (run_id, channel)
);
