-- Stripe as it really behaves (issue 13).
-- An open dispute (funds withdrawn, evidence due) is reported to support as
-- a 'dispute' item; the state changes only when the dispute closes lost.
ALTER TABLE drift_items DROP CONSTRAINT IF EXISTS drift_items_kind_check;
ALTER TABLE drift_items ADD CONSTRAINT drift_items_kind_check
    CHECK (kind IN ('missing_local', 'behind', 'conflict', 'stale', 'mismatch', 'unknown_status', 'dispute'));

-- When the stuck-payment path last re-fetched a payment: the path takes the
-- payments checked longest ago first, so a payment that cannot move yet (a
-- capture waiting for its payout) waits its turn instead of holding a slot
-- every night. Our own table: the application's payments table is never
-- altered for it.
CREATE TABLE IF NOT EXISTS reconciler_checks (
    provider    text        NOT NULL,
    account     text        NOT NULL DEFAULT '',
    provider_id text        NOT NULL,
    checked_at  timestamptz NOT NULL,
    PRIMARY KEY (provider, provider_id)
);
