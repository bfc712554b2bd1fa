package runner

import (
	"cmp"
	"context"
	"slices"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// Runs reads the run record for every reader outside the engine (the
// server, the report command): what "the latest run", "the last success"
// and "the run in progress" mean is the store's (store/runs.go), asked
// here.
type Runs struct{ Record store.RunRecord }

// Get reads run id; store.ErrNotFound when there is none.
func (r Runs) Get(ctx context.Context, id int64) (models.Run, error) {
	return r.Record.GetRun(ctx, id)
}

// Latest is the newest run matching q, and whether there is one.
func (r Runs) Latest(ctx context.Context, q store.RunQuery) (models.Run, bool, error) {
	return store.Latest(ctx, r.Record, q)
}

// LatestFinished is the newest run that is no longer running: of provider
// and account when provider is set, else of any.
func (r Runs) LatestFinished(ctx context.Context, provider, account string) (models.Run, bool, error) {
	return r.Latest(ctx, store.RunQuery{Provider: provider, Account: account, NotStatus: models.RunRunning})
}

// LastSucceeded is the succeeded, non-dry run of provider and account that
// finished last.
func (r Runs) LastSucceeded(ctx context.Context, provider, account string) (models.Run, bool, error) {
	return store.LastSucceeded(ctx, r.Record, provider, account)
}

// Running is the newest running run of provider and account.
func (r Runs) Running(ctx context.Context, provider, account string) (models.Run, bool, error) {
	return store.Running(ctx, r.Record, provider, account)
}

// Filter selects runs for List: each field that is not nil must equal the
// run's column; Limit caps the list (0: no cap).
type Filter struct {
	Provider, Account, Status, Trigger *string
	Limit                              int
}

// List is the runs f selects, newest first.
func (r Runs) List(ctx context.Context, f Filter) ([]models.Run, error) {
	for _, v := range []*string{f.Provider, f.Status, f.Trigger} {
		if v != nil && *v == "" {
			return nil, nil // the engine never records a run without these
		}
	}
	q := store.RunQuery{Limit: f.Limit, AnyAccount: f.Account == nil}
	if f.Account != nil {
		q.Account = *f.Account
	}
	if f.Status != nil {
		q.Status = *f.Status
	}
	if f.Trigger != nil {
		q.Trigger = *f.Trigger
	}
	switch {
	case f.Provider != nil:
		q.Provider = *f.Provider
	case f.Account != nil:
		// The store selects an account within a provider: ask each, merge.
		var runs []models.Run
		for _, p := range Providers {
			q.Provider = p
			rs, err := r.Record.FindRuns(ctx, q)
			if err != nil {
				return nil, err
			}
			runs = append(runs, rs...)
		}
		slices.SortFunc(runs, func(a, b models.Run) int { return cmp.Compare(b.ID, a.ID) })
		if f.Limit > 0 && len(runs) > f.Limit {
			runs = runs[:f.Limit]
		}
		return runs, nil
	}
	return r.Record.FindRuns(ctx, q)
}
