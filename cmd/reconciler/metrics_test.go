package main_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/models"
)

// scrapeMetrics is GET /metrics of s.
func scrapeMetrics(t *testing.T, s *served) string {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// metricValue is the value of the exposed series (name{labels}), and
// whether there is one.
func metricValue(t *testing.T, body, series string) (float64, bool) {
	t.Helper()
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f, true
		}
	}
	return 0, false
}

func requireMetric(t *testing.T, body, series string, want float64) {
	t.Helper()
	got, ok := metricValue(t, body, series)
	require.True(t, ok, "no series %s in\n%s", series, body)
	require.Equal(t, want, got, series)
}

// A restarted serve, before any run: build information, and the last
// success and the last run's unacknowledged refused items read from the
// database. An acknowledgement over HTTP drops the refused gauge at once;
// a dry run afterwards changes no gauge the alerts read.
func TestServeExposesMetricsBeforeAnyRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fin := w.now.Add(-2 * time.Hour)
	state := "refunded"
	past := models.Run{Provider: "stripe", WindowStart: fin.Add(-25 * time.Hour), WindowEnd: fin.Add(-time.Hour), StartedAt: fin.Add(-time.Hour),
		FinishedAt: &fin, Status: models.RunSucceeded, Trigger: models.TriggerSchedule, Refused: 1, EventsRead: 50, SyntheticEvents: 2, Notes: models.JSON("{}")}
	require.NoError(t, w.db.Create(&past).Error)
	require.NoError(t, w.db.Create(&models.DriftItem{RunID: past.ID, Provider: "stripe", ProviderID: "pi_refused", Kind: models.KindConflict,
		Action: models.ActionRefused, LocalState: &state, ProviderState: &state, Detail: models.JSON("{}")}).Error)

	s := startServe(t, w, "0 0 1 1 *")
	body := scrapeMetrics(t, s)
	// The version is the one `reconciler version` prints: an unstamped
	// build's, from the build info, never "dev".
	v := strings.TrimPrefix(strings.TrimSpace(cli(t, nil, "version").stdout), "reconciler ")
	require.NotEqual(t, "dev", v)
	require.Regexp(t, `(?m)^reconciler_build_info\{goversion="go[^"]+",revision="[^"]+",version="`+regexp.QuoteMeta(v)+`"\} 1$`, body)
	const platform = `{account="",provider="stripe"}`
	requireMetric(t, body, "reconciler_last_success_timestamp_seconds"+platform, float64(fin.Unix()))
	requireMetric(t, body, `reconciler_last_run_finished_timestamp_seconds{account="",provider="stripe",status="succeeded"}`, float64(fin.Unix()))
	requireMetric(t, body, "reconciler_last_run_refused"+platform, 1)
	requireMetric(t, body, "reconciler_webhook_miss_ratio"+platform, 0.04)
	requireMetric(t, body, `reconciler_last_run_items{account="",action="refused",provider="stripe",status="new"}`, 1)
	require.NotContains(t, body, "reconciler_runs_total{", "no run in this process yet")

	fp := acks.Fingerprint("stripe", "pi_refused", models.KindConflict, &state)
	code, resp := s.do(t, "POST", "/items/"+fp+"/ack", financeToken, `{"note":"refunded by hand, ticket 4411"}`)
	require.Equal(t, 200, code, resp)
	body = scrapeMetrics(t, s)
	requireMetric(t, body, "reconciler_last_run_refused"+platform, 0)
	requireMetric(t, body, `reconciler_last_run_items{account="",action="refused",provider="stripe",status="acknowledged"}`, 1)

	code, resp = s.do(t, "POST", "/runs", financeToken, `{"provider":"stripe","dry_run":true}`)
	require.Equal(t, 202, code, resp)
	require.Equal(t, models.RunSucceeded, s.waitRun(t, int64(resp["id"].(float64))).Status)
	var after string
	require.Eventually(t, func() bool {
		after = scrapeMetrics(t, s)
		_, ok := metricValue(t, after, `reconciler_dry_runs_total{account="",provider="stripe",status="succeeded"}`)
		return ok
	}, 10*time.Second, 20*time.Millisecond)
	for _, series := range []string{"reconciler_last_success_timestamp_seconds" + platform, "reconciler_last_run_refused" + platform,
		"reconciler_webhook_miss_ratio" + platform, `reconciler_last_run_finished_timestamp_seconds{account="",provider="stripe",status="succeeded"}`} {
		b, _ := metricValue(t, body, series)
		a, _ := metricValue(t, after, series)
		require.Equal(t, b, a, "a dry run moved %s", series)
	}
	require.NotContains(t, after, "reconciler_runs_total{", "a dry run is no run the alerts count")
	require.NotContains(t, after, "reconciler_drift_items_total{")
}

// The CronJob's pushes: a run replaces its Pushgateway group with build
// information and the alert gauges; a dry run only adds its own counter
// (POST), so the group keeps what the last real run pushed.
func TestRunPushesBuildInfoAndDryRunsAdd(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	got := make(chan string, 4)
	gw := httptestServer(t, func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + r.URL.Path + "\n" + string(b)
		rw.WriteHeader(http.StatusOK)
	})
	env := w.with("RECONCILER_PUSHGATEWAY_URL", gw)
	for _, c := range []struct {
		args        []string
		method      string
		has, hasNot []string
	}{
		{[]string{"run"}, "PUT", []string{"reconciler_build_info", "reconciler_last_run_refused", "reconciler_last_success_timestamp_seconds"}, []string{"reconciler_dry_runs_total"}},
		{[]string{"run", "--dry-run"}, "POST", []string{"reconciler_build_info", "reconciler_dry_runs_total"},
			[]string{"reconciler_last_run_refused", "reconciler_webhook_miss_ratio", "reconciler_last_success_timestamp_seconds", "reconciler_runs_total"}},
	} {
		r := cli(t, env, c.args...)
		require.Equal(t, 0, r.code, r.stderr)
		select {
		case body := <-got:
			require.True(t, strings.HasPrefix(body, c.method+" /metrics/job/reconciler"), "%v: %s", c.args, body[:40])
			for _, name := range c.has {
				require.Contains(t, body, name, c.args)
			}
			for _, name := range c.hasNot {
				require.NotContains(t, body, name, c.args)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%v: nothing pushed", c.args)
		}
	}
}
