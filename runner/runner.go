// Package runner is the run service. It turns the configuration and a
// caller's choices into jobs (one per provider and account), builds their
// provider clients, runs them one at a time or many at once under one
// request budget, and gives every run one lifecycle — started, executed,
// observed, notified, logged — whether `reconciler run`, serve's schedule or
// its HTTP API asked for it. Runs is the one reader of the run record that
// the server and the report command share.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/logging"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/transport"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
)

// Service starts runs. One process has one Service: it holds the process's
// database and, once Resolve has seen several Stripe accounts, the one
// paced transport all their clients share.
type Service struct {
	// Config is the process's configuration: providers, run defaults and
	// the database pool's size.
	Config config.Config
	// DB and Store are the process's database: runs write through Store;
	// the report and the chat notification read through DB.
	DB    *gorm.DB
	Store store.Store
	// Clock is every run's clock; nil is the wall clock.
	Clock clock.Clock
	Log   *slog.Logger
	Hooks Hooks

	// budget is the paced transport every Stripe client shares when
	// several Stripe accounts run (Resolve sets it): requests_per_second is
	// then the whole process's budget.
	budget   *transport.Transport
	mu       sync.Mutex
	reported map[int]int64 // budget's requests already handed to OnEnd
}

// Request is one run to start.
type Request struct {
	Job
	// Since and Until bound the window [Since, Until); zero values take
	// the engine's defaults (reconcile.Options).
	Since, Until time.Time
	DryRun       bool
	// Mode is how the window is read (reconcile.ModeAuto, ModeListing,
	// ModeEvents); "" is auto.
	Mode string
	// Repair overrides run.repair for this run (reconcile.RepairApply,
	// RepairDeliver); "" keeps the configuration's.
	Repair string
	// Trigger (models.Trigger*) and TriggeredBy are recorded on the run.
	Trigger, TriggeredBy string
	// Progress, when set, is called after every batch.
	Progress func(reconcile.Progress)
	// endProgress, when set, ends the progress line (ShowProgress).
	endProgress func()
}

// Hooks are what observes every run's lifecycle; each is optional.
type Hooks struct {
	// OnStart is called once a run is recorded, before its work; the func
	// it returns, when not nil, is called once the run has ended (after
	// OnEnd).
	OnStart func(j Job, runID int64) (done func())
	// OnEnd is called once with every recorded run when it has ended.
	OnEnd func(ctx context.Context, o Outcome)
}

// Observe is the hooks that count every run in m (a dry run only in its
// own counter: metrics.Metrics.Observe) and then, when notify is not nil,
// post the run's summary with it (Notifier).
func Observe(m *metrics.Metrics, notify func(ctx context.Context, runID int64)) Hooks {
	return Hooks{OnEnd: func(ctx context.Context, o Outcome) {
		m.Observe(ctx, o.Result, o.ByStatus)
		if notify != nil && o.Result.Run.ID != 0 {
			notify(ctx, o.Result.Run.ID)
		}
	}}
}

// Outcome is how one job's run ended.
type Outcome struct {
	Job
	// Started is false for a job RunAll never began (its ctx ended first).
	Started bool
	Result  reconcile.Result
	Err     error
	// ByStatus are the run's provider requests by HTTP status, each counted
	// once however many runs share a transport (set for OnEnd only).
	ByStatus map[int]int64
}

// Run is a run that has started: it holds the lock, its row is recorded
// running. Execute must be called once.
type Run struct {
	s    *Service
	job  Job
	p    reconcile.Provider
	h    *reconcile.Handle
	log  *slog.Logger
	done func()
}

// ID is the recorded run's id.
func (r *Run) ID() int64 { return r.h.RunID() }

