-- PostgreSQL's 0013: a run's items by action in id order, for the report's
-- and the triage's pages, in the place of drift_items_run_idx.
CREATE INDEX IF NOT EXISTS drift_items_run_action_idx ON drift_items (run_id, action, id);
DROP INDEX IF EXISTS drift_items_run_idx;
