-- A run's progress: the last event of the last committed batch, so that a
-- rerun after a crash reads only what is left (issue: resumable runs).
ALTER TABLE reconciliation_runs ADD COLUMN IF NOT EXISTS progress_cursor text;
ALTER TABLE reconciliation_runs ADD COLUMN IF NOT EXISTS progress_at timestamptz;
