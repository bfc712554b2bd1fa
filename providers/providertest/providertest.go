// Package providertest is the conformance suite every provider passes: it
// drives the provider's real client code over HTTP against the provider's
// fake server. A new provider adds its package, a Fake for its fake server,
// and one test calling Run.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// Fake is what the suite needs of a provider's fake server.
type Fake interface {
	// Provider returns the provider's real client pointed at the fake, with
	// retries that do not sleep, at most maxRetries retries and an HTTP
	// timeout of timeout.
	Provider(maxRetries int, timeout time.Duration) reconcile.Provider
	// AddPayment creates a payment whose only event is at at.
	AddPayment(at time.Time) string
	// Precision is the resolution of the provider's times.
	Precision() time.Duration
	// PageSize is the client's list page size.
	PageSize() int
	// FailNext makes the next n requests answer status.
	FailNext(status, n int)
	// SetLatency delays every response.
	SetLatency(d time.Duration)
	// StatusCases drives one payment into each provider status (and one
	// unknown status) with events at or after at, and says what each must map to.
	StatusCases(at time.Time) []StatusCase
	// Requests counts the HTTP requests the fake answered.
	Requests() int64
}

// StatusCase is one provider status and its expected mapping.
type StatusCase struct {
	Raw       string
	PaymentID string
	At        time.Time    // the time of the event showing Raw
	Want      models.State // StateNone with Unknown
	Unknown   bool
	// Optional: what else the change must say. Notice is the drift kind of
	// a fact that moves no state (an open dispute: models.KindDispute);
	// Revert that the provider undid something (a payout failed after it
	// was paid); AmountCaptured the captured amount of a partial capture.
	Notice         string
	Revert         bool
	AmountCaptured int64
}

// matches reports whether ch maps c.
func (c StatusCase) matches(ch reconcile.Change) bool {
	if ch.ProviderID != c.PaymentID || !ch.At.Equal(c.At) {
		return false
	}
	if c.Unknown {
		return ch.Unknown
	}
	return !ch.Unknown && ch.State == c.Want &&
		(c.Notice == "" || (ch.NoticeKind == c.Notice && ch.Notice != "")) &&
		(!c.Revert || ch.Revert != "") &&
		(c.AmountCaptured == 0 || ch.AmountCaptured == c.AmountCaptured)
}

// NewFake makes a fresh fake whose clock reads now.
type NewFake func(t *testing.T, now time.Time) Fake

// Now is the clock every fake of the suite reads.
var Now = time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)

func list(ctx context.Context, p reconcile.Provider, since, until time.Time) ([]reconcile.Event, []reconcile.Change, error) {
	var evs []reconcile.Event
	var cs []reconcile.Change
	err := p.ListChanges(ctx, reconcile.ListParams{Since: since, Until: until}, func(pg reconcile.Page) error {
		evs = append(evs, pg.Events...)
		cs = append(cs, pg.Changes...)
		return nil
	})
	return evs, cs, err
}

// Run runs the whole suite.
func Run(t *testing.T, newFake NewFake) {
	t.Run("PagingNoDuplicateNoLoss", func(t *testing.T) { pagingTest(t, newFake) })
	t.Run("WindowBoundsExact", func(t *testing.T) { boundsTest(t, newFake) })
	t.Run("RateLimitedThenSuccess", func(t *testing.T) { faultTest(t, newFake, 429) })
	t.Run("ServerErrorThenSuccess", func(t *testing.T) { faultTest(t, newFake, 500); faultTest(t, newFake, 503) })
	t.Run("TimeoutIsAnError", func(t *testing.T) { timeoutTest(t, newFake) })
	t.Run("EveryStatusMapped", func(t *testing.T) { statusTest(t, newFake) })
	t.Run("CancellationStopsWithinASecond", func(t *testing.T) { cancelTest(t, newFake) })
	t.Run("HorizonReported", func(t *testing.T) { horizonTest(t, newFake) })
}

