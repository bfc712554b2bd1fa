package clock

import (
	"context"
	"testing"
	"time"
)

func TestFuncIsStubbedAndSystemIsNot(t *testing.T) {
	at := time.Date(2026, 12, 1, 2, 30, 0, 0, time.UTC)
	c := Func(func() time.Time { return at })
	if got := c.Now(); !got.Equal(at) {
		t.Fatalf("Func.Now = %v, want %v", got, at)
	}
	if !Stubbed(c) {
		t.Fatal("a Func clock must count as stubbed (SQL stamps its time)")
	}
	if Stubbed(System) {
		t.Fatal("the wall clock must not count as stubbed (SQL stamps now())")
	}
	if d := time.Since(System.Now()); d < 0 || d > time.Second {
		t.Fatalf("System.Now is %v away from time.Now", d)
	}
}

func TestSleepWaitsAndStopsWithItsContext(t *testing.T) {
	for name, c := range map[string]Clock{"system": System, "func": Func(time.Now)} {
		start := time.Now()
		if err := c.Sleep(context.Background(), 20*time.Millisecond); err != nil {
			t.Fatalf("%s: Sleep: %v", name, err)
		}
		if time.Since(start) < 20*time.Millisecond {
			t.Fatalf("%s: Sleep returned early", name)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start = time.Now()
		if err := c.Sleep(ctx, time.Hour); err != context.Canceled {
			t.Fatalf("%s: Sleep on a canceled context = %v, want context.Canceled", name, err)
		}
		if time.Since(start) > time.Second {
			t.Fatalf("%s: Sleep on a canceled context waited", name)
		}
		if err := c.Sleep(ctx, 0); err != context.Canceled {
			t.Fatalf("%s: Sleep(0) on a canceled context = %v", name, err)
		}
	}
}
