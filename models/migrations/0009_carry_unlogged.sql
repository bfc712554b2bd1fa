-- The carry (0006) is a run's scratch space: a run writes and reads only its
-- own rows, deletes them at its end, and the next run of its provider and
-- account deletes a dead run's leftovers unread. No run ever reads another's
-- carry, so it needs no crash safety: UNLOGGED, its writes skip the WAL.
-- PostgreSQL empties an unlogged table after a crash of its own, when every
-- run that was writing one has lost its connection and failed anyway. On an
-- empty schema, where every payment is carried, its WAL was a third of the
-- job's writes with fsync on (issue 16).
ALTER TABLE reconciler_carry SET UNLOGGED;
