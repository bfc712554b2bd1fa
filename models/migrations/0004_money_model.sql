-- The money model of DESIGN sections 2-6 as revised (issue 10).
-- Settlement is recorded apart from the state: the payout that paid a
-- charge out, whatever the state (also refunded or chargeback).
-- app-tables: begin (the application's tables: left out of a mapped install, issue 18)
ALTER TABLE payments ADD COLUMN IF NOT EXISTS settled_at timestamptz;
ALTER TABLE payments ADD COLUMN IF NOT EXISTS payout_id text;
-- The captured amount when it differs from amount (a partial capture).
ALTER TABLE payments ADD COLUMN IF NOT EXISTS amount_captured bigint;
-- app-tables: end

-- Settlements filled in that the live worker left empty: bookkeeping, not drift.
ALTER TABLE reconciliation_runs ADD COLUMN IF NOT EXISTS settlements_recorded bigint NOT NULL DEFAULT 0;

-- repair: deliver hands events to the application's worker: items say 'delivered'.
ALTER TABLE drift_items DROP CONSTRAINT IF EXISTS drift_items_action_check;
ALTER TABLE drift_items ADD CONSTRAINT drift_items_action_check
    CHECK (action IN ('repaired', 'refused', 'reported', 'delivered'));
-- verify looks up the items of a payment across runs.
CREATE INDEX IF NOT EXISTS drift_items_payment_idx ON drift_items (provider, provider_id);
