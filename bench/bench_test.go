// Package bench measures the built binary end to end against the project's
// fake Stripe and a real PostgreSQL: throughput, list requests per 100
// events, database round trips per payment, peak RSS, and throughput under
// a provider rate limit (DESIGN section 9). Run it with `make bench`.
package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/report"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reconciler-bench")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "reconciler")
	if out, err := exec.Command("go", "build", "-o", binary, "../cmd/reconciler").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// eventsPerPayment is what the generator produces on average (measured).
const eventsPerPayment = 2.27

type result struct {
	wall       time.Duration
	run        report.RunReport
	roundTrips float64
	maxRSSKiB  int64
}

// runOnce reconciles a fresh account of about events events into an empty
// schema (every payment missing locally, every event synthetic: the most
// write-heavy case) and measures the binary.
func runOnce(b *testing.B, events int, rps int, extra ...string) result {
	b.Helper()
	db := pgtest.New(b)
	now := time.Now().UTC()
	fake := stripefake.New(stripefake.Options{Seed: 1})
	url := fake.Start()
	defer fake.Close()
	acct := fake.Account("")
	acct.CreatePayment(100, "gbp", false, now.Add(-10*24*time.Hour)) // history before the window: the anchor
	payments := int(float64(events) / eventsPerPayment)
	acct.Generate(stripefake.GenOptions{Payments: payments, Start: now.Add(-6 * 24 * time.Hour), End: now.Add(-time.Minute), Seed: 7})
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	body := fmt.Sprintf("providers:\n  stripe:\n    requests_per_second: %d\nrun:\n  stuck_limit: -1\n", rps)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	args := append([]string{"run", "--config", cfg, "--since", now.Add(-7 * 24 * time.Hour).Format(time.RFC3339), "--format", "json"}, extra...)
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + db.URL, "STRIPE_API_KEY=sk_test_bench", "STRIPE_API_BASE=" + url}
	for _, k := range []string{"RECONCILER_CPUPROFILE", "RECONCILER_MEMPROFILE"} {
		if v := os.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v) // profiles of the binary (cmd/reconciler/profile.go)
		}
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	b.StartTimer()
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("run: %v\n%s", err, se.String())
	}
	var rep report.Report
	if err := json.Unmarshal(so.Bytes(), &rep); err != nil {
		b.Fatal(err)
	}
	res := result{wall: wall, run: rep.Runs[0]}
	for _, line := range strings.Split(se.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "run finished":
			res.roundTrips, _ = m["db_round_trips"].(float64)
		case "process":
			// The binary reports its own peak (VmHWM): a child's rusage
			// would carry this benchmark's own peak across fork and exec.
			mib, _ := m["peak_rss_mib"].(float64)
			res.maxRSSKiB = int64(mib * 1024)
		}
	}
	return res
}

func report1(b *testing.B, r result) {
	ev := float64(r.run.EventsRead)
	b.ReportMetric(ev/r.wall.Seconds(), "events/s")
	b.ReportMetric(float64(r.run.Examined)/r.wall.Seconds(), "payments/s")
	b.ReportMetric(100*float64(r.run.APIRequests)/ev, "requests/100events")
	b.ReportMetric(r.roundTrips/float64(r.run.Examined), "roundtrips/payment")
	b.ReportMetric(float64(r.maxRSSKiB)/1024, "peakRSS_MiB")
	b.ReportMetric(ev, "events")
}

// BenchmarkEndToEnd is the throughput at 10,000, 100,000 and 1,000,000
// events with no provider latency and no pacing to speak of (1000 req/s).
func BenchmarkEndToEnd(b *testing.B) {
	for _, n := range benchSizes(b) {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			b.StopTimer()
			var r result
			for range b.N {
				r = runOnce(b, n, 1000)
			}
			report1(b, r)
		})
	}
}

// benchSizes are the window sizes in events: 10k, 100k and 1M, or
// $BENCH_SIZES (comma-separated).
func benchSizes(b *testing.B) []int {
	sizes := []int{10_000, 100_000, 1_000_000}
	if s := os.Getenv("BENCH_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	return sizes
}

// BenchmarkListing reads the same windows by object listing (path 3,
// --mode listing): every payment of a window of about N events listed with
// its charge, refunds and balance transaction, and every payout of the
// window with its balance transactions. Peak RSS stays flat: the listing
// is streamed, never collected (issue 15: under 100 MiB at 1,000,000).
func BenchmarkListing(b *testing.B) {
	for _, n := range benchSizes(b) {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			b.StopTimer()
			var r result
			for range b.N {
				r = runOnce(b, n, 1000, "--mode", "listing")
			}
			b.ReportMetric(float64(r.run.Examined)/r.wall.Seconds(), "payments/s")
			b.ReportMetric(float64(r.run.APIRequests), "requests")
			b.ReportMetric(float64(r.maxRSSKiB)/1024, "peakRSS_MiB")
			b.ReportMetric(float64(r.run.Examined), "payments")
		})
	}
}

// BenchmarkRateLimited is the throughput under a provider rate limit of R
// requests/s as a fraction of the ceiling 100·R events/s.
func BenchmarkRateLimited(b *testing.B) {
	const rps = 20
	b.StopTimer()
	var r result
	for range b.N {
		r = runOnce(b, 20_000, rps)
	}
	report1(b, r)
	b.ReportMetric(float64(r.run.EventsRead)/r.wall.Seconds()/(100*rps), "fraction_of_ceiling")
}
