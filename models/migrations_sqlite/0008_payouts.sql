-- Finance (issue 15); see the PostgreSQL migration of the same name.
CREATE INDEX IF NOT EXISTS payments_payout_idx ON payments (provider, payout_id) WHERE payout_id IS NOT NULL;
