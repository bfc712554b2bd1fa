package demo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDemo runs the whole demo (fakes, seeding, four reconciliations,
// the report) at 1,000, 5,000 and 20,000 payments per provider. Linear
// cost shows as a flat us/payment (wall time per payment, both providers'
// counted) from size to size; seed-s and reconcile-s split the wall time
// between seeding the database as the webhooks left it and the runs, and
// cpu-s is the process's CPU time, steadier than the wall on a shared
// machine.
//
//	go test ./internal/demo/ -run '^$' -bench Demo -benchtime 1x
func BenchmarkDemo(b *testing.B) {
	for _, n := range []int{1000, 5000, 20000} {
		b.Run(fmt.Sprintf("payments=%d", n), func(b *testing.B) {
			var wall, cpu, seed, runs time.Duration
			for range b.N {
				dir := b.TempDir()
				p := NewProgress(io.Discard, false)
				o := Options{Payments: n, Seed: 1, HTMLPath: filepath.Join(dir, "demo.html"), Progress: p}
				c0, t0 := cpuTime(), time.Now()
				if err := Run(context.Background(), o); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(t0)
				cpu += cpuTime() - c0
				for _, ph := range p.Phases() {
					switch {
					case strings.HasPrefix(ph.Name, "seeding"):
						seed += ph.Took
					case strings.HasPrefix(ph.Name, "reconciling"):
						runs += ph.Took
					}
				}
			}
			per := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
			b.ReportMetric(per(wall), "s/op")
			b.ReportMetric(float64(wall.Microseconds())/float64(b.N*2*n), "us/payment")
			b.ReportMetric(per(cpu), "cpu-s/op")
			b.ReportMetric(per(seed), "seed-s/op")
			b.ReportMetric(per(runs), "reconcile-s/op")
		})
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
