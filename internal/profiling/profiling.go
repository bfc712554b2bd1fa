// Package profiling is the binary's own profiles and peak memory, for the
// benchmarks: $RECONCILER_CPUPROFILE, $RECONCILER_MEMPROFILE (and its
// .peak), an execution trace to $RECONCILER_TRACE, and the peak resident
// set the run logs.
package profiling

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"
)

// Start writes a CPU profile to $RECONCILER_CPUPROFILE and a heap
// profile to $RECONCILER_MEMPROFILE (the allocations of the whole command,
// written at its end) when they are set, and with the latter the live heap
// at its largest (sampled every 250 ms) to $RECONCILER_MEMPROFILE.peak,
// and an execution trace to $RECONCILER_TRACE (where the run waits: `go
// tool trace -pprof=net`); the benchmarks use them.
func Start(getenv func(string) string) (stop func()) {
	var cpu, tr *os.File
	if p := getenv("RECONCILER_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil && pprof.StartCPUProfile(f) == nil {
			cpu = f
		}
	}
	if p := getenv("RECONCILER_TRACE"); p != "" {
		if f, err := os.Create(p); err == nil && trace.Start(f) == nil {
			tr = f
		}
	}
	done := make(chan struct{})
	if p := getenv("RECONCILER_MEMPROFILE"); p != "" {
		go peakHeap(p+".peak", done)
	}
	return func() {
		close(done)
		if tr != nil {
			trace.Stop()
			_ = tr.Close()
		}
		if cpu != nil {
			pprof.StopCPUProfile()
			_ = cpu.Close()
		}
		if p := getenv("RECONCILER_MEMPROFILE"); p != "" {
			if f, err := os.Create(p); err == nil {
				runtime.GC()
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}
	}
}

// peakHeap writes the live heap's profile to path each time the heap in
// use grows 5% past its largest so far, until done.
func peakHeap(path string, done <-chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var peak uint64
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse < peak+peak/20 {
			continue
		}
		peak = ms.HeapInuse
		if f, err := os.Create(path); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			_ = f.Close()
		}
	}
}

// PeakRSSMiB is the process's peak resident set (VmHWM, Linux), 0 when
// unknown. A child's rusage cannot tell it: Linux carries the parent's peak
// across fork and exec into it.
func PeakRSSMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb float64
			if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb); err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}
