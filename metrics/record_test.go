package metrics

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

func ptr[T any](v T) *T { return &v }

// addRun records a finished run of stripe's platform account with refused
// conflicts for ids and one reported mismatch.
func addRun(t *testing.T, db *gorm.DB, r models.Run, refused ...string) models.Run {
	t.Helper()
	r.Provider, r.Trigger, r.Notes = "stripe", models.TriggerSchedule, models.JSON("{}")
	r.WindowStart, r.WindowEnd = r.StartedAt.Add(-24*time.Hour), r.StartedAt
	r.Refused, r.Reported = int64(len(refused)), 1
	require.NoError(t, db.Create(&r).Error)
	for _, id := range refused {
		require.NoError(t, db.Create(&models.DriftItem{RunID: r.ID, Provider: "stripe", ProviderID: id, Kind: models.KindConflict,
			Action: models.ActionRefused, LocalState: ptr("captured"), ProviderState: ptr("refunded"), Detail: models.JSON("{}")}).Error)
	}
	require.NoError(t, db.Create(&models.DriftItem{RunID: r.ID, Provider: "stripe", ProviderID: "pi_mismatch", Kind: models.KindMismatch,
		Action: models.ActionReported, LocalState: ptr("captured"), ProviderState: ptr("captured"), Detail: models.JSON("{}")}).Error)
	return r
}

// target is the refused conflict of pi in run, as `reconciler ack` finds it.
func target(run models.Run, pi string) []acks.Target {
	return []acks.Target{{Fingerprint: acks.Fingerprint("stripe", pi, models.KindConflict, ptr("refunded")), RunID: run.ID, Provider: "stripe",
		ProviderID: pi, Kind: models.KindConflict, Action: models.ActionRefused, LocalState: ptr("captured"), ProviderState: ptr("refunded")}}
}

// scrape is GET /metrics of m.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, 200, rec.Code)
	return rec.Body.String()
}

// sample is the value of the series line (name and labels as exposed),
// failing the test when there is none.
func sample(t *testing.T, body, series string) float64 {
	t.Helper()
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	t.Fatalf("no series %s in:\n%s", series, body)
	return 0
}

const platform = `{account="",provider="stripe"}`

func items(action, status string) string {
	return `reconciler_last_run_items{account="",action="` + action + `",provider="stripe",status="` + status + `"}`
}

type world struct {
	db  *gorm.DB
	m   *Metrics
	log *bytes.Buffer
	at  time.Time
}

func newWorld(t *testing.T, every time.Duration) *world {
	db := pgtest.New(t).DB
	var log bytes.Buffer
	w := &world{db: db, log: &log, at: time.Date(2026, 11, 20, 2, 0, 0, 0, time.UTC)}
	w.m = NewWith(Options{Version: "v1.2.3", DB: db, Runs: dbopen.Store(db, nil), RefreshEvery: every,
		Log: slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))})
	return w
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// A fresh serve (Watch at start, no run in this process) exposes the build
// and, read from the database, the last success, and the last finished
// non-dry run's refused items, miss ratio and finish; a later dry run in
// the database shows nowhere.
func TestWatchExposesTheRecordBeforeAnyRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t, time.Hour)
	ok := addRun(t, w.db, models.Run{Status: models.RunSucceeded, StartedAt: w.at, FinishedAt: ptr(w.at.Add(10 * time.Minute)),
		EventsRead: 100, SyntheticEvents: 1}, "pi_1")
	failedAt := w.at.Add(24 * time.Hour)
	addRun(t, w.db, models.Run{Status: models.RunFailed, StartedAt: failedAt, FinishedAt: ptr(failedAt.Add(time.Minute)),
		EventsRead: 200, SyntheticEvents: 10}, "pi_1", "pi_2")
	dryAt := failedAt.Add(time.Hour)
	addRun(t, w.db, models.Run{Status: models.RunSucceeded, DryRun: true, StartedAt: dryAt, FinishedAt: ptr(dryAt.Add(time.Minute))})
	addRun(t, w.db, models.Run{Status: models.RunRunning, StartedAt: dryAt.Add(time.Hour)})

	before := scrape(t, w.m)
	require.Contains(t, before, `reconciler_build_info{goversion="`)
	require.NotContains(t, before, "reconciler_last_success_timestamp_seconds{", "nothing read yet")

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.m.Watch(ctx, []Key{{Provider: "stripe"}})
	body := scrape(t, w.m)
	v, rev, gov := build("v1.2.3")
	require.Equal(t, 1.0, sample(t, body, `reconciler_build_info{goversion="`+gov+`",revision="`+rev+`",version="`+v+`"}`))
	require.Equal(t, float64(ok.FinishedAt.Unix()), sample(t, body, "reconciler_last_success_timestamp_seconds"+platform))
	require.Equal(t, float64(failedAt.Add(time.Minute).Unix()),
		sample(t, body, `reconciler_last_run_finished_timestamp_seconds{account="",provider="stripe",status="failed"}`))
	require.Equal(t, 2.0, sample(t, body, "reconciler_last_run_refused"+platform), "the failed run's, not the dry run's")
	require.Equal(t, 0.05, sample(t, body, "reconciler_webhook_miss_ratio"+platform))
	require.Equal(t, 1.0, sample(t, body, items(models.ActionRefused, acks.StatusNew)), "pi_2")
	require.Equal(t, 1.0, sample(t, body, items(models.ActionRefused, acks.StatusOpen)), "pi_1, in the run before too")
	require.Equal(t, 0.0, sample(t, body, items(models.ActionRefused, acks.StatusAcknowledged)))
	require.Equal(t, 1.0, sample(t, body, items(models.ActionReported, acks.StatusOpen)))
	require.NotContains(t, body, "reconciler_runs_total{", "counters count this process's runs only")
	require.Empty(t, w.log.String())
}

