// Package bench measures the built binary end to end against the project's
// fake Stripe and a real PostgreSQL: throughput, list requests per 100
// events, database round trips per payment, peak RSS, and throughput under
// a provider rate limit (DESIGN section 9). Run it with `make bench`.
package bench

import (
	"bytes"
	"encoding/json"
	"errors"
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
	if b := os.Getenv("BENCH_BINARY"); b != "" {
		// A binary built elsewhere (another commit's, for a side-by-side
		// comparison in one session).
		binary = b
	} else if out, err := exec.Command("go", "build", "-o", binary, "../cmd/reconciler").CombinedOutput(); err != nil {
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

// world is a fresh fake Stripe account and an empty schema.
type world struct {
	db   *pgtest.DB
	url  string
	now  time.Time
	fake *stripefake.Server
}

// newWorld generates about events events (payments created over the last
// six days, after one payment ten days ago: the anchor) into a fresh fake
// account, closed when b ends.
func newWorld(b *testing.B, events int) world { return newWorldAt(b, events, 0) }

// newWorldAt is newWorld with the fake answering every request latency
// after it came; BENCH_STRIPE_SIZED=1 gives it Stripe-sized payloads.
func newWorldAt(b *testing.B, events int, latency time.Duration) world {
	return newWorldSized(b, events, latency, os.Getenv("BENCH_STRIPE_SIZED") == "1")
}

// newWorldSized is newWorldAt with the payloads at Stripe's size when full
// (stripefake.Options.FullObjects), as BenchmarkMonth's *_stripe_sized.
func newWorldSized(b *testing.B, events int, latency time.Duration, full bool) world {
	b.Helper()
	db := pgtest.New(b)
	now := time.Now().UTC()
	fake := stripefake.New(stripefake.Options{Seed: 1, FullObjects: full})
	fake.SetLatency(latency)
	url := fake.Start()
	b.Cleanup(fake.Close)
	acct := fake.Account("")
	acct.CreatePayment(100, "gbp", false, now.Add(-10*24*time.Hour)) // history before the window: the anchor
	payments := int(float64(events) / eventsPerPayment)
	acct.Generate(stripefake.GenOptions{Payments: payments, Start: now.Add(-6 * 24 * time.Hour), End: now.Add(-time.Minute), Seed: 7})
	return world{db: db, url: url, now: now, fake: fake}
}

// exec runs the binary with a config pacing Stripe at rps requests/s (0:
// the default pacing) and returns its stdout, stderr and wall time.
func (w world) exec(b *testing.B, rps int, args ...string) (stdout, stderr []byte, wall time.Duration) {
	b.Helper()
	return w.execState(b, rps, nil, args...)
}

// execState is exec that also hands back the process's state (its CPU
// times) when st is not nil.
func (w world) execState(b *testing.B, rps int, st **os.ProcessState, args ...string) (stdout, stderr []byte, wall time.Duration) {
	b.Helper()
	cfg := writeConfig(b, "stripe", rps)
	cmd := exec.Command(binary, append([]string{args[0], "--config", cfg}, args[1:]...)...)
	cmd.Env = binaryEnv(w.db.URL, "STRIPE_API_KEY=sk_test_bench", "STRIPE_API_BASE="+w.url)
	stdout, stderr, wall = timedRun(b, cmd)
	if st != nil {
		*st = cmd.ProcessState
	}
	return stdout, stderr, wall
}

// timedRun runs cmd inside the benchmark's timer and returns its stdout,
// stderr and wall time; stderr is also appended to $BENCH_STDERR when set.
// Any exit but 0 and 4 (drift refused) fails the benchmark.
func timedRun(b *testing.B, cmd *exec.Cmd) (stdout, stderr []byte, wall time.Duration) {
	b.Helper()
	var se bytes.Buffer
	readStdout := stdoutToFile(b, cmd)
	cmd.Stderr = &se
	b.StartTimer()
	start := time.Now()
	err := cmd.Run()
	wall = time.Since(start)
	b.StopTimer()
	stdout = readStdout()
	if p := os.Getenv("BENCH_STDERR"); p != "" {
		// The binary's logs (with GODEBUG=gctrace=1, its collections).
		if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.Write(se.Bytes())
			_ = f.Close()
		}
	}
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 4) {
		b.Fatalf("%s: %v\n%s", cmd.Args[1], err, se.String())
	}
	return stdout, se.Bytes(), wall
}

