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
// process's own when the collector thrashes under it: with Stripe-sized
// payloads (a third of the events 3 kB charges), before each event was
// parsed on its own, the month's live heap neared the 56 MiB limit, the
// collector took half the CPU and the job's CPU went from 2.6 to 10 s;
// raised to 1.5 times the live heap, 6.9 s; to twice, 3.75-6.14 s, the
// later the rule fires the more (issue 16, docs/benchmarks.md
// "Stripe-sized payloads").
const Headroom = 2

// Thrashing is the share of the CPU GOMAXPROCS allows that the collector
// used, in each of four checks 250 ms apart (a second), at which Watch
// deems it to run without pause: a collector driven by the limit is held
// to about half. Read every 250 ms: the fake's month 0.02-0.12; the object
// listing's million events 0.25-0.43 for minutes, and under the 100 MiB
// target only as it is (raised at 0.25 once, or at 0.4 twice in a row, it
// peaked at 100.5 and 109.9 MiB: faster, over the target); the
// Stripe-sized month thrashing under the limit, 0.47-0.60 for seconds.
const Thrashing = 0.45

// thrashChecks is how many checks in a row Thrashing must hold.
const thrashChecks = 4

// Raise returns the limit a process should have whose live heap is live
// under limit cur while the collector takes share of its CPU: cur unless
// the collector thrashes (Thrashing) with the live heap past half the
// limit, else live·Headroom rounded up to a MiB, at most ceiling (never
// below cur). A limit only tight, not thrashing, stays: it keeps the
// process small.
func Raise(live, cur, ceiling int64, share float64) int64 {
	if share < Thrashing || live <= cur/2 {
		return cur
	}
	want := (live*Headroom + 1<<20 - 1) &^ (1<<20 - 1)
	return max(cur, min(want, ceiling))
}

// gcStats reads the heap the last collection found live, and the CPU the
// collector and the process had (runtime/metrics' estimates, in seconds).
func gcStats() (live int64, gc, total float64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = int64(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == metrics.KindFloat64 && s[2].Value.Kind() == metrics.KindFloat64 {
		gc, total = s[1].Value.Float64(), s[2].Value.Float64()
	}
	return live, gc, total
}

// Watch checks the collector every interval until ctx ends and raises a
// limit of the process's own (Raise) when it thrashes under it
// (Thrashing, thrashChecks checks in a row), up to three
// quarters of the container's memory, logging each raise; it never lowers
// one, and leaves an operator's GOMEMLIMIT alone. The limit is a target
// for the collector, not a cap the work must fit under: when the work
// needs more (large payloads, a wide page), the process should use more
// memory rather than spend its CPU collecting.
func Watch(ctx context.Context, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	_, lastGC, lastTotal := gcStats()
	hot := 0 // checks in a row the collector thrashed
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live, gc, total := gcStats()
		share := 0.0
		if total > lastTotal {
			share = (gc - lastGC) / (total - lastTotal)
		}
		lastGC, lastTotal = gc, total
		if share < Thrashing {
			hot = 0
			continue
		}
		if hot++; hot < thrashChecks {
			continue
		}
		if raised := raiseFor(live, share); raised > 0 && log != nil {
			log.Info("the collector ran without pause under the soft memory limit: raised it",
				"live_mib", live>>20, "gc_cpu_share", float64(int(share*100))/100, "limit_mib", raised>>20)
		}
	}
}

// raiseFor raises a limit of the process's own for a live heap of live
// bytes whose collector took share of the CPU, returning the new limit (0:
// unchanged).
func raiseFor(live int64, share float64) int64 {
	mu.Lock()
	defer mu.Unlock()
	cur := debug.SetMemoryLimit(-1)
	if !owned || cur != sized || live <= 0 {
		return 0
	}
	next := Raise(live, cur, containerCeiling(), share)
	if next <= cur {
		return 0
	}
	debug.SetMemoryLimit(next)
	sized = next
	return next
}
