package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
)

// startProfiles writes a CPU profile to $RECONCILER_CPUPROFILE and a heap
// profile to $RECONCILER_MEMPROFILE (taken at the heap's largest sample
// point: the end of the command) when they are set; the benchmarks use them.
func startProfiles(getenv func(string) string) (stop func()) {
	var cpu *os.File
	if p := getenv("RECONCILER_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil && pprof.StartCPUProfile(f) == nil {
			cpu = f
		}
	}
	return func() {
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

// peakRSSMiB is the process's peak resident set (VmHWM, Linux), 0 when
// unknown. A child's rusage cannot tell it: Linux carries the parent's peak
// across fork and exec into it.
func peakRSSMiB() float64 {
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
