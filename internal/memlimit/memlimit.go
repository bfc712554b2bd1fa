// Package memlimit is the process's soft memory limit (runtime/debug's):
// the binary sets one so that a run fits a small pod, and raises it when
// several runs share the process, so that each keeps the room one run has.
package memlimit

import (
	"context"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// Base is the soft limit of a process running one run at a time: the
	// garbage collector keeps the heap near its live size instead of
	// letting it double (peak RSS at a million events 98–100 MiB under 64
	// MiB, 91 under 56; issue 16).
	Base = 56 << 20
	// PerRun is what each further run at once adds. Two runs at once under
	// Base alone collected 157–165 times where one collected 61, and the
	// job's CPU doubled for the same work; at Base+PerRun, 46–47 times
	// (issue 16, docs/benchmarks.md).
	PerRun = 24 << 20
)

var (
	mu    sync.Mutex
	owned bool  // the limit is the process's own (GOMEMLIMIT unset)
	sized int64 // the limit it set last
	runs  = 1   // the most runs at once it was sized for
)

// Set gives the process the soft limit Base, and GOGC 200, unless
// GOMEMLIMIT (and GOGC) say otherwise. At the default GOGC the collector
// ran at every 13 MiB allocated, a fifth of the job's CPU on a rerun; the
// soft limit, not GOGC, bounds the heap.
func Set(getenv func(string) string) {
	if getenv("GOMEMLIMIT") != "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	debug.SetMemoryLimit(Base)
	owned, sized = true, Base
	if getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
}

// ForRuns makes room for n runs at once: a limit the process set itself
// grows to Base plus PerRun for each run past the first, up to three
// quarters of the container's memory limit (cgroup v2's memory.max, when
// there is one), and never shrinks (the largest fan-out decides). A limit
// from GOMEMLIMIT is the operator's and stays; each run then counts on its
// share (RunShare). It returns the limit and whether it raised it.
func ForRuns(n int) (int64, bool) {
	mu.Lock()
	defer mu.Unlock()
	runs = max(runs, n)
	cur := debug.SetMemoryLimit(-1)
	want := min(int64(Base)+int64(runs-1)*PerRun, containerCeiling())
	if !owned || cur != sized || want <= cur {
		// Not ours, or set meanwhile by someone else (the demo's own).
		return cur, false
	}
	debug.SetMemoryLimit(want)
	sized = want
	return want, true
}

// memoryMax is where cgroup v2 puts the container's memory limit.
var memoryMax = "/sys/fs/cgroup/memory.max"

// containerCeiling is three quarters of the container's memory limit, or
// math.MaxInt64 with none ("max", or no cgroup v2): the soft limit stays
// well inside what the kernel would kill the process at.
func containerCeiling() int64 {
	b, err := os.ReadFile(memoryMax)
	if err != nil {
		return math.MaxInt64
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return math.MaxInt64
	}
	return n / 4 * 3
}

// RunShare is the memory one run can count on: Base under the process's
// own limit, else the limit over the runs at once it was sized for;
// math.MaxInt64 with no limit.
func RunShare() int64 {
	mu.Lock()
	defer mu.Unlock()
	limit := debug.SetMemoryLimit(-1)
	switch {
	case limit == math.MaxInt64:
		return limit
	case owned && limit == sized:
		return Base
	}
	return limit / int64(runs)
}

// reset forgets what Set and ForRuns did (tests).
func reset() {
	mu.Lock()
	defer mu.Unlock()
	owned, sized, runs = false, 0, 1
}

// Headroom is how far above the live heap Watch puts a limit of the
// process's own once the heap nears it: the collector needs room to let
// the heap grow between cycles. A live heap near the limit made it collect
// without pause: with Stripe-sized payloads (a third of the events 3 kB
// charges) the month's live heap reached the 56 MiB limit, the collector
// ran 3,624 times and the job's CPU went from 2.6 to 11 s; raised to 1.5
// times the live heap, 110 times and 6.9 s; with twice, about 3.6 s
// (issue 16, docs/benchmarks.md "Stripe-sized payloads").
const Headroom = 2

// Raise returns the limit a process should have whose live heap is live
// under limit cur: cur while live stays under three quarters of it, else
// live·Headroom rounded up to a MiB, at most ceiling (never below cur).
func Raise(live, cur, ceiling int64) int64 {
	if live <= cur/4*3 {
		return cur
	}
	want := (live*Headroom + 1<<20 - 1) &^ (1<<20 - 1)
	return max(cur, min(want, ceiling))
}

// liveHeap is the runtime's count of the heap the last collection found
// live.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// Watch checks the live heap every interval until ctx ends and raises a
// limit of the process's own (Raise) when the heap outgrows it, up to
// three quarters of the container's memory, logging each raise; it never
// lowers one, and leaves an operator's GOMEMLIMIT alone. The limit is a
// target for the collector, not a cap the work fits under: when the work
// needs more (large payloads, a wide page), the process should use more
// memory, not spend its CPU collecting.
func Watch(ctx context.Context, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if raised, live := raiseFor(liveHeap()); raised > 0 && log != nil {
			log.Info("the live heap neared the soft memory limit: raised it", "live_mib", live>>20, "limit_mib", raised>>20)
		}
	}
}

// raiseFor raises a limit of the process's own for a live heap of live
// bytes, returning the new limit (0: unchanged) and live.
func raiseFor(live int64) (int64, int64) {
	mu.Lock()
	defer mu.Unlock()
	cur := debug.SetMemoryLimit(-1)
	if !owned || cur != sized || live <= 0 {
		return 0, live
	}
	next := Raise(live, cur, containerCeiling())
	if next <= cur {
		return 0, live
	}
	debug.SetMemoryLimit(next)
	sized = next
	return next, live
}
