package main

import (
	"os"
	"runtime"
	"runtime/pprof"
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
