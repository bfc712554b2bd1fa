package metrics

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
)

// ReadTimeout bounds each read of the database the metrics make: the
// triage at a run's end, a Refresh of every job.
const ReadTimeout = 10 * time.Second

// DefaultRefreshEvery is how often Watch reads the gauges again.
const DefaultRefreshEvery = time.Minute

// Key names a job's series: its provider and account ("" the platform).
type Key struct {
	Provider, Account string
}

// view is what one read found of a job: its last finished non-dry run
// and what depends on it.
type view struct {
	run   models.Run // the last finished non-dry run, when found
	found bool
	// refused is the run's unacknowledged refused items.
	refused int64
	// items is the run's triage; nil when it could not be read (the items
	// gauges keep their values).
	items       *acks.Triage
	lastSuccess time.Time // zero: none
}

// shown is what a job's gauges show, so that an older read never
// overwrites a newer one (a Refresh that read before a run ended).
type shown struct {
	runID       int64
	lastSuccess time.Time
}

// show sets k's run-end gauges from v, unless they show a newer run.
func (m *Metrics) show(k Key, v view) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.shown[k]
	p, a := k.Provider, k.Account
	if !v.lastSuccess.IsZero() && !v.lastSuccess.Before(cur.lastSuccess) {
		cur.lastSuccess = v.lastSuccess
		m.lastSuccess.WithLabelValues(p, a).Set(float64(v.lastSuccess.Unix()))
	}
	if v.found && v.run.ID >= cur.runID {
		cur.runID = v.run.ID
		if f := v.run.FinishedAt; f != nil {
			m.lastRunFinished.WithLabelValues(p, a, v.run.Status).Set(float64(f.Unix()))
		}
		m.missRatio.WithLabelValues(p, a).Set(reconcile.MissRatio(v.run))
		m.lastRunRefused.WithLabelValues(p, a).Set(float64(v.refused))
		if v.items != nil {
			for _, action := range []string{models.ActionRefused, models.ActionReported} {
				c := v.items.ByAction[action]
				m.lastRunItems.WithLabelValues(p, a, action, acks.StatusNew).Set(float64(c.New))
				m.lastRunItems.WithLabelValues(p, a, action, acks.StatusOpen).Set(float64(c.Open))
				m.lastRunItems.WithLabelValues(p, a, action, acks.StatusAcknowledged).Set(float64(c.Acknowledged))
			}
		}
	}
	m.shown[k] = cur
}

// Watch makes the run-end gauges of keys (the configured jobs) known
// before any run: it reads them from the database before it returns —
// the last success, and the last finished non-dry run's unacknowledged
// refused items, items by status, miss ratio and finish — then reads them
// again every Options.RefreshEvery until ctx ends. The periodic read is
// what shows an acknowledgement made by `reconciler ack` (another
// process), and a run of another replica, within a minute. Without
// Options.DB and Runs it does nothing.
func (m *Metrics) Watch(ctx context.Context, keys []Key) {
	if m.o.DB == nil || m.o.Runs == nil {
		return
	}
	m.mu.Lock()
	for _, k := range keys {
		if _, ok := m.shown[k]; !ok {
			m.shown[k] = shown{}
		}
	}
	m.mu.Unlock()
	m.Refresh(ctx)
	every := cmp.Or(m.o.RefreshEvery, DefaultRefreshEvery)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.Refresh(ctx)
			}
		}
	}()
}

// Refresh reads the run-end gauges of every job it knows (given to Watch,
// or observed) from the database again, within ReadTimeout: after an
// acknowledgement (serve.Server.OnAck) and on Watch's ticker. A job whose
// read fails keeps its values; the failure is logged as a warning.
func (m *Metrics) Refresh(ctx context.Context) {
	if m.o.DB == nil || m.o.Runs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	defer cancel()
	m.mu.Lock()
	keys := slices.SortedFunc(maps.Keys(m.shown), func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Account, b.Account))
	})
	m.mu.Unlock()
	for _, k := range keys {
		v, err := m.read(ctx, k)
		if err != nil {
			m.o.Log.Warn("metrics not refreshed from the database; they keep their values", "provider", k.Provider, "account", k.Account, "error", err)
			if ctx.Err() != nil {
				return // the rest would fail the same way
			}
			continue
		}
		m.show(k, v)
	}
}

// read is what the database says of k's run-end gauges.
func (m *Metrics) read(ctx context.Context, k Key) (view, error) {
	var v view
	last, ok, err := store.LastSucceeded(ctx, m.o.Runs, k.Provider, k.Account)
	if err != nil {
		return v, fmt.Errorf("read the last succeeded run: %w", err)
	}
	if ok && last.FinishedAt != nil {
		v.lastSuccess = *last.FinishedAt
	}
	v.run, v.found, err = store.Latest(ctx, m.o.Runs, store.RunQuery{Provider: k.Provider, Account: k.Account, NotDryRun: true, NotStatus: models.RunRunning})
	if err != nil {
		return v, fmt.Errorf("read the last finished run: %w", err)
	}
	if !v.found {
		return v, nil
	}
	tri, err := acks.Load(ctx, m.o.DB, v.run)
	if err != nil {
		return v, err
	}
	v.items, v.refused = &tri, tri.ByAction[models.ActionRefused].Unacknowledged()
	return v, nil
}
