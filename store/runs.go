package store

import (
	"context"

	"github.com/reconciler/reconciler/models"
)

// The named reads of the run record: what "the last run" means is written
// once, here, for the engine, the server, the report command and the demo.

// first returns the first run q finds, and whether there is one.
func first(ctx context.Context, r RunRecord, q RunQuery) (models.Run, bool, error) {
	q.Limit = 1
	runs, err := r.FindRuns(ctx, q)
	if err != nil || len(runs) == 0 {
		return models.Run{}, false, err
	}
	return runs[0], true, nil
}

// Latest is the newest run (by id) matching q.
func Latest(ctx context.Context, r RunRecord, q RunQuery) (models.Run, bool, error) {
	q.Order, q.Ascending = OrderID, false
	return first(ctx, r, q)
}

// LastSucceeded is the succeeded, non-dry run of (provider, account) that
// finished last.
func LastSucceeded(ctx context.Context, r RunRecord, provider, account string) (models.Run, bool, error) {
	return first(ctx, r, RunQuery{Provider: provider, Account: account, Status: models.RunSucceeded, NotDryRun: true, Order: OrderFinished})
}

// Checkpoint is the succeeded, non-dry run of (provider, account) whose
// window reaches furthest: where a default window catches up from. A run
// whose window ends after it finished (an --until in the future, recorded
// before the engine refused such windows) is no checkpoint: it read only up
// to when it ran, and counting its window end would disable catch-up until
// that date. It is ignored rather than capped at its finish, so that the
// checkpoint is always a window end some run actually recorded reading.
func Checkpoint(ctx context.Context, r RunRecord, provider, account string) (models.Run, bool, error) {
	return first(ctx, r, RunQuery{Provider: provider, Account: account, Status: models.RunSucceeded, NotDryRun: true,
		WindowRead: true, Order: OrderWindowEnd})
}

// LastWriting is the newest non-dry run of (provider, account), whatever
// its status: the run a crashed run's successor resumes from.
func LastWriting(ctx context.Context, r RunRecord, provider, account string) (models.Run, bool, error) {
	return Latest(ctx, r, RunQuery{Provider: provider, Account: account, NotDryRun: true})
}

// Running is the newest running run of (provider, account).
func Running(ctx context.Context, r RunRecord, provider, account string) (models.Run, bool, error) {
	return Latest(ctx, r, RunQuery{Provider: provider, Account: account, Status: models.RunRunning})
}
