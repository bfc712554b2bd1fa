package memlimit

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"
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

func TestRaise(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                  string
		live, cur, ceil, want int64
		share                 float64
	}{
		{"a quiet collector", 50 * mib, 56 * mib, math.MaxInt64, 56 * mib, 0.05},
		{"a tight limit, not thrashing (the listing's million)", 54 * mib, 56 * mib, math.MaxInt64, 56 * mib, 0.43},
		{"thrashing, the heap small (not the limit's doing)", 20 * mib, 56 * mib, math.MaxInt64, 56 * mib, 0.5},
		{"thrashing past half the limit", 42 * mib, 56 * mib, math.MaxInt64, 84 * mib, 0.5},
		{"thrashing over the limit", 68 * mib, 56 * mib, math.MaxInt64, 136 * mib, Thrashing},
		{"rounded up to a MiB", 42*mib + 1, 56 * mib, math.MaxInt64, 85 * mib, 0.5},
		{"the container caps it", 68 * mib, 56 * mib, 80 * mib, 80 * mib, 0.5},
		{"never below the limit", 68 * mib, 56 * mib, 40 * mib, 56 * mib, 0.5},
	} {
		if got := Raise(c.live, c.cur, c.ceil, c.share); got != c.want {
			t.Errorf("%s: Raise(%d MiB, %d MiB, %g) = %.2f MiB, want %d MiB", c.name, c.live/mib, c.cur/mib, c.share, float64(got)/mib, c.want/mib)
		}
	}
}

// A limit of the process's own grows when the collector thrashes under it
// (and never shrinks); an operator's GOMEMLIMIT stays as it is.
func TestWatchRaisesOnlyItsOwnLimit(t *testing.T) {
	keep(t)
	debug.SetMemoryLimit(math.MaxInt64)
	Set(env())
	if got := raiseFor(44<<20, 0.05); got != 0 || debug.SetMemoryLimit(-1) != Base {
		t.Fatalf("a quiet collector raised the limit to %d", got)
	}
	if got := raiseFor(44<<20, 0.5); got != 88<<20 || debug.SetMemoryLimit(-1) != 88<<20 {
		t.Fatalf("44 MiB live under %d, thrashing: raised to %d, limit %d", Base, got, debug.SetMemoryLimit(-1))
	}
	if got := raiseFor(30<<20, 0.5); got != 0 || debug.SetMemoryLimit(-1) != 88<<20 {
		t.Fatalf("the limit shrank: %d", debug.SetMemoryLimit(-1))
	}
	if got := RunShare(); got != Base {
		t.Fatalf("share %d, want %d: a raise is room, not a larger budget", got, Base)
	}

	reset()
	debug.SetMemoryLimit(64 << 20)
	Set(env("GOMEMLIMIT", "64MiB"))
	if got := raiseFor(68<<20, 0.5); got != 0 || debug.SetMemoryLimit(-1) != 64<<20 {
		t.Fatalf("the operator's limit moved: %d", debug.SetMemoryLimit(-1))
	}
}

func TestWatchEndsWithItsContext(t *testing.T) {
	keep(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Watch(ctx, time.Millisecond, nil); close(done) }()
	time.Sleep(5 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return")
	}
}
