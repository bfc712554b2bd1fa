package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/report"
)

// BenchmarkNightRequests is the request count of one nightly run on the
// 10,000-payment scenario: payments generated over six days (the fake's
// realistic mix: captures, refunds, disputes, payouts), every fifth webhook
// lost, then `reconciler run` over the default window (the last 24 hours
// and the overlap) with the stuck-payment path on at its defaults (rows
// unmoved for 72 hours, at most 100 re-fetched). It reports the run's
// requests, per 100 events read, and what the stuck path re-fetched and
// cost (the run's notes). Requests, not speed: pacing is lifted.
func BenchmarkNightRequests(b *testing.B) {
	for range b.N {
		b.StopTimer()
		db := pgtest.New(b)
		now := time.Now().UTC()
		fake := stripefake.New(stripefake.Options{Seed: 1})
		url := fake.Start()
		acct := fake.Account("")
		acct.CreatePayment(100, "gbp", false, now.Add(-10*24*time.Hour))
		acct.Generate(stripefake.GenOptions{Payments: 10000, Start: now.Add(-6 * 24 * time.Hour), End: now.Add(-time.Minute), Seed: 7})
		ds := webhooksim.Stripe(acct.Deliveries())
		if _, _, err := webhooksim.Seed(context.Background(), db.DB, "stripe", ds, now, func(i int, _ webhooksim.Delivery) bool { return i%5 != 2 }); err != nil {
			b.Fatal(err)
		}
		cfg := filepath.Join(b.TempDir(), "config.yaml")
		if err := os.WriteFile(cfg, []byte("providers:\n  stripe:\n    requests_per_second: 1000\n"), 0o600); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(binary, "run", "--config", cfg, "--format", "json")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + db.URL, "STRIPE_API_KEY=sk_test_bench", "STRIPE_API_BASE=" + url}
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		b.StartTimer()
		err := cmd.Run()
		b.StopTimer()
		fake.Close()
		if err != nil {
			b.Fatalf("run: %v\n%s", err, se.String())
		}
		var rep report.Report
		if err := json.Unmarshal(so.Bytes(), &rep); err != nil {
			b.Fatal(err)
		}
		if p := os.Getenv("NIGHT_REPORT"); p != "" {
			_ = os.WriteFile(p, so.Bytes(), 0o600)
			_ = os.WriteFile(p+".log", se.Bytes(), 0o600)
		}
		r := rep.Runs[0]
		num := func(k string) float64 { v, _ := r.Notes[k].(float64); return v }
		b.ReportMetric(float64(r.APIRequests), "requests")
		b.ReportMetric(100*float64(r.APIRequests)/float64(max(r.EventsRead, 1)), "requests/100events")
		b.ReportMetric(float64(r.EventsRead), "events")
		b.ReportMetric(num("stuck_checked"), "stuck_checked")
		b.ReportMetric(num("stuck_api_requests"), "stuck_requests")
		if testing.Verbose() {
			fmt.Fprintf(os.Stderr, "night: %d requests, %d events, %d examined, %d repaired, notes %v\n", r.APIRequests, r.EventsRead, r.Examined, r.Repaired, r.Notes)
		}
	}
}
