ALTER TABLE reconciliation_runs ADD COLUMN progress_cursor TEXT;
ALTER TABLE reconciliation_runs ADD COLUMN progress_at DATETIME;