// stdoutToFile points cmd's stdout at a file of the benchmark's and
// returns what reads it back once cmd has ended. The report goes where a
// user's goes (reconciler run > report.json, a pod's log), not through a
// pipe into this process, whose heap holds the fake's month: a bytes.Buffer
// grown by copying here, on the two cores the binary shares, made the
// binary wait on the pipe for 0.4 s of the GoCardless month's 18 MB report
// (docs/benchmarks.md, session 15).
func stdoutToFile(b *testing.B, cmd *exec.Cmd) func() []byte {
	b.Helper()
	f, err := os.CreateTemp(b.TempDir(), "stdout")
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout = f
	return func() []byte {
		_ = f.Close()
		out, err := os.ReadFile(f.Name())
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
}

// runOnce reconciles a fresh account of about events events into an empty
// schema (every payment missing locally, every event synthetic: the most
// write-heavy case) and measures the binary.
func runOnce(b *testing.B, events int, rps int, extra ...string) result {
	b.Helper()
	return runWorld(b, newWorld(b, events), rps, extra...)
}

// runWorld is runOnce in the world w.
func runWorld(b *testing.B, w world, rps int, extra ...string) result {
	b.Helper()
	so, se, wall := w.exec(b, rps, append([]string{"run", "--since", w.now.Add(-7 * 24 * time.Hour).Format(time.RFC3339), "--format", "json"}, extra...)...)
	return parseRun(b, so, se, wall)
}

// parseRun reads a run's JSON report (stdout) and its logs (stderr): the
// run, its database round trips and the process's peak RSS.
func parseRun(b *testing.B, so, se []byte, wall time.Duration) result {
	b.Helper()
	var rep report.Report
	if err := json.Unmarshal(so, &rep); err != nil {
		b.Fatalf("%v\n%s", err, se)
	}
	if len(rep.Runs) != 1 {
		b.Fatalf("want one run, got %d", len(rep.Runs))
	}
	res := result{wall: wall, run: rep.Runs[0]}
	for _, line := range strings.Split(string(se), "\n") {
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

// passedOn are the variables of the benchmark's environment a binary it
// runs is given: profiles of the binary (internal/profiling), the
// collector's settings, the log level.
var passedOn = []string{"RECONCILER_CPUPROFILE", "RECONCILER_MEMPROFILE", "RECONCILER_TRACE", "GOGC", "GOMEMLIMIT", "GODEBUG", "RECONCILER_LOG_LEVEL"}

// writeConfig writes the benchmarks' config file (stuck path off, the
// provider paced at rps requests/s, 0: its default pacing) and returns
// its path.
func writeConfig(b *testing.B, provider string, rps int) string {
	b.Helper()
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	body := "run:\n  stuck_limit: -1\n"
	if rps > 0 {
		body = fmt.Sprintf("providers:\n  %s:\n    requests_per_second: %d\n", provider, rps) + body
	}
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	return cfg
}

// binaryEnv is the built binary's environment: PATH, the database, the
// provider's variables (kv) and passedOn's that are set.
func binaryEnv(databaseURL string, kv ...string) []string {
	return withPassedOn(append([]string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + databaseURL}, kv...))
}

// withPassedOn is env with passedOn's variables that are set.
func withPassedOn(env []string) []string {
	for _, k := range passedOn {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// BenchmarkVerifySample is issue 15's finance check: `reconciler verify
// --sample 1000` over a window of 50,000 payments, at the default pacing
// (20 requests/s), after a run (pacing lifted) made the rows. It reports
// the wall time and the requests verify made; the sampled payments are
// read from the window's listing (100 a page) instead of one by one.
func BenchmarkVerifySample(b *testing.B) {
	payments := 50_000
	if s := os.Getenv("BENCH_VERIFY_PAYMENTS"); s != "" {
		payments, _ = strconv.Atoi(s)
	}
	b.StopTimer()
	w := newWorld(b, int(float64(payments)*eventsPerPayment))
	since := w.now.Add(-7 * 24 * time.Hour).Format(time.RFC3339)
	w.exec(b, 1000, "run", "--since", since, "--format", "json")
	out, wall, requests, last := benchVerify(b, w.db, func() ([]byte, []byte, time.Duration) {
		return w.exec(b, 0, "verify", "--since", since, "--sample", "1000", "-o", "json")
	})
	if out.UpperBound == nil {
		b.Fatalf("no bound printed: %+v\n%s", out, last)
	}
	b.ReportMetric(wall.Seconds(), "wall_s")
	b.ReportMetric(float64(requests), "requests")
	b.ReportMetric(float64(out.Population), "population")
	b.ReportMetric(float64(out.Checked), "checked")
	b.ReportMetric(100**out.UpperBound, "upper_bound_%")
}

// BenchmarkVerifyAllLatency is `reconciler verify --all` over a week of
// 10,000 payments at the default pacing (20 requests/s) with every answer
// latency late, after a run (pacing lifted, no latency) made the rows. A
// list read through its cursor makes one request an answer's time; verify
// lists stretches of the window at once (verify.listed). It reports the
// wall time, the requests and their share of what the pacing allows.
func BenchmarkVerifyAllLatency(b *testing.B) {
	const rps = 20
	b.StopTimer()
	w := newWorld(b, int(10_000*eventsPerPayment))
	since := w.now.Add(-7 * 24 * time.Hour).Format(time.RFC3339)
	w.exec(b, 1000, "run", "--since", since, "--format", "json")
	w.fake.SetLatency(latency)
	out, wall, requests, _ := benchVerify(b, w.db, func() ([]byte, []byte, time.Duration) {
		return w.exec(b, rps, "verify", "--since", since, "--all", "-o", "json")
	})
	reportVerifyAll(b, out, wall, requests, rps, 10_000)
}

// benchVerify runs a verification b.N times (run runs the binary once) and
// returns the last one's report, wall time, stdout and the requests it
// recorded (its run's api_requests).
func benchVerify(b *testing.B, db *pgtest.DB, run func() (stdout, stderr []byte, wall time.Duration)) (out verifyOut, wall time.Duration, requests int64, stdout []byte) {
	b.Helper()
	for range b.N {
		so, se, d := run()
		wall, stdout = d, so
		if err := json.Unmarshal(so, &out); err != nil {
			b.Fatalf("%v: %s\n%s", err, so, se)
		}
	}
	if err := db.Raw(`SELECT api_requests FROM reconciliation_runs WHERE notes->>'command' = 'verify' ORDER BY id DESC LIMIT 1`).Scan(&requests).Error; err != nil {
		b.Fatal(err)
	}
	return out, wall, requests, stdout
}

// reportVerifyAll reports a `verify --all` of payments payments at rps
// requests/s: its wall time, requests, payments checked and the share of
// what its requests allow.
func reportVerifyAll(b *testing.B, out verifyOut, wall time.Duration, requests int64, rps, payments int) {
	b.Helper()
	if out.Checked < payments*9/10 {
		b.Fatalf("verify checked %d of %d payments", out.Checked, payments)
	}
	b.ReportMetric(wall.Seconds(), "wall_s")
	b.ReportMetric(float64(requests), "requests")
	b.ReportMetric(float64(out.Checked), "checked")
	b.ReportMetric(float64(requests)/float64(rps)/wall.Seconds(), "fraction_of_allowed")
}

type verifyOut struct {
	Population int      `json:"population"`
	Checked    int      `json:"checked"`
	UpperBound *float64 `json:"upper_bound"`
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

// BenchmarkListingLatency is `reconciler run --mode listing` over the
// world of BenchmarkRateLimitedLatency (20,000 events, about 8,800
// payments) at 20 requests/s with every answer latency late. The window's
// PaymentIntents are one list read through its cursor unless Stripe answers
// late, when they are listed as stretches of the window at once
// (stripe.Provider.listIntents). It reports the wall time, the requests and
// their share of what the pacing allows.
func BenchmarkListingLatency(b *testing.B) {
	const rps = 20
	b.StopTimer()
	var r result
	for range b.N {
		r = runWorld(b, newWorldAt(b, 20_000, latency), rps, "--mode", "listing")
	}
	b.ReportMetric(r.wall.Seconds(), "wall_s")
	b.ReportMetric(float64(r.run.APIRequests), "requests")
	b.ReportMetric(float64(r.run.Examined), "payments")
	b.ReportMetric(float64(r.run.APIRequests)/float64(rps)/r.wall.Seconds(), "fraction_of_allowed")
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
	// What the request count allows: the run's requests at R a second.
	b.ReportMetric(float64(r.run.APIRequests)/float64(rps)/r.wall.Seconds(), "fraction_of_allowed")
}

// latency is how long the fakes of BenchmarkRateLimitedLatency and
// BenchmarkRateLimitedGoCardlessLatency take to answer each request: a
// provider across a network, where the other benchmarks' fakes answer on
// loopback at once. 100 ms is an assumption, not a measurement of Stripe
// or GoCardless (this machine has no route to either): a round trip to
// another region and the provider's own time for a page.
// BENCH_LATENCY (a Go duration, 300ms say) measures another.
var latency = latencyFromEnv(100 * time.Millisecond)

// latencyFromEnv is BENCH_LATENCY, or def when it is unset; a value that
// is not a duration stops the benchmarks rather than measure another.
func latencyFromEnv(def time.Duration) time.Duration {
	v := os.Getenv("BENCH_LATENCY")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		panic(fmt.Sprintf("BENCH_LATENCY=%q: want a duration such as 300ms", v))
	}
	return d
}

// BenchmarkRateLimitedSlowStripeSized is BenchmarkRateLimitedLatency with
// the payloads at Stripe's size (stripefake.Options.FullObjects: events of
// 1.6 and 3.3 kB) and every answer 300 ms late: a list page of Stripe's
// across a network is more likely that than 100 ms (an assumption too),
// and larger events fill the read-aheads' bound on disk sooner.
func BenchmarkRateLimitedSlowStripeSized(b *testing.B) {
	const rps = 20
	b.StopTimer()
	var r result
	for range b.N {
		r = runWorld(b, newWorldSized(b, 20_000, 300*time.Millisecond, true), rps)
	}
	report1(b, r)
	b.ReportMetric(r.wall.Seconds(), "wall_s")
	b.ReportMetric(float64(r.run.APIRequests)/float64(rps)/r.wall.Seconds(), "fraction_of_allowed")
}

// BenchmarkRateLimitedLatency is BenchmarkRateLimited with every answer
// latency late. Stripe's events are one list read oldest first, a page at
// a time, each page's cursor from the one before: a single stream of
// requests, which makes at most one request a latency (plus the job's
// work on the page) whatever the pacing allows. It reports the same share
// of what the request count allows, and the wall time.
func BenchmarkRateLimitedLatency(b *testing.B) {
	const rps = 20
	b.StopTimer()
	var r result
	for range b.N {
		r = runWorld(b, newWorldAt(b, 20_000, latency), rps)
	}
	report1(b, r)
	b.ReportMetric(r.wall.Seconds(), "wall_s")
	b.ReportMetric(float64(r.run.APIRequests)/float64(rps)/r.wall.Seconds(), "fraction_of_allowed")
}
