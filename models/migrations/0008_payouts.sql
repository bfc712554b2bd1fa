-- Finance (issue 15): `reconciler payouts` reads, for each payout of a
-- window, the rows that name it. Without an index each payout scans the
-- payments table.
-- app-tables: begin (the application's tables: left out of a mapped install, issue 18)
CREATE INDEX IF NOT EXISTS payments_payout_idx ON payments (provider, payout_id) WHERE payout_id IS NOT NULL;
-- app-tables: end