// Start builds the request's provider, takes the run lock and records the
// run as running, so that a caller can answer with its id before the work
// begins. It returns reconcile.ErrLocked when another run holds the lock:
// the lock is the only arbiter, between the runs of this process, of other
// replicas and of CronJob pods alike.
func (s *Service) Start(ctx context.Context, req Request) (*Run, error) {
	log := s.logger().With("provider", req.Provider, "account", req.Account)
	var tr *transport.Transport
	if req.Provider == stripe.Name {
		tr = s.budget
	}
	p, err := newProvider(s.Config, req.Provider, tr, log)
	if err != nil {
		return nil, err
	}
	o := engineOptions(s.Config, p)
	o.Store, o.DB, o.Clock, o.Logger = s.Store, s.DB, s.Clock, s.logger()
	o.Account, o.Since, o.Until, o.DryRun, o.Mode = req.Account, req.Since, req.Until, req.DryRun, req.Mode
	o.Trigger, o.TriggeredBy, o.Progress = req.Trigger, req.TriggeredBy, req.Progress
	if req.Repair != "" {
		o.Repair = req.Repair
	}
	h, err := reconcile.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	r := &Run{s: s, job: req.Job, p: p, h: h, log: log}
	if s.Hooks.OnStart != nil {
		r.done = s.Hooks.OnStart(req.Job, h.RunID())
	}
	return r, nil
}

// Execute does the run's work and ends its lifecycle: the outcome goes to
// Hooks.OnEnd, a failure to the log.
func (r *Run) Execute(ctx context.Context) (reconcile.Result, error) {
	res, err := r.h.Execute(ctx)
	if r.s.Hooks.OnEnd != nil {
		r.s.Hooks.OnEnd(ctx, Outcome{Job: r.job, Started: true, Result: res, Err: err, ByStatus: r.s.byStatus(r.p, res)})
	}
	if r.done != nil {
		r.done()
	}
	switch {
	case err != nil && interrupted(res, err):
		r.log.Warn("run interrupted", "run_id", r.ID(), "error", err)
	case err != nil:
		r.log.Error("run failed", "run_id", r.ID(), "error", err)
	}
	return res, err
}

// interrupted reports whether a run's error is its context's end (SIGTERM,
// a shutdown), not a failure: the run is recorded interrupted.
func interrupted(res reconcile.Result, err error) bool {
	return res.Run.Status == models.RunInterrupted || errors.Is(err, context.Canceled)
}

// byStatus is what a run adds to the requests by status: its provider's
// own counts, or, on the shared transport, what the transport counted
// since a run last reported it, so that the process's requests are counted
// once whatever the number of runs.
func (s *Service) byStatus(p reconcile.Provider, res reconcile.Result) map[int]int64 {
	if p.Name() != stripe.Name || s.budget == nil {
		if c, ok := p.(reconcile.StatusCounter); ok {
			return c.RequestsByStatus()
		}
		return nil
	}
	if res.Run.ID == 0 {
		return nil // not observed: the next recorded run reports these
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.budget.ByStatus()
	d := map[int]int64{}
	for code, n := range now {
		if n > s.reported[code] {
			d[code] = n - s.reported[code]
		}
	}
	s.reported = now
	return d
}

func (s *Service) logger() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// ShowProgress shows the runs' progress on one line of w, rewritten after
// every batch (Progress) and ended when RunAll is done. Through a
// logging.Terminal (the command line's stderr) the log's lines and the
// error message end it first too.
func (r *Request) ShowProgress(w io.Writer) {
	t, ok := w.(*logging.Terminal)
	if !ok {
		t = logging.NewTerminal(w)
	}
	r.Progress = func(p reconcile.Progress) {
		rate := 0.0
		if s := p.Elapsed.Seconds(); s > 0 {
			rate = float64(p.EventsRead) / s
		}
		t.Progress(fmt.Sprintf("run %d: %d events, %d payments decided, %d repaired, %d refused, %d requests, %.0f events/s, %s",
			p.RunID, p.EventsRead, p.Examined, p.Repaired, p.Refused, p.Requests, rate, p.Elapsed.Truncate(time.Second)))
	}
	r.endProgress = t.End
}

// Runs is the service's reader of the run record.
func (s *Service) Runs() Runs { return Runs{Record: s.Store} }
