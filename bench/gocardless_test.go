package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
)

// gcEventsPerPayment is what gcfake.Generate produces in the window on
// average, payments created over its 30 days (measured: 2,659 payments,
// 9,228 events).
const gcEventsPerPayment = 3.47

// BenchmarkEndToEndGoCardless is BenchmarkEndToEnd for GoCardless: a fresh
// fake GoCardless account of about N events (payments created over the 30
// days before now, gcfake.Generate's Bacs timelines), reconciled by the
// built binary into an empty schema, pacing lifted. Sizes as
// BenchmarkEndToEnd's ($BENCH_SIZES). It reports the events read a second,
// the binary's own peak RSS and the requests per 100 events. DESIGN
// section 9's memory bound (under 100 MiB from 10,000 to 1,000,000 events)
// is the provider's as much as Stripe's.
func BenchmarkEndToEndGoCardless(b *testing.B) {
	for _, n := range benchSizes(b) {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			b.StopTimer()
			var r result
			for range b.N {
				r = runGoCardless(b, n)
			}
			report1(b, r)
		})
	}
}

// BenchmarkRateLimitedGoCardless is BenchmarkRateLimited for GoCardless:
// about 100,000 events (a month of Bacs payments) at the provider's
// default pacing (providers.gocardless.requests_per_second, 10), the fake
// enforcing GoCardless's documented limit of 1,000 requests a minute. At
// that pacing the requests are the run's wall time: it reports the share
// of the wall time the request count needs (fraction_of_allowed, DESIGN
// section 9: at least 0.95), the requests per 100 events and the wall time.
func BenchmarkRateLimitedGoCardless(b *testing.B) {
	const rps = 10 // the default pacing (config.go), not set in the config
	b.StopTimer()
	var r result
	for range b.N {
		r = runGoCardlessPaced(b, 100_000, 0, 1000)
	}
	report1(b, r)
	b.ReportMetric(r.wall.Seconds(), "wall_s")
	b.ReportMetric(float64(r.run.APIRequests)/float64(rps)/r.wall.Seconds(), "fraction_of_allowed")
}

// BenchmarkRateLimitedGoCardlessLatency is BenchmarkRateLimitedGoCardless
// with every answer latency late (BenchmarkRateLimitedLatency). GoCardless's
// window is read in slices, one listed ahead while another is handed on;
// within a slice, as on Stripe, each page waits for the one before.
func BenchmarkRateLimitedGoCardlessLatency(b *testing.B) {
	const rps = 10
	b.StopTimer()
	var r result
	for range b.N {
		r = runGoCardlessAt(b, 100_000, 0, 1000, latency)
	}
	report1(b, r)
	b.ReportMetric(r.wall.Seconds(), "wall_s")
	b.ReportMetric(float64(r.run.APIRequests)/float64(rps)/r.wall.Seconds(), "fraction_of_allowed")
}

// BenchmarkVerifyAllLatencyGoCardless is BenchmarkVerifyAllLatency for
// GoCardless: `reconciler verify --all` over a month of 10,000 Bacs
// payments ($BENCH_VERIFY_PAYMENTS) at the provider's default pacing (10
// requests/s) with every answer latency late, after a run (pacing lifted,
// no latency) made the rows.
func BenchmarkVerifyAllLatencyGoCardless(b *testing.B) {
	const rps = 10
	b.StopTimer()
	db := pgtest.New(b)
	now := time.Now().UTC()
	fake := gcfake.New(gcfake.Options{Seed: 1})
	url := fake.Start()
	b.Cleanup(fake.Close)
	payments := 10_000
	if n, err := strconv.Atoi(os.Getenv("BENCH_VERIFY_PAYMENTS")); err == nil {
		payments = n
	}
	fake.Generate(gcfake.GenOptions{Payments: payments, Start: now.Add(-30 * 24 * time.Hour), End: now.Add(-time.Minute), Seed: 7})
	since := now.Add(-31 * 24 * time.Hour).Format(time.RFC3339)
	env := binaryEnv(db.URL, "GOCARDLESS_ACCESS_TOKEN=sandbox_bench", "GOCARDLESS_API_BASE="+url)
	cmd := exec.Command(binary, "run", "--config", writeConfig(b, "gocardless", 1000), "--since", since, "--format", "json")
	cmd.Env = env
	timedRun(b, cmd)
	fake.SetLatency(latency)
	var wall time.Duration
	var out verifyOut
	for range b.N {
		cmd := exec.Command(binary, "verify", "--config", writeConfig(b, "gocardless", rps), "--since", since, "--all", "-o", "json")
		cmd.Env = env
		so, se, d := timedRun(b, cmd)
		wall = d
		if err := json.Unmarshal(so, &out); err != nil {
			b.Fatalf("%v: %s\n%s", err, so, se)
		}
	}
	var requests int64
	if err := db.Raw(`SELECT api_requests FROM reconciliation_runs WHERE notes->>'command' = 'verify' ORDER BY id DESC LIMIT 1`).Scan(&requests).Error; err != nil {
		b.Fatal(err)
	}
	if out.Checked < payments*9/10 {
		b.Fatalf("verify checked %d payments", out.Checked)
	}
	b.ReportMetric(wall.Seconds(), "wall_s")
	b.ReportMetric(float64(requests), "requests")
	b.ReportMetric(float64(out.Checked), "checked")
	b.ReportMetric(float64(requests)/rps/wall.Seconds(), "fraction_of_allowed")
}

// runGoCardless generates about events events into a fresh fake GoCardless
// and runs the binary over the 31 days before now, pacing lifted.
func runGoCardless(b *testing.B, events int) result {
	return runGoCardlessPaced(b, events, 1000, 0)
}

// runGoCardlessPaced is runGoCardless with the job paced at rps requests/s
// (0: its default) and the fake limited to perMinute requests a minute (0:
// no limit).
func runGoCardlessPaced(b *testing.B, events, rps, perMinute int) result {
	b.Helper()
	return runGoCardlessAt(b, events, rps, perMinute, 0)
}

// runGoCardlessAt is runGoCardlessPaced with the fake answering every
// request latency after it came.
func runGoCardlessAt(b *testing.B, events, rps, perMinute int, latency time.Duration) result {
	b.Helper()
	db := pgtest.New(b)
	now := time.Now().UTC()
	fake := gcfake.New(gcfake.Options{Seed: 1})
	fake.SetLatency(latency)
	if perMinute > 0 {
		fake.SetRateLimit(perMinute, time.Minute)
	}
	url := fake.Start()
	b.Cleanup(fake.Close)
	payments := int(float64(events) / gcEventsPerPayment)
	fake.Generate(gcfake.GenOptions{Payments: payments, Start: now.Add(-30 * 24 * time.Hour), End: now.Add(-time.Minute), Seed: 7})

	cfg := writeConfig(b, "gocardless", rps)
	cmd := exec.Command(binary, "run", "--config", cfg, "--since", now.Add(-31*24*time.Hour).Format(time.RFC3339), "--format", "json")
	cmd.Env = binaryEnv(db.URL, "GOCARDLESS_ACCESS_TOKEN=sandbox_bench", "GOCARDLESS_API_BASE="+url)
	so, se, wall := timedRun(b, cmd)
	res := parseRun(b, so, se, wall)
	if res.run.Provider != "gocardless" {
		b.Fatalf("want the gocardless run, got %s's", res.run.Provider)
	}
	return res
}
