package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/report"
)

// BenchmarkAccounts is the month's 20,000 payments split over two
// connected accounts, into an empty schema, reconciled one account at a
// time (concurrency=1) or both at once (concurrency=2, the runs sharing the
// process): wall time, the job's CPU, its peak RSS and how often its
// garbage collector ran (gc_cycles, from GODEBUG=gctrace=1). Under one
// run's soft memory limit two runs at once collected two and a half times
// as often and used twice the CPU for the same work (internal/memlimit).
func BenchmarkAccounts(b *testing.B) {
	for _, conc := range []int{1, 2} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			b.StopTimer()
			var rs []month
			gcs := 0
			for range b.N {
				m, n := runAccounts(b, conc)
				rs, gcs = append(rs, m), gcs+n
			}
			m := median(rs)
			b.ReportMetric(m.events/m.wall.Seconds(), "events/s")
			b.ReportMetric(m.wall.Seconds(), "wall_s")
			b.ReportMetric(m.cpu.Seconds(), "job_cpu_s")
			b.ReportMetric(m.rss, "peakRSS_MiB")
			b.ReportMetric(float64(gcs)/float64(b.N), "gc_cycles")
		})
	}
}

func runAccounts(b *testing.B, conc int) (month, int) {
	b.Helper()
	db := pgtest.New(b)
	now := time.Now().UTC()
	fake := stripefake.New(stripefake.Options{Seed: 1})
	u := fake.Start()
	defer fake.Close()
	for i, id := range []string{"acct_1", "acct_2"} {
		acct := fake.Account(id)
		acct.CreatePayment(100, "gbp", false, now.Add(-(29*24+22)*time.Hour)) // the anchor
		acct.Generate(stripefake.GenOptions{Payments: 10_000, Start: now.Add(-(29*24 + 12) * time.Hour), End: now.Add(-time.Minute), Seed: int64(7 + i)})
	}
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	body := "providers:\n  stripe:\n    requests_per_second: 1000\n    accounts: [acct_1, acct_2]\nrun:\n  stuck_limit: -1\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(binary, "run", "--config", cfg, "--since", monthSince(now).Format(time.RFC3339), "--until", now.Format(time.RFC3339),
		"--format", "json", "--concurrency", fmt.Sprint(conc))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + db.URL, "STRIPE_API_KEY=sk_test_bench", "STRIPE_API_BASE=" + u, "GODEBUG=gctrace=1"}
	var se bytes.Buffer
	readStdout := stdoutToFile(b, cmd)
	cmd.Stderr = &se
	b.StartTimer()
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	b.StopTimer()
	stdout := readStdout()
	if err != nil && cmd.ProcessState.ExitCode() != 1 { // 1: drift found and repaired
		b.Fatalf("run: %v\n%s", err, se.Bytes())
	}
	var rep report.Report
	if err := json.Unmarshal(stdout, &rep); err != nil {
		b.Fatalf("%v: %s", err, se.Bytes())
	}
	m := month{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), rss: peakRSS(se.Bytes())}
	for _, r := range rep.Runs {
		m.events += float64(r.EventsRead)
	}
	if len(rep.Runs) != 2 {
		b.Fatalf("%d runs, want one an account", len(rep.Runs))
	}
	return m, bytes.Count(append([]byte("\n"), se.Bytes()...), []byte("\ngc "))
}
