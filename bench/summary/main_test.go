package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// capture runs f with stdout sent to a buffer and returns what it printed.
func capture(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = old }()
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	f()
	_ = w.Close()
	return string(<-done)
}

const sample = `BenchmarkDemo/payments=1000-2    1  5200000000 ns/op  520 us/payment
BenchmarkDemo/payments=5000-2    1  3100000000 ns/op  310 us/payment
BenchmarkDemo/payments=20000-2   1 12400000000 ns/op  310 us/payment
BenchmarkDemo/payments=20000-2   1 13200000000 ns/op  330 us/payment
BenchmarkDemo/payments=20000-2   1 12800000000 ns/op  320 us/payment
`

func TestLinearDemo(t *testing.T) {
	res, _ := parse(strings.NewReader(sample))
	out := capture(t, func() { linear(res) })
	if !strings.Contains(out, "1k / 5k / 20k: 520 / 310 / 320) | ≤ 1.25 | 1.03 | 3 | yes |") {
		t.Fatalf("linear:\n%s", out)
	}
	// A quadratic demo: 20,000 payments cost four times 5,000's a payment.
	res, _ = parse(strings.NewReader(strings.ReplaceAll(sample, " 320 us/payment", " 1240 us/payment")))
	res["BenchmarkDemo/payments=20000"]["us/payment"] = []float64{1240}
	if out := capture(t, func() { linear(res) }); !strings.Contains(out, "| 4 | 1 | no |") {
		t.Fatalf("quadratic demo passed:\n%s", out)
	}
	res, _ = parse(bytes.NewReader(nil))
	if out := capture(t, func() { linear(res) }); !strings.Contains(out, "not run") {
		t.Fatalf("no demo runs:\n%s", out)
	}
}

// TestFailedBenchmarksAreNamed: a benchmark that failed (its FAIL line in
// the output make bench tees) is named, so that main can fail make bench.
func TestFailedBenchmarksAreNamed(t *testing.T) {
	failed = nil
	t.Cleanup(func() { failed = nil })
	out := sample + "--- FAIL: BenchmarkRun\n    bench_test.go:38: ERROR: cannot truncate\nFAIL\n--- FAIL: BenchmarkMonth/empty (1.2s)\n"
	parse(strings.NewReader(out))
	if got := strings.Join(failed, ","); got != "BenchmarkRun,BenchmarkMonth/empty" {
		t.Fatalf("failed benchmarks: %q", got)
	}
	failed = nil
	parse(strings.NewReader(sample))
	if len(failed) != 0 {
		t.Fatalf("a clean run named failures: %v", failed)
	}
}
