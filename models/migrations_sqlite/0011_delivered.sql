-- Handing recovered events to the application's worker (issue 18); see the
-- PostgreSQL migration of the same name. Adding a column with a default
-- keeps every row; the drift_items action CHECK already admits 'delivered'
-- (the table was rebuilt for it in 0004_money_model and 0007).
ALTER TABLE reconciliation_runs ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0;
