-- What a run carries about a payment whose facts may continue in a later
-- batch (reconcile/engine.go, carried): kept here rather than in memory so
-- that memory stays flat however many payments a window holds. Rows live
-- for the run that wrote them; a run deletes its own at the end, and the
-- leftovers of a run that died are deleted by the next run of its provider
-- and account.
CREATE TABLE IF NOT EXISTS reconciler_carry (
    run_id      bigint  NOT NULL,
    provider_id text    NOT NULL,
    state       jsonb   NOT NULL,
    PRIMARY KEY (run_id, provider_id)
);
