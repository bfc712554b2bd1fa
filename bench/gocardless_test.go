package bench

import (
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

// BenchmarkListingLatencyGoCardless is BenchmarkListingLatency for
// GoCardless: `reconciler run --mode listing` over a month of about 10,000
// Bacs payments ($BENCH_LISTING_PAYMENTS) at the provider's default pacing
// (10 requests/s) with every answer latency late, into an empty schema.
// It reports the wall time, the requests and their share of what the
// pacing allows.
func BenchmarkListingLatencyGoCardless(b *testing.B) {
	const rps = 10
	payments := 10_000
	if s := os.Getenv("BENCH_LISTING_PAYMENTS"); s != "" {
		payments, _ = strconv.Atoi(s)
	}
	b.StopTimer()
	var r result
	for range b.N {
		w := newGCWorld(b, payments, 1000)
		w.fake.SetLatency(latency)
		so, se, wall := w.exec(b, rps, "run", "--mode", "listing", "--since", w.now.Add(-31*24*time.Hour).Format(time.RFC3339), "--format", "json")
		r = parseRun(b, so, se, wall)
	}
	b.ReportMetric(r.wall.Seconds(), "wall_s")
	b.ReportMetric(float64(r.run.APIRequests), "requests")
	b.ReportMetric(float64(r.run.Examined), "payments")
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
	payments := 10_000
	if n, err := strconv.Atoi(os.Getenv("BENCH_VERIFY_PAYMENTS")); err == nil {
		payments = n
	}
	w := newGCWorld(b, payments, 0)
	since := w.now.Add(-31 * 24 * time.Hour).Format(time.RFC3339)
	w.exec(b, 1000, "run", "--since", since, "--format", "json")
	w.fake.SetLatency(latency)
	out, wall, requests, _ := benchVerify(b, w.db, func() ([]byte, []byte, time.Duration) {
		return w.exec(b, rps, "verify", "--since", since, "--all", "-o", "json")
	})
	reportVerifyAll(b, out, wall, requests, rps, payments)
}

// gcWorld is a fresh fake GoCardless of Bacs payments created over the 30
// days before now, and an empty schema.
type gcWorld struct {
	db   *pgtest.DB
	fake *gcfake.Server
	url  string
	now  time.Time
}

// newGCWorld generates payments payments into a fresh fake GoCardless,
// limited to perMinute requests a minute (0: no limit), closed when b ends.
func newGCWorld(b *testing.B, payments, perMinute int) gcWorld {
	b.Helper()
	w := gcWorld{db: pgtest.New(b), now: time.Now().UTC(), fake: gcfake.New(gcfake.Options{Seed: 1})}
	if perMinute > 0 {
		w.fake.SetRateLimit(perMinute, time.Minute)
	}
	w.url = w.fake.Start()
	b.Cleanup(w.fake.Close)
	w.fake.Generate(gcfake.GenOptions{Payments: payments, Start: w.now.Add(-30 * 24 * time.Hour), End: w.now.Add(-time.Minute), Seed: 7})
	return w
}

// exec runs the built binary's command args[0] against w paced at rps
// requests/s (0: the provider's default); stdout, stderr and wall time.
func (w gcWorld) exec(b *testing.B, rps int, args ...string) (stdout, stderr []byte, wall time.Duration) {
	b.Helper()
	cmd := exec.Command(binary, append([]string{args[0], "--config", writeConfig(b, "gocardless", rps)}, args[1:]...)...)
	cmd.Env = binaryEnv(w.db.URL, "GOCARDLESS_ACCESS_TOKEN=sandbox_bench", "GOCARDLESS_API_BASE="+w.url)
	return timedRun(b, cmd)
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
	w := newGCWorld(b, int(float64(events)/gcEventsPerPayment), perMinute)
	w.fake.SetLatency(latency)
	so, se, wall := w.exec(b, rps, "run", "--since", w.now.Add(-31*24*time.Hour).Format(time.RFC3339), "--format", "json")
	res := parseRun(b, so, se, wall)
	if res.run.Provider != "gocardless" {
		b.Fatalf("want the gocardless run, got %s's", res.run.Provider)
	}
	return res
}
