-- The report reads a run's items a page at a time, action by action, in id
-- order (report.eachItem: WHERE run_id = ? AND action = ? AND id > ? ORDER
-- BY id LIMIT 5000), and the triage reads its refused and reported items
-- the same way (acks.eachNeedsHuman). On drift_items_run_idx (run_id)
-- alone, with the statistics of a table analysed while it was small (as it
-- is right after the run that filled it), PostgreSQL fetched every item of
-- the run for each page and sorted them, spilling to disk past work_mem:
-- 40 ms a page on the 20,000-item month of issue 16, a cost that grows with
-- the square of a run's items. On (run_id, action, id) each page is a walk
-- of its own items in order, stopped at the page's end. The index takes
-- drift_items_run_idx's place (its prefix answers every look-up by run_id
-- the old one did), so a batch's inserts maintain as many indexes as
-- before. An item rewritten in place keeps its action unless its payment's
-- decision changed sides, so the rewrite stays heap-only (0012).
CREATE INDEX IF NOT EXISTS drift_items_run_action_idx ON drift_items (run_id, action, id);
DROP INDEX IF EXISTS drift_items_run_idx;
