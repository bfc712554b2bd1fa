package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

func TestObserve(t *testing.T) {
	m := New()
	start := time.Date(2026, 11, 20, 2, 30, 0, 0, time.UTC)
	fin := start.Add(90 * time.Second)
	res := reconcile.Result{
		Run: models.Run{ID: 7, Provider: "stripe", Account: "acct_1", Status: models.RunSucceeded, StartedAt: start, FinishedAt: &fin,
			Examined: 100, Refused: 2, SyntheticEvents: 5, EventsRead: 200},
		Drift:       map[reconcile.DriftKey]int64{{Kind: "behind", Action: "repaired"}: 3, {Kind: "stale", Action: "refused"}: 2},
		LastSuccess: fin,
	}
	done := m.Started("stripe", "acct_1")
	if got := testutil.ToFloat64(m.running.WithLabelValues("stripe", "acct_1")); got != 1 {
		t.Fatalf("in progress = %v", got)
	}
	done()
	m.Observe(context.Background(), res, map[int]int64{200: 10, 429: 3})
	m.Observe(context.Background(), reconcile.Result{}, nil) // a run that never started records nothing

	checks := map[string]float64{
		"reconciler_last_success_timestamp_seconds": float64(fin.Unix()),
		"reconciler_webhook_miss_ratio":             0.025,
		"reconciler_last_run_refused":               2,
		"reconciler_payments_examined_total":        100,
		"reconciler_synthetic_events_total":         5,
	}
	for name, want := range checks {
		var got float64
		switch name {
		case "reconciler_last_success_timestamp_seconds":
			got = testutil.ToFloat64(m.lastSuccess.WithLabelValues("stripe", "acct_1"))
		case "reconciler_webhook_miss_ratio":
			got = testutil.ToFloat64(m.missRatio.WithLabelValues("stripe", "acct_1"))
		case "reconciler_last_run_refused":
			got = testutil.ToFloat64(m.lastRunRefused.WithLabelValues("stripe", "acct_1"))
		case "reconciler_payments_examined_total":
			got = testutil.ToFloat64(m.examined.WithLabelValues("stripe", "acct_1"))
		case "reconciler_synthetic_events_total":
			got = testutil.ToFloat64(m.synthetic.WithLabelValues("stripe", "acct_1"))
		}
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := testutil.ToFloat64(m.drift.WithLabelValues("stripe", "acct_1", "stale", "refused")); got != 2 {
		t.Errorf("drift stale/refused = %v", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("stripe", "429")); got != 3 {
		t.Errorf("429s = %v", got)
	}
	// Every metric is prefixed reconciler_ (or the runtime's own).
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		n := mf.GetName()
		if !strings.HasPrefix(n, "reconciler_") && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			t.Errorf("metric %s is not prefixed", n)
		}
	}
}
