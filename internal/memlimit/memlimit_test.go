package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func keep(t *testing.T) {
	path := memoryMax
	memoryMax = filepath.Join(t.TempDir(), "memory.max") // absent: no container limit
	limit, gc := debug.SetMemoryLimit(-1), debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	t.Cleanup(func() {
		memoryMax = path
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(gc)
		reset()
	})
	reset()
}

func env(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

func TestOwnLimitGrowsWithRunsAtOnce(t *testing.T) {
	keep(t)
	debug.SetMemoryLimit(math.MaxInt64)
	Set(env())
	if got := debug.SetMemoryLimit(-1); got != Base {
		t.Fatalf("limit %d, want %d", got, Base)
	}
	if got := debug.SetGCPercent(-1); got != 200 {
		t.Fatalf("GOGC %d, want 200", got)
	}
	if l, raised := ForRuns(1); raised || l != Base {
		t.Fatalf("one run: %d %v", l, raised)
	}
	if l, raised := ForRuns(3); !raised || l != Base+2*PerRun || debug.SetMemoryLimit(-1) != l {
		t.Fatalf("three runs: %d %v", l, raised)
	}
	if l, raised := ForRuns(2); raised || l != Base+2*PerRun {
		t.Fatalf("two runs after three: %d %v (the largest fan-out decides)", l, raised)
	}
	if got := RunShare(); got != Base {
		t.Fatalf("share %d, want %d: each run keeps one run's room", got, Base)
	}
}

func TestOperatorsLimitIsShared(t *testing.T) {
	keep(t)
	debug.SetMemoryLimit(400 << 20)
	Set(env("GOMEMLIMIT", "400MiB"))
	if l, raised := ForRuns(4); raised || l != 400<<20 {
		t.Fatalf("GOMEMLIMIT moved: %d %v", l, raised)
	}
	if got := RunShare(); got != 100<<20 {
		t.Fatalf("share %d, want 100 MiB", got)
	}
}

func TestLimitSetElsewhereStays(t *testing.T) {
	keep(t)
	Set(env())
	debug.SetMemoryLimit(1 << 30) // the demo's
	if l, raised := ForRuns(2); raised || l != 1<<30 {
		t.Fatalf("the demo's limit moved: %d %v", l, raised)
	}
	if got := RunShare(); got != 1<<29 {
		t.Fatalf("share %d, want 512 MiB", got)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if got := RunShare(); got != math.MaxInt64 {
		t.Fatalf("no limit: share %d", got)
	}
}

func TestContainerLimitCapsTheGrowth(t *testing.T) {
	keep(t)
	if err := os.WriteFile(memoryMax, []byte("268435456\n"), 0o600); err != nil { // the manifests' 256Mi
		t.Fatal(err)
	}
	Set(env())
	if l, raised := ForRuns(4); !raised || l != Base+3*PerRun {
		t.Fatalf("four runs in 256 MiB: %d %v", l, raised)
	}
	if l, _ := ForRuns(64); l != 192<<20 {
		t.Fatalf("64 runs in 256 MiB: %d MiB, want three quarters of the container's, 192", l>>20)
	}
	if err := os.WriteFile(memoryMax, []byte("max\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := containerCeiling(); got != math.MaxInt64 {
		t.Fatalf(`"max" is no limit: %d`, got)
	}
}
