package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/report"
)

// The month of issue 16 and DESIGN section 9: 20,000 payments over 30 days
// of Stripe's event log (about 2.3 events a payment with the fake's mix),
// read end to end by the built binary with pacing lifted, on whatever
// PostgreSQL scripts/test.sh started (`make bench` starts it with fsync on).
//
//   - empty: a fresh schema, every payment missing locally and every event
//     a synthetic webhook_events row (the most write-heavy case);
//   - missed_10pct, missed_33pct: the realistic night, the rows and events
//     the webhooks left when a tenth (a third) of them were lost;
//   - rerun: the same window again after a run, nothing to change: the
//     job's own CPU per event (user + system time of the process) is the
//     figure, the target at most 20 µs.
//   - empty_stripe_sized, missed_33pct_stripe_sized, rerun_stripe_sized:
//     the same with the payment intents and charges as large as Stripe's
//     own (stripefake.Options.FullObjects: events of about 1.6 and 3.3 kB
//     instead of 0.9 and 1.4), which PostgreSQL pays for by the byte and
//     the job by the byte it reads.
//
// Every case reports events/s, the job's CPU per event, peak RSS and the
// requests it made over the requests the method needs (needed_requests:
// event pages of 100, the balance-transaction pages of each payout the
// window's payout events list, one anchor; counted from the fake over
// plain HTTP, not from the job).
func BenchmarkMonth(b *testing.B) {
	payments := 20_000
	if s := os.Getenv("BENCH_MONTH_PAYMENTS"); s != "" {
		payments, _ = strconv.Atoi(s)
	}
	cases := []struct {
		name   string
		missed int // one webhook in missed is lost; 0: no webhook at all
		rerun  bool
		full   bool // Stripe-sized payloads (stripefake.Options.FullObjects)
	}{
		{"empty", 0, false, false},
		{"missed_10pct", 10, false, false},
		{"missed_33pct", 3, false, false},
		{"rerun", 10, true, false},
		{"empty_stripe_sized", 0, false, true},
		{"missed_33pct_stripe_sized", 3, false, true},
		{"rerun_stripe_sized", 10, true, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.StopTimer()
			var rs []month
			for range b.N {
				rs = append(rs, runMonth(b, payments, c.missed, c.rerun, c.full))
			}
			m := median(rs)
			b.ReportMetric(m.events/m.wall.Seconds(), "events/s")
			b.ReportMetric(m.cpu.Seconds()*1e6/m.events, "cpu_us/event")
			b.ReportMetric(m.requests/m.needed, "requests/needed")
			b.ReportMetric(m.needed, "needed_requests")
			b.ReportMetric(m.rss, "peakRSS_MiB")
			b.ReportMetric(m.events, "events")
			b.ReportMetric(m.wall.Seconds(), "wall_s")
			b.ReportMetric(m.cpu.Seconds(), "job_cpu_s")
			b.ReportMetric(m.fakeCPU.Seconds(), "fake_cpu_s")
			if m.pgCPU > 0 {
				b.ReportMetric(m.pgCPU.Seconds(), "pg_cpu_s")
			}
		})
	}
}

// month is one measured run of the month.
type month struct {
	wall, cpu        time.Duration
	fakeCPU, pgCPU   time.Duration // the benchmark process (the fake) and PostgreSQL's, over the run
	events, requests float64
	needed, rss      float64
}

func median(rs []month) month {
	sort.Slice(rs, func(i, j int) bool { return rs[i].wall < rs[j].wall })
	return rs[len(rs)/2]
}

// monthWorld is the month's fake account and schema, with the webhooks
// delivered but every missed-th (missed 0: no webhook delivered at all).
func monthWorld(b *testing.B, payments, missed int, full bool) (world, *stripefake.Server) {
	b.Helper()
	db := pgtest.New(b)
	now := time.Now().UTC()
	fake := stripefake.New(stripefake.Options{Seed: 1, FullObjects: full})
	u := fake.Start()
	b.Cleanup(fake.Close)
	acct := fake.Account("")
	acct.CreatePayment(100, "gbp", false, now.Add(-(29*24+22)*time.Hour)) // the anchor, just before the window
	acct.Generate(stripefake.GenOptions{Payments: payments, Start: now.Add(-(29*24 + 12) * time.Hour), End: now.Add(-time.Minute), Seed: 7})
	if missed > 0 {
		ds := webhooksim.Stripe(acct.Deliveries())
		if _, _, err := webhooksim.Seed(context.Background(), db.DB, "stripe", ds, now, func(i int, _ webhooksim.Delivery) bool { return i%missed != missed/2 }); err != nil {
			b.Fatal(err)
		}
	}
	return world{db: db, url: u, now: now}, fake
}

func monthSince(now time.Time) time.Time { return now.Add(-(29*24 + 18) * time.Hour) }