// An acknowledgement, then a refresh (serve's OnAck): the refused gauge
// drops to the unacknowledged items and the item moves to acknowledged;
// reopened, it counts again.
func TestAcknowledgementThenRefreshDropsRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, time.Hour)
	run := addRun(t, w.db, models.Run{Status: models.RunSucceeded, StartedAt: w.at, FinishedAt: ptr(w.at.Add(time.Minute))}, "pi_1", "pi_2")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.m.Watch(ctx, []Key{{Provider: "stripe"}})
	require.Equal(t, 2.0, sample(t, scrape(t, w.m), "reconciler_last_run_refused"+platform))

	targets := target(run, "pi_1")
	_, err := acks.Record(ctx, w.db, targets, "alice", "refunded by hand, ticket 4411", w.at.Add(time.Hour), false)
	require.NoError(t, err)
	require.Equal(t, 2.0, sample(t, scrape(t, w.m), "reconciler_last_run_refused"+platform), "not read again yet")
	w.m.Refresh(ctx)
	body := scrape(t, w.m)
	require.Equal(t, 1.0, sample(t, body, "reconciler_last_run_refused"+platform))
	require.Equal(t, 1.0, sample(t, body, items(models.ActionRefused, acks.StatusAcknowledged)))
	require.Equal(t, 1.0, sample(t, body, items(models.ActionRefused, acks.StatusNew)))

	// The next run finds both again: only pi_2 is refused and unacknowledged.
	next := addRun(t, w.db, models.Run{Status: models.RunSucceeded, StartedAt: w.at.Add(24 * time.Hour), FinishedAt: ptr(w.at.Add(25 * time.Hour))}, "pi_1", "pi_2")
	w.m.Observe(ctx, reconcile.Result{Run: next, LastSuccess: *next.FinishedAt}, nil)
	body = scrape(t, w.m)
	require.Equal(t, 1.0, sample(t, body, "reconciler_last_run_refused"+platform), "run %d has 2 refused, 1 acknowledged", next.ID)
	require.Equal(t, 1.0, sample(t, body, items(models.ActionRefused, acks.StatusOpen)))

	_, err = acks.Record(ctx, w.db, targets, "bob", "the refund bounced", w.at.Add(26*time.Hour), true)
	require.NoError(t, err)
	w.m.Refresh(ctx)
	require.Equal(t, 2.0, sample(t, scrape(t, w.m), "reconciler_last_run_refused"+platform), "reopened")
	require.NotEqual(t, run.ID, next.ID)
}

// `reconciler ack` runs in another process: Watch's periodic read shows it
// without any call here.
func TestWatchRefreshesPeriodically(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 20*time.Millisecond)
	run := addRun(t, w.db, models.Run{Status: models.RunSucceeded, StartedAt: w.at, FinishedAt: ptr(w.at.Add(time.Minute))}, "pi_1")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.m.Watch(ctx, []Key{{Provider: "stripe"}})
	require.Equal(t, 1.0, testutil.ToFloat64(w.m.lastRunRefused.WithLabelValues("stripe", "")))
	_, err := acks.Record(ctx, w.db, target(run, "pi_1"), "alice", "looked at it", w.at.Add(time.Hour), false)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return testutil.ToFloat64(w.m.lastRunRefused.WithLabelValues("stripe", "")) == 0 },
		10*time.Second, 10*time.Millisecond)
}

// A refresh that cannot read the database keeps every value and warns.
func TestFailedRefreshKeepsTheValues(t *testing.T) {
	t.Parallel()
	w := newWorld(t, time.Hour)
	addRun(t, w.db, models.Run{Status: models.RunSucceeded, StartedAt: w.at, FinishedAt: ptr(w.at.Add(time.Minute)), EventsRead: 10, SyntheticEvents: 1}, "pi_1")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.m.Watch(ctx, []Key{{Provider: "stripe"}})
	before := scrape(t, w.m)
	require.Equal(t, 1.0, sample(t, before, "reconciler_last_run_refused"+platform))

	sqlDB, err := w.db.DB()
	require.NoError(t, err)
	require.NoError(t, sqlDB.Close())
	w.m.Refresh(ctx)
	after := scrape(t, w.m)
	for _, s := range []string{"reconciler_last_run_refused" + platform, "reconciler_webhook_miss_ratio" + platform,
		"reconciler_last_success_timestamp_seconds" + platform, items(models.ActionRefused, acks.StatusNew)} {
		require.Equal(t, sample(t, before, s), sample(t, after, s), s)
	}
	require.Contains(t, w.log.String(), "level=WARN msg=\"metrics not refreshed from the database; they keep their values\"")

	// A run that ends now counts all its refused items: a read error
	// never clears the alert.
	fin := w.at.Add(25 * time.Hour)
	w.m.Observe(ctx, reconcile.Result{Run: models.Run{ID: 99, Provider: "stripe", Status: models.RunSucceeded, StartedAt: fin.Add(-time.Minute),
		FinishedAt: &fin, Refused: 3}}, nil)
	require.Equal(t, 3.0, testutil.ToFloat64(w.m.lastRunRefused.WithLabelValues("stripe", "")))
	require.Contains(t, w.log.String(), "acknowledgements not read")
}