func pagingTest(t *testing.T, newFake NewFake) {
	t.Parallel()
	f := newFake(t, Now)
	n := 3*f.PageSize() + 7
	want := map[string]bool{}
	start := Now.Add(-20 * time.Hour)
	step := 19 * time.Hour / time.Duration(n)
	for i := range n {
		want[f.AddPayment(start.Add(time.Duration(i)*step).Truncate(f.Precision()))] = true
	}
	evs, cs, err := list(context.Background(), f.Provider(0, 10*time.Second), Now.Add(-24*time.Hour), Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n {
		t.Fatalf("%d events for %d payments", len(evs), n)
	}
	seen := map[string]bool{}
	for i, e := range evs {
		if seen[e.ID] {
			t.Fatalf("event %s twice", e.ID)
		}
		seen[e.ID] = true
		if i > 0 && e.At.Before(evs[i-1].At) {
			t.Fatalf("events not oldest first at %d", i)
		}
	}
	got := map[string]bool{}
	for _, c := range cs {
		got[c.ProviderID] = true
	}
	for id := range want {
		if !got[id] {
			t.Fatalf("payment %s lost", id)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d payments, want %d", len(got), len(want))
	}
}

func boundsTest(t *testing.T, newFake NewFake) {
	t.Parallel()
	f := newFake(t, Now)
	pr := f.Precision()
	since, until := Now.Add(-2*time.Hour).Truncate(pr), Now.Add(-time.Hour).Truncate(pr)
	f.AddPayment(Now.Add(-5 * time.Hour))
	before := f.AddPayment(since.Add(-pr))
	first := f.AddPayment(since)
	last := f.AddPayment(until.Add(-pr))
	after := f.AddPayment(until)
	_, cs, err := list(context.Background(), f.Provider(0, 10*time.Second), since, until)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range cs {
		got[c.ProviderID] = true
	}
	if !got[first] || !got[last] || got[before] || got[after] || len(got) != 2 {
		t.Fatalf("window [%s, %s) at %v precision: got %v; want only the payments at since and until-%v", since, until, pr, got, pr)
	}
}

func faultTest(t *testing.T, newFake NewFake, status int) {
	f := newFake(t, Now)
	for i := range 5 {
		f.AddPayment(Now.Add(-time.Duration(i+1) * time.Hour))
	}
	f.FailNext(status, 3)
	p := f.Provider(5, 10*time.Second)
	evs, _, err := list(context.Background(), p, Now.Add(-24*time.Hour), Now)
	if err != nil {
		t.Fatalf("after %d %ds: %v", 3, status, err)
	}
	if len(evs) != 5 {
		t.Fatalf("%d events, want 5", len(evs))
	}
	if p.Requests() < 4 {
		t.Fatalf("%d requests: the failures were not retried", p.Requests())
	}
	// Too many failures: an error naming the status, never a silent truncation.
	f.FailNext(status, 50)
	_, _, err = list(context.Background(), f.Provider(2, 10*time.Second), Now.Add(-24*time.Hour), Now)
	if err == nil || !containsStatus(err, status) {
		t.Fatalf("persistent %d: err = %v", status, err)
	}
}

func containsStatus(err error, status int) bool {
	return err != nil && (fmt.Sprint(err) != "" && contains(err.Error(), fmt.Sprint(status)))
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func timeoutTest(t *testing.T, newFake NewFake) {
	t.Parallel()
	f := newFake(t, Now)
	f.AddPayment(Now.Add(-time.Hour))
	f.SetLatency(2 * time.Second)
	start := time.Now()
	_, _, err := list(context.Background(), f.Provider(1, 150*time.Millisecond), Now.Add(-24*time.Hour), Now)
	if err == nil {
		t.Fatal("a provider slower than the timeout must give an error")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("gave up after %v: the timeout was not applied", d)
	}
}

func statusTest(t *testing.T, newFake NewFake) {
	t.Parallel()
	f := newFake(t, Now)
	cases := f.StatusCases(Now.Add(-10 * time.Hour))
	unknown := false
	for _, c := range cases {
		unknown = unknown || c.Unknown
	}
	if !unknown {
		t.Fatal("the fake must include an unknown status case")
	}
	_, cs, err := list(context.Background(), f.Provider(0, 10*time.Second), Now.Add(-24*time.Hour), Now)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		ok := false
		for _, ch := range cs {
			ok = ok || c.matches(ch)
		}
		if !ok {
			t.Errorf("status %q of %s: no change mapping it to %+v", c.Raw, c.PaymentID, c)
		}
	}
	// Through the engine's decision, an unknown status is a drift item.
	for _, c := range cases {
		if !c.Unknown {
			continue
		}
		var mine []reconcile.Change
		for _, ch := range cs {
			if ch.ProviderID == c.PaymentID {
				mine = append(mine, ch)
			}
		}
		p := reconcile.Decide(reconcile.Local{Exists: true, State: models.StateCreated}, mine)
		found := false
		for _, it := range p.Items {
			found = found || it.Kind == models.KindUnknownStatus
		}
		if !found {
			t.Errorf("unknown status %q is not reported as %s", c.Raw, models.KindUnknownStatus)
		}
	}
}

func cancelTest(t *testing.T, newFake NewFake) {
	t.Parallel()
	f := newFake(t, Now)
	for i := range 3*f.PageSize() + 1 {
		f.AddPayment(Now.Add(-time.Duration(i+1) * time.Second))
	}
	f.SetLatency(300 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() {
		_, _, err := list(ctx, f.Provider(5, 30*time.Second), Now.Add(-24*time.Hour), Now)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(time.Second + 100*time.Millisecond):
		t.Fatal("did not stop within a second of cancellation")
	}
}

func horizonTest(t *testing.T, newFake NewFake) {
	t.Parallel()
	f := newFake(t, Now)
	h := f.Provider(0, time.Second).Horizon(Now)
	if h.IsZero() {
		t.Skip("this provider declares no retention horizon")
	}
	if !h.Before(Now) {
		t.Fatalf("horizon %v is not in the past", h)
	}
	// The engine clamps a window starting before the horizon and says so;
	// see reconcile's planWindow tests. Here: events before it are not
	// listed, so a provider with a horizon must declare it.
	f.AddPayment(h.Add(-time.Hour))
	_, cs, err := list(context.Background(), f.Provider(0, 10*time.Second), h.Add(-2*time.Hour), Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Fatalf("the fake lists events beyond the declared horizon: %d changes", len(cs))
	}
}
