package fanin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// Every item of every part is handed on once, one at a time, and the
// parts are produced at once: each waits until all have begun.
func TestRunHandsEveryItemOnceFromOneGoroutine(t *testing.T) {
	t.Parallel()
	parts := []int{0, 1, 2, 3}
	var begun atomic.Int32
	all := make(chan struct{})
	var handling atomic.Int32
	var got []int
	err := Run(context.Background(), parts, func(ctx context.Context, p int, send func(int) error) error {
		if begun.Add(1) == int32(len(parts)) {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			return errors.New("the parts were not produced at once")
		}
		for i := range 50 {
			if err := send(p*100 + i); err != nil {
				return err
			}
		}
		return nil
	}, func(_ context.Context, it int) error {
		if handling.Add(1) != 1 {
			t.Error("handle called concurrently")
		}
		got = append(got, it)
		handling.Add(-1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	var want []int
	for _, p := range parts {
		for i := range 50 {
			want = append(want, p*100+i)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("handled %d items, want %d once each", len(got), len(want))
	}
}

// The first error ends the rest: handle's is returned and nothing more is
// handed on; a produce's is returned and the others are canceled.
func TestRunStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	forever := func(ctx context.Context, _ int, send func(int) error) error {
		for i := 0; ; i++ {
			if err := send(i); err != nil {
				return err
			}
		}
	}
	stop := errors.New("stop")
	calls := 0
	err := Run(context.Background(), []int{0, 1, 2}, forever, func(context.Context, int) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("handle's error: %v after %d calls", err, calls)
	}

	broken := errors.New("broken list")
	err = Run(context.Background(), []int{0, 1, 2}, func(ctx context.Context, p int, send func(int) error) error {
		if p == 1 {
			return broken
		}
		return forever(ctx, p, send)
	}, func(context.Context, int) error { return nil })
	if !errors.Is(err, broken) {
		t.Fatalf("a produce's error: %v", err)
	}

	// A handle busy with a request when a produce fails is canceled by
	// that failure: the produce's error is the one returned.
	err = Run(context.Background(), []int{0, 1}, func(ctx context.Context, p int, send func(int) error) error {
		if p == 1 {
			time.Sleep(20 * time.Millisecond) // while handle waits
			return broken
		}
		return send(0)
	}, func(ctx context.Context, _ int) error {
		<-ctx.Done()
		return fmt.Errorf("a request: %w", ctx.Err())
	})
	if !errors.Is(err, broken) {
		t.Fatalf("a produce's error while handle waited: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, []int{0, 1}, forever, func(context.Context, int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller's cancellation: %v", err)
	}
}
