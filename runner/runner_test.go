package runner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/logging"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// world is a service on the embedded store against a fake Stripe.
type world struct {
	svc  *Service
	fake *stripefake.Server
	now  time.Time
}

func newWorld(t *testing.T, yaml string) *world {
	t.Helper()
	fake := stripefake.New(stripefake.Options{Seed: 1})
	url := fake.Start()
	t.Cleanup(fake.Close)
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	cfg, err := config.Load(path, true, env("STRIPE_API_KEY", "sk_test_runner", "STRIPE_API_BASE", url), os.ReadFile)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	db := pgtest.NewSQLite(t).DB
	return &world{svc: &Service{Config: cfg, DB: db, Store: dbopen.Store(db, nil)}, fake: fake, now: time.Now().UTC().Truncate(time.Second)}
}

// payment gives account one payment captured three hours ago that the
// database has never heard of (a missing_local repair).
func (w *world) payment(account string, i int) {
	a := w.fake.Account(account)
	pi := a.CreatePayment(int64(1000+i), "gbp", false, w.now.Add(-3*time.Hour))
	a.Capture(pi, w.now.Add(-3*time.Hour+time.Minute))
}

// The one lifecycle: OnStart with the recorded run, the lock held until the
// run ends, OnEnd with the outcome and the provider's requests, then the
// func OnStart returned.
func TestLifecycleHooksAndLock(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "run:\n  stuck_limit: -1\n")
	w.payment("", 0)
	var events []string
	var ended Outcome
	w.svc.Hooks = Hooks{
		OnStart: func(j Job, runID int64) func() {
			events = append(events, fmt.Sprintf("start %s %d", j, runID))
			return func() { events = append(events, "done") }
		},
		OnEnd: func(_ context.Context, o Outcome) {
			ended = o
			events = append(events, fmt.Sprintf("end %d %s", o.Result.Run.ID, o.Result.Run.Status))
		},
	}
	ctx := context.Background()
	run, err := w.svc.Start(ctx, Request{Job: Job{Provider: "stripe"}, Trigger: models.TriggerAPI, TriggeredBy: "finance"})
	require.NoError(t, err)
	require.Positive(t, run.ID())
	rec, err := w.svc.Runs().Get(ctx, run.ID())
	require.NoError(t, err)
	require.Equal(t, models.RunRunning, rec.Status, "recorded before its work")
	require.Equal(t, "finance", rec.TriggeredBy)

	_, err = w.svc.Start(ctx, Request{Job: Job{Provider: "stripe"}})
	require.ErrorIs(t, err, reconcile.ErrLocked, "the lock is held from Start to the end of Execute")
	running, ok, err := w.svc.Runs().Running(ctx, "stripe", "")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, run.ID(), running.ID)
	fl, err := FanOut{Concurrency: 1}.Check([]Job{{Provider: "stripe"}})
	require.NoError(t, err)
	held := w.svc.RunAll(ctx, fl, Request{}).Err()
	require.ErrorIs(t, held, reconcile.ErrLocked)
	require.ErrorContains(t, held, fmt.Sprintf("another run holds the lock for stripe/platform (run %d, started %s): ", run.ID(), running.StartedAt.UTC().Format(time.RFC3339)))

	res, err := run.Execute(ctx)
	require.NoError(t, err)
	require.Equal(t, models.RunSucceeded, res.Run.Status)
	require.Equal(t, int64(1), res.Run.Repaired)
	require.Equal(t, []string{fmt.Sprintf("start stripe/platform %d", run.ID()), fmt.Sprintf("end %d succeeded", run.ID()), "done"}, events)
	require.True(t, ended.Started)
	require.NoError(t, ended.Err)
	require.Equal(t, map[int]int64{200: w.fake.Requests()}, ended.ByStatus, "the provider's own requests")

	// The lock was released: the next run starts.
	res, err = reconcileAgain(t, w)
	require.NoError(t, err)
	require.Zero(t, res.Run.Repaired)
}

func reconcileAgain(t *testing.T, w *world) (reconcile.Result, error) {
	t.Helper()
	run, err := w.svc.Start(context.Background(), Request{Job: Job{Provider: "stripe"}})
	require.NoError(t, err)
	return run.Execute(context.Background())
}

// A provider that cannot be built fails Start before anything is recorded.
func TestStartFailsBeforeRecording(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "")
	_, err := w.svc.Start(context.Background(), Request{Job: Job{Provider: "gocardless"}})
	require.ErrorContains(t, err, "GOCARDLESS_ACCESS_TOKEN")
	runs, err := w.svc.Runs().List(context.Background(), Filter{})
	require.NoError(t, err)
	require.Empty(t, runs)
}

