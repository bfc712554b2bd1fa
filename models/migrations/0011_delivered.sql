-- Handing recovered events to the application's worker (issue 18,
-- repair: deliver): a run that delivers missed events unprocessed instead
-- of applying them counts its delivered items here, beside repaired,
-- refused and reported. The drift_items action CHECK admits 'delivered'
-- since 0004_money_model.
ALTER TABLE reconciliation_runs ADD COLUMN IF NOT EXISTS delivered bigint NOT NULL DEFAULT 0;
