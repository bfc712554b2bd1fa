package bench

import (
	"fmt"
	"os/exec"
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

// runGoCardless generates about events events into a fresh fake GoCardless
// and runs the binary over the 31 days before now.
func runGoCardless(b *testing.B, events int) result {
	b.Helper()
	db := pgtest.New(b)
	now := time.Now().UTC()
	fake := gcfake.New(gcfake.Options{Seed: 1})
	url := fake.Start()
	b.Cleanup(fake.Close)
	payments := int(float64(events) / gcEventsPerPayment)
	fake.Generate(gcfake.GenOptions{Payments: payments, Start: now.Add(-30 * 24 * time.Hour), End: now.Add(-time.Minute), Seed: 7})

	cfg := writeConfig(b, "gocardless", 1000)
	cmd := exec.Command(binary, "run", "--config", cfg, "--since", now.Add(-31*24*time.Hour).Format(time.RFC3339), "--format", "json")
	cmd.Env = binaryEnv(db.URL, "GOCARDLESS_ACCESS_TOKEN=sandbox_bench", "GOCARDLESS_API_BASE="+url)
	so, se, wall := timedRun(b, cmd)
	res := parseRun(b, so, se, wall)
	if res.run.Provider != "gocardless" {
		b.Fatalf("want the gocardless run, got %s's", res.run.Provider)
	}
	return res
}
