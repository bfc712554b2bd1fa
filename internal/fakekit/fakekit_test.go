package fakekit

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
)

// Fix gives the (created, index) order on both of its paths: packed keys
// when created's range and the indices fit in 64 bits, a comparison sort
// when they do not.
func TestOrderFix(t *testing.T) {
	for _, spread := range []int64{10, 1 << 40, 1 << 62} {
		rng := rand.New(rand.NewPCG(uint64(spread), 1))
		created := make([]int64, 5000)
		var o Order
		for i := range created {
			created[i] = rng.Int64N(spread) - spread/2
			o.Add(int32(i), created[i], func(i int32) int64 { return created[i] })
		}
		if !o.Dirty {
			t.Fatalf("spread %d: random appends left the order clean", spread)
		}
		createdOf := func(i int32) int64 { return created[i] }
		o.Fix(createdOf)
		want := slices.Clone(o.Idx)
		Ascending(want, createdOf)
		if o.Dirty || !slices.Equal(o.Idx, want) {
			t.Fatalf("spread %d: Fix did not give the (created, index) order", spread)
		}
		for k := 1; k < len(o.Idx); k++ {
			a, b := o.Idx[k-1], o.Idx[k]
			if created[a] > created[b] || created[a] == created[b] && a > b {
				t.Fatalf("spread %d: %d before %d", spread, a, b)
			}
		}
	}
}

func TestOrderInOrderAppendsStayClean(t *testing.T) {
	var o Order
	created := []int64{1, 1, 2, 5}
	for i, c := range created {
		o.Add(int32(i), c, func(i int32) int64 { return created[i] })
	}
	if o.Dirty {
		t.Fatal("appends in order marked the order dirty")
	}
}

func TestFaults(t *testing.T) {
	f := NewFaults(rand.New(rand.NewPCG(7, 7)))
	if st := f.Fail(); st != 0 {
		t.Fatalf("no faults set, got %d", st)
	}
	f.FailNext(503, 2)
	f.SetFailureRate(500, 1)
	for i, want := range []int{503, 503, 500, 500} {
		if st := f.Fail(); st != want {
			t.Fatalf("request %d failed with %d, want %d", i, st, want)
		}
	}
	f.SetFailureRate(500, 0)
	if st := f.Fail(); st != 0 {
		t.Fatalf("rate off, got %d", st)
	}
	// A rate draws from the seeded generator: two Faults seeded alike fail
	// the same requests.
	a, b := NewFaults(rand.New(rand.NewPCG(3, 9))), NewFaults(rand.New(rand.NewPCG(3, 9)))
	a.SetFailureRate(429, 0.3)
	b.SetFailureRate(429, 0.3)
	for i := range 200 {
		if x, y := a.Fail(), b.Fail(); x != y {
			t.Fatalf("request %d: %d vs %d", i, x, y)
		}
	}
	f.SetLatency(time.Hour)
	if f.Latency() != time.Hour {
		t.Fatal("latency not kept")
	}
}

func TestWaitStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	Wait(ctx, time.Hour)
	if time.Since(start) > time.Second {
		t.Fatal("Wait outlived its context")
	}
	start = time.Now()
	Wait(context.Background(), 20*time.Millisecond)
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("Wait returned early")
	}
}

func TestLoopback(t *testing.T) {
	var l Loopback
	l.Close() // nothing started: a no-op
	url := l.Start("test", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer l.Close()
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("served at %s, not on 127.0.0.1", url)
	}
	if again := l.Start("test", http.NotFoundHandler()); again != url {
		t.Fatalf("second Start: %s, want %s", again, url)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("got %q from the first handler's server", b)
	}
}

func TestStateCodes(t *testing.T) {
	for _, s := range append([]models.State{models.StateNone}, models.States...) {
		if got := StateOf(StateCode(s)); got != s {
			t.Fatalf("%q came back as %q", s, got)
		}
	}
}

// Person's customers are in every data set the fakes generate: pinned.
func TestPerson(t *testing.T) {
	for _, c := range []struct {
		x           uint64
		name, email string
	}{
		{0, "Olivia Smith", "olivia.smith0@example.com"},
		{12345, "Leo Khan", "leo.khan3@example.co.uk"},
		{1<<63 + 977, "Kwame Williams", "kwame.williams215@example.net"},
		{0xDEADBEEFCAFE, "Priya Hall", "priya.hall915@example.com"},
		{780, "Olivia García", "olivia.garcia0@example.com"},
		{690, "Olivia O'Brien", "olivia.obrien0@example.com"},
	} {
		if n, e := Person(c.x); n != c.name || e != c.email {
			t.Errorf("Person(%d) = %q, %q; want %q, %q", c.x, n, e, c.name, c.email)
		}
	}
}