func runMonth(b *testing.B, payments, missed int, rerun, full bool) month {
	b.Helper()
	w, fake := monthWorld(b, payments, missed, full)
	since := monthSince(w.now)
	args := []string{"run", "--since", since.Format(time.RFC3339), "--until", w.now.Format(time.RFC3339), "--format", "json"}
	args = append(args, strings.Fields(os.Getenv("BENCH_MONTH_ARGS"))...) // e.g. "--batch-size 4000"
	if rerun {
		w.exec(b, 1000, args...)
	}
	// The previous case's (or round's) dirty pages are flushed first, so
	// that no case pays for the checkpoint of another's writes (the
	// Stripe-sized cases write the most).
	checkpoint(b, w.db.URL)
	pg0, pgOK := pgCPU(w.db.URL)
	fake0 := selfCPU(b)
	so, se, wall, cpu := w.execCPU(b, 1000, args...)
	fakeCPU := selfCPU(b) - fake0
	pg1, pgOK1 := pgCPU(w.db.URL)
	var rep report.Report
	if err := json.Unmarshal(so, &rep); err != nil {
		b.Fatalf("%v: %s", err, se)
	}
	r := rep.Runs[0]
	m := month{wall: wall, cpu: cpu, fakeCPU: fakeCPU, events: float64(r.EventsRead), requests: float64(r.APIRequests), rss: peakRSS(se)}
	if pgOK && pgOK1 {
		m.pgCPU = pg1 - pg0
	}
	m.needed = float64(neededRequests(b, w.url, since, w.now))
	_ = fake
	return m
}

// neededRequests counts, over plain HTTP from the fake, what the event
// method needs for [since, until): the pages of 100 of the window's events
// of the types the job reads, the pages of 100 of the balance transactions
// of each payout the window's payout events name (listed once each), and
// one anchor look-up.
func neededRequests(b *testing.B, base string, since, until time.Time) int {
	b.Helper()
	get := func(path string, q url.Values) map[string]any {
		req, _ := http.NewRequest(http.MethodGet, base+path+"?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer sk_test_bench")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil || res.StatusCode != 200 {
			b.Fatalf("%s: %d %v %.200s", path, res.StatusCode, err, body)
		}
		return m
	}
	list := func(path string, q url.Values, each func(map[string]any)) int {
		pages := 0
		q.Set("limit", "100")
		for {
			m := get(path, q)
			pages++
			data, _ := m["data"].([]any)
			for _, d := range data {
				each(d.(map[string]any))
			}
			if more, _ := m["has_more"].(bool); !more || len(data) == 0 {
				return pages
			}
			q.Set("starting_after", data[len(data)-1].(map[string]any)["id"].(string))
		}
	}
	q := url.Values{}
	q.Set("created[gte]", strconv.FormatInt(since.Unix(), 10))
	q.Set("created[lt]", strconv.FormatInt(until.Unix(), 10))
	for _, t := range stripe.EventTypes {
		q.Add("types[]", t)
	}
	payouts := map[string]bool{}
	var order []string
	pages := list("/v1/events", q, func(ev map[string]any) {
		if typ, _ := ev["type"].(string); len(typ) > 7 && typ[:7] == "payout." {
			obj := ev["data"].(map[string]any)["object"].(map[string]any)
			id := obj["id"].(string)
			if st, _ := obj["status"].(string); st == "paid" && !payouts[id] {
				payouts[id] = true
				order = append(order, id)
			}
		}
	})
	for _, po := range order {
		q := url.Values{}
		q.Set("payout", po)
		pages += list("/v1/balance_transactions", q, func(map[string]any) {})
	}
	return pages + 1
}

// execCPU is exec that also returns the process's CPU time (user+system).
func (w world) execCPU(b *testing.B, rps int, args ...string) (stdout, stderr []byte, wall, cpu time.Duration) {
	b.Helper()
	var st *os.ProcessState
	stdout, stderr, wall = w.execState(b, rps, &st, args...)
	if st != nil {
		cpu = st.UserTime() + st.SystemTime()
	}
	return stdout, stderr, wall, cpu
}

// peakRSS is the binary's own VmHWM from its "process" log line.
func peakRSS(stderr []byte) float64 {
	for _, line := range splitLines(stderr) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["msg"] == "process" {
			v, _ := m["peak_rss_mib"].(float64)
			return v
		}
	}
	return 0
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		out = append(out, b[:i])
		if i < len(b) {
			i++
		}
		b = b[i:]
	}
	return out
}

// selfCPU is this process's CPU time so far (user+system): while the
// binary runs, the benchmark process only serves the fake's pages.
func selfCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// checkpoint runs CHECKPOINT on the database at dsn; a server that refuses
// (not a superuser) is left as it is.
func checkpoint(b *testing.B, dsn string) {
	b.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err == nil {
		_, err = conn.Exec(context.Background(), `CHECKPOINT`)
		_ = conn.Close(context.Background())
	}
	if err != nil {
		b.Logf("checkpoint: %v (cases may pay for each other's writes)", err)
	}
}

// pgCPU is the CPU time PostgreSQL's processes have used so far: the
// postmaster's own and its reaped children's, and every live child's, read
// from /proc. ok is false when the server is not a process of this machine
// that /proc shows (a remote DATABASE_URL).
func pgCPU(dsn string) (cpu time.Duration, ok bool) {
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		return 0, false
	}
	var pid int
	err = conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid)
	_ = conn.Close(context.Background())
	if err != nil {
		return 0, false
	}
	self, ok := procStat(pid)
	if !ok {
		return 0, false
	}
	postmaster := self[1] // ppid
	pm, ok := procStat(postmaster)
	if !ok {
		return 0, false
	}
	ticks := pm[11] + pm[12] + pm[13] + pm[14] // utime stime cutime cstime
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == postmaster {
			continue
		}
		if f, ok := procStat(pid); ok && f[1] == postmaster {
			ticks += f[11] + f[12]
		}
	}
	return time.Duration(ticks) * time.Second / 100, true // USER_HZ
}

// procStat is /proc/pid/stat's fields after the command, as numbers
// (f[0] the state, f[1] the parent's pid, f[11] utime, f[12] stime, ...).
func procStat(pid int) ([]int, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	var out []int
	for _, f := range strings.Fields(s[i+1:]) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out, len(out) > 14
}
