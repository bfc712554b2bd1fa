// Command tracewait sums, for each goroutine whose stack ever shows a
// function matching its second argument, the time it spent in each state
// of a Go execution trace (running, runnable, in a syscall, waiting), the
// waits named by their reason and the first two reconciler frames (outside
// the SQL helpers) of the stack they blocked on. It is how docs/benchmarks.md
// breaks a run's writer down ("Where the writer waits"):
//
//	RECONCILER_TRACE=/tmp/run.trace BENCH_BINARY=… bench.test -test.bench 'BenchmarkMonth/^empty$' …
//	cd scripts/tracewait && go run . /tmp/run.trace 'engine).stream.func1'
//
// A module of its own, so that the job does not depend on x/exp.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: tracewait TRACE FUNC")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r, err := trace.NewReader(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	type state struct {
		since time.Duration
		name  string
	}
	cur := map[trace.GoID]state{}
	total := map[trace.GoID]map[string]time.Duration{}
	match := map[trace.GoID]bool{}
	var first trace.Time
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if first == 0 {
			first = ev.Time()
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		t := ev.StateTransition()
		if t.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g := t.Resource.Goroutine()
		for fr := range t.Stack.Frames() {
			if strings.Contains(fr.Func, os.Args[2]) {
				match[g] = true
			}
		}
		_, to := t.Goroutine()
		now := time.Duration(ev.Time() - first)
		if c, ok := cur[g]; ok {
			if total[g] == nil {
				total[g] = map[string]time.Duration{}
			}
			total[g][c.name] += now - c.since
		}
		name := to.String()
		if to == trace.GoWaiting {
			name += ":" + t.Reason
			n := 0
			for fr := range t.Stack.Frames() {
				if strings.Contains(fr.Func, "reconciler/") && !strings.Contains(fr.Func, "sqlbase") {
					name += "@" + fr.Func[strings.LastIndex(fr.Func, "/")+1:]
					if n++; n == 2 {
						break
					}
				}
			}
		}
		cur[g] = state{now, name}
	}
	for g := range match {
		var names []string
		for k := range total[g] {
			names = append(names, k)
		}
		sort.Slice(names, func(i, j int) bool { return total[g][names[i]] > total[g][names[j]] })
		fmt.Printf("goroutine %d\n", g)
		for _, k := range names {
			if d := total[g][k]; d >= 5*time.Millisecond {
				fmt.Printf("  %8v  %s\n", d.Round(time.Millisecond), k)
			}
		}
	}
}