// Many accounts at once on the shared transport: every account its own
// run, each observed and notified once, and the process's requests counted
// once in the metrics however many runs shared them.
func TestRunAllCountsSharedRequestsOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "run:\n  stuck_limit: -1\nproviders:\n  stripe:\n    requests_per_second: 1000\n")
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("acct_1Run%02d", i)
		ids = append(ids, id)
		w.payment(id, i)
	}
	m := metrics.New()
	var mu sync.Mutex
	var notified []int64
	w.svc.Hooks = Observe(m, func(_ context.Context, runID int64) {
		mu.Lock()
		defer mu.Unlock()
		notified = append(notified, runID)
	})
	fl, err := FanOut{AccountsFrom: AccountsFromStripe, Concurrency: 3}.Check([]Job{{Provider: "stripe"}})
	require.NoError(t, err)
	ctx := context.Background()
	fl, err = w.svc.Resolve(ctx, fl)
	require.NoError(t, err)
	got := []string{}
	for _, j := range fl.Jobs {
		got = append(got, j.Account)
	}
	slices.Sort(got)
	require.Equal(t, ids, got, "the connected accounts Stripe lists")

	b := w.svc.RunAll(ctx, fl, Request{Trigger: models.TriggerManual})
	require.NoError(t, b.Err())
	require.Len(t, b.RunIDs(), 6)
	for _, o := range b.Outcomes {
		require.Equal(t, models.RunSucceeded, o.Result.Run.Status, o.Account)
		require.Equal(t, int64(1), o.Result.Run.Repaired, o.Account)
		require.Positive(t, o.Result.Run.APIRequests, "each account counts its own requests on the shared transport")
	}
	want := b.RunIDs()
	slices.Sort(want)
	slices.Sort(notified)
	require.Equal(t, want, notified, "each recorded run notified once")

	fams, err := m.Registry().Gather()
	require.NoError(t, err)
	var counted, runs float64
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			switch f.GetName() {
			case "reconciler_provider_requests_total":
				counted += mt.GetCounter().GetValue()
			case "reconciler_runs_total":
				runs += mt.GetCounter().GetValue()
			}
		}
	}
	require.Equal(t, float64(6), runs)
	require.Equal(t, float64(w.fake.Requests()), counted, "every request of the process (the listing included) counted once")
}

// SIGTERM mid-batch: the runs in flight record themselves interrupted,
// nothing new starts, and the batch says so.
func TestRunAllStartsNothingAfterCancel(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "run:\n  stuck_limit: -1\n")
	var jobs []Job
	for i := range 6 {
		id := fmt.Sprintf("acct_1Stop%02d", i)
		w.payment(id, i)
		jobs = append(jobs, Job{Provider: "stripe", Account: id})
	}
	w.fake.SetLatency(200 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	w.svc.Hooks.OnStart = func(Job, int64) func() {
		once.Do(cancel)
		return nil
	}
	var logs bytes.Buffer
	w.svc.Log = slog.New(slog.NewTextHandler(&logs, nil))
	fl, err := FanOut{Concurrency: 1}.Check(jobs)
	require.NoError(t, err)
	b := w.svc.RunAll(ctx, fl, Request{})
	require.Len(t, b.RunIDs(), 1, "no new account starts after the cancel")
	require.Contains(t, logs.String(), `level=WARN msg="run interrupted" provider=stripe account=acct_1Stop00 run_id=`)
	require.NotContains(t, logs.String(), "run failed", "an interrupted run is no failure")
	require.Equal(t, models.RunInterrupted, b.Outcomes[0].Result.Run.Status)
	s := b.summary()
	require.Equal(t, 1, s.interrupted)
	require.Equal(t, 5, s.notStarted)
	require.True(t, strings.HasPrefix(b.Err().Error(), "run failed for stripe/acct_1Stop00: "), b.Err())
}

// The summary of a recorded run is posted once, through the process's
// store; a dry run's is not; without a webhook nothing happens.
func TestNotifierPostsOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	posts := 0
	hook := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		posts++
	}))
	t.Cleanup(hook.Close)
	w := newWorld(t, "run:\n  stuck_limit: -1\n")
	w.payment("", 0)
	ctx := context.Background()
	res, err := reconcileAgain(t, w)
	require.NoError(t, err)
	run, err := w.svc.Start(ctx, Request{Job: Job{Provider: "stripe"}, DryRun: true})
	require.NoError(t, err)
	dry, err := run.Execute(ctx)
	require.NoError(t, err)

	Notifier(w.svc.Config, w.svc.DB, w.svc.Store, metrics.New(), nil)(ctx, res.Run.ID) // no webhook configured: a no-op
	cfg, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), false, env("STRIPE_API_KEY", "sk_test_x",
		"RECONCILER_SLACK_WEBHOOK_URL", hook.URL+"/services/T000/B000/secret"), os.ReadFile)
	require.NoError(t, err)
	m := metrics.New()
	notify := Notifier(cfg, w.svc.DB, w.svc.Store, m, slog.New(slog.DiscardHandler))
	notify(ctx, res.Run.ID)
	notify(ctx, res.Run.ID)
	notify(ctx, dry.Run.ID)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, posts, "posted once; a dry run is not posted")
	fams, err := m.Registry().Gather()
	require.NoError(t, err)
	results := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "reconciler_notifications_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "result" {
					results[l.GetValue()] += mt.GetCounter().GetValue()
				}
			}
		}
	}
	require.Equal(t, map[string]float64{"sent": 1, "already_sent": 1}, results)
}

// The progress line shares stderr with the log: every log line starts a
// line of its own, and the progress line is ended when the runs are done.
func TestShowProgressEndsItsLine(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelError} {
		w := newWorld(t, "run:\n  stuck_limit: -1\n")
		w.payment("", 0)
		var out bytes.Buffer
		term := logging.NewTerminal(&out)
		w.svc.Log = slog.New(slog.NewTextHandler(term, &slog.HandlerOptions{Level: level}))
		fl, err := FanOut{Concurrency: 1}.Check([]Job{{Provider: "stripe"}})
		require.NoError(t, err)
		req := Request{}
		req.ShowProgress(term)
		require.NoError(t, w.svc.RunAll(context.Background(), fl, req).Err())
		s := out.String()
		require.Contains(t, s, "\r\033[Krun ", level)
		require.True(t, strings.HasSuffix(s, "\n"), "the progress line is ended: %q", s)
		for _, line := range strings.Split(s, "\n") {
			if i := strings.Index(line, "\r\033[K"); i >= 0 {
				require.NotContains(t, line[i:], "level=", "a log line written into the progress line: %q", line)
			}
		}
		if level == slog.LevelError {
			require.Equal(t, 1, strings.Count(s, "\n"), "only the progress line: %q", s)
		}
	}
}
