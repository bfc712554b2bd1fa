// Package clock is the one source of time of a run: the engine, the store
// (whose SQL stamps coalesce($now, now())) and every retry's sleep read it,
// so a test that stubs it controls all three.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and waits.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// Sleep waits d, or until ctx ends (returning its error).
	Sleep(ctx context.Context, d time.Duration) error
}

// System is the wall clock.
var System Clock = system{}

type system struct{}

func (system) Now() time.Time { return time.Now() }

func (system) Sleep(ctx context.Context, d time.Duration) error { return sleep(ctx, d) }

// Func is a clock whose Now is f; it sleeps on the wall clock, since a
// stubbed now that never advances must not stall a retry forever.
type Func func() time.Time

// Now returns f().
func (f Func) Now() time.Time { return f() }

// Sleep waits d on the wall clock, or until ctx ends.
func (Func) Sleep(ctx context.Context, d time.Duration) error { return sleep(ctx, d) }

// Stubbed reports whether c is not the wall clock: SQL then stamps c's time
// instead of the server's now().
func Stubbed(c Clock) bool { _, sys := c.(system); return !sys }

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
