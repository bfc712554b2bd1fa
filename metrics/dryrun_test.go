package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// ownSeries are the families a dry run may change: its own counter and
// the provider requests it really made. Everything else reconciler_ is
// what alert rules and dashboards read.
var ownSeries = []string{"reconciler_dry_runs_total", "reconciler_provider_requests_total"}

// snapshot is every reconciler_ family but ownSeries, as text.
func snapshot(t *testing.T, m *Metrics) map[string]string {
	t.Helper()
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	out := map[string]string{}
	for _, mf := range mfs {
		n := mf.GetName()
		if !strings.HasPrefix(n, "reconciler_") || slices.Contains(ownSeries, n) {
			continue
		}
		var b strings.Builder
		for _, mt := range mf.GetMetric() {
			b.WriteString(mt.String() + "\n")
		}
		out[n] = b.String()
	}
	return out
}

func dryRun(status string, fin time.Time) reconcile.Result {
	return reconcile.Result{
		Run: models.Run{ID: 9, Provider: "stripe", Account: "acct_1", Status: status, DryRun: true, StartedAt: fin.Add(-time.Minute), FinishedAt: &fin,
			Examined: 40, Refused: 0, Reported: 1, SyntheticEvents: 0, EventsRead: 300},
		Drift:       map[reconcile.DriftKey]int64{{Kind: "mismatch", Action: "reported"}: 1},
		LastSuccess: fin,
	}
}

// A finance dry run after a real one: every alert gauge and counter as the
// real run left it (3 refused, 5% missed stay), the dry run counted in its
// own metric, its requests in the provider's.
func TestDryRunLeavesTheAlertSeriesAlone(t *testing.T) {
	ctx := context.Background()
	m := New()
	start := time.Date(2026, 11, 20, 2, 30, 0, 0, time.UTC)
	fin := start.Add(90 * time.Second)
	m.Observe(ctx, reconcile.Result{
		Run: models.Run{ID: 7, Provider: "stripe", Account: "acct_1", Status: models.RunSucceeded, StartedAt: start, FinishedAt: &fin,
			Examined: 100, Refused: 3, SyntheticEvents: 10, EventsRead: 200},
		Drift:       map[reconcile.DriftKey]int64{{Kind: "stale", Action: "refused"}: 3},
		LastSuccess: fin,
	}, map[int]int64{200: 10})
	before := snapshot(t, m)
	require.Contains(t, before, "reconciler_last_run_refused")

	later := fin.Add(6 * time.Hour)
	m.Observe(ctx, dryRun(models.RunSucceeded, later), map[int]int64{200: 4, 429: 1})
	m.Observe(ctx, dryRun(models.RunFailed, later.Add(time.Hour)), map[int]int64{500: 2})

	require.Equal(t, before, snapshot(t, m), "a dry run changed a series the alerts read")
	require.Equal(t, 3.0, testutil.ToFloat64(m.lastRunRefused.WithLabelValues("stripe", "acct_1")))
	require.Equal(t, 0.05, testutil.ToFloat64(m.missRatio.WithLabelValues("stripe", "acct_1")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.dryRuns.WithLabelValues("stripe", "acct_1", models.RunSucceeded)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.dryRuns.WithLabelValues("stripe", "acct_1", models.RunFailed)))
	require.Equal(t, 14.0, testutil.ToFloat64(m.requests.WithLabelValues("stripe", "200")), "a dry run's requests are real requests")
	require.Equal(t, 2.0, testutil.ToFloat64(m.requests.WithLabelValues("stripe", "500")))

	// A process that saw only dry runs exposes no alert series at all.
	dry := New()
	dry.Observe(ctx, dryRun(models.RunSucceeded, later), nil)
	for name := range snapshot(t, dry) {
		if name != "reconciler_build_info" {
			t.Errorf("a dry run alone exposes %s", name)
		}
	}
}

// The CronJob's push: after a real run it replaces the group (PUT); after
// only dry runs it adds to it (POST), so that the group keeps the gauges
// the last real run pushed.
func TestPushOfDryRunsKeepsTheGroup(t *testing.T) {
	var mu sync.Mutex
	var methods []string
	gw := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		methods = append(methods, r.Method)
		rw.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(gw.Close)
	ctx := context.Background()
	fin := time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)

	dry := New()
	dry.Observe(ctx, dryRun(models.RunSucceeded, fin), nil)
	require.NoError(t, dry.Push(ctx, gw.URL, "reconciler"))
	real := New()
	run := dryRun(models.RunSucceeded, fin)
	run.Run.DryRun = false
	real.Observe(ctx, run, nil)
	require.NoError(t, real.Push(ctx, gw.URL, "reconciler"))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{http.MethodPost, http.MethodPut}, methods)
}

// reconciler_build_info is 1, labelled with the version given and the Go
// version.
func TestBuildInfo(t *testing.T) {
	m := NewWith(Options{Version: "v1.2.3"})
	require.Equal(t, 1, testutil.CollectAndCount(m.buildInfo))
	require.Equal(t, "v1.2.3", labelOf(t, m, "reconciler_build_info", "version"))
	require.True(t, strings.HasPrefix(labelOf(t, m, "reconciler_build_info", "goversion"), "go"))
	require.NotEmpty(t, labelOf(t, m, "reconciler_build_info", "revision"))
	v, r, g := build("v1.2.3")
	require.Equal(t, 1.0, testutil.ToFloat64(m.buildInfo.WithLabelValues(v, r, g)))
	require.Equal(t, "unknown", labelOf(t, New(), "reconciler_build_info", "version"))
}

func labelOf(t *testing.T, m *Metrics, name, label string) string {
	t.Helper()
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			if l.GetName() == label {
				return l.GetValue()
			}
		}
	}
	t.Fatalf("%s{%s} not found", name, label)
	return ""
}
