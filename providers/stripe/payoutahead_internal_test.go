package stripe

import (
	"context"
	"reflect"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// A payout's balance transactions listed ahead and stopped by the bound
// on what they keep after its first page (or its first two) are read from
// there, and the
// mapping lists the rest from the last one kept: the same changes, in the
// same order, as its own listing, one request more at most (the page past
// the bound read and not kept), and the bound given back.
func TestPayoutListedAheadInPart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 3})
	u := fake.Start()
	t.Cleanup(fake.Close)
	fake.Account("").Generate(stripefake.GenOptions{Payments: 2000, Start: now.Add(-4 * 24 * time.Hour), End: now.Add(-time.Hour), Seed: 3})
	ctx := context.Background()
	provider := func(bound int64) *Provider {
		p, err := New(Config{APIKey: "sk_test_x", BaseURL: u, ReadAheadPayoutsMax: bound})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	// The window's payout.paid events, each with at least three pages of
	// balance transactions.
	p := provider(0)
	var paid []*leanEvent
	it := p.eventIter(&stripego.EventListParams{ListParams: listParams(ctx, "", 100), Types: []*string{stripego.String("payout.paid")}}, false)
	for it.Next() {
		paid = append(paid, it.Current().(*leanEvent))
	}
	if err := it.Err(); err != nil || len(paid) < 2 {
		t.Fatalf("payout.paid events: %d, %v", len(paid), err)
	}
	changes := func(p *Provider, ev *leanEvent, ahead *btAheads) []reconcile.Change {
		var out []reconcile.Change
		if err := p.payoutEach(ctx, "", ev, ahead, func(c reconcile.Change) error {
			out = append(out, c)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}

	for _, ev := range paid {
		alone := provider(0)
		want := changes(alone, ev, nil)
		// The sizes of its pages, from a listing ahead kept whole.
		whole := provider(64 << 20)
		ahead := whole.newBTAheads(ctx, "")
		a := ahead.add(ev)
		ahead.start(a)
		<-a.done
		a.mu.Lock()
		var sizes []int64 // what each page keeps
		for _, pg := range a.pages {
			n := int64(0)
			for _, bt := range pg {
				n += btSize(bt)
			}
			sizes = append(sizes, n)
		}
		a.mu.Unlock()
		if len(sizes) < 3 {
			t.Fatalf("payout event %s: %d pages listed ahead", ev.ID, len(sizes))
		}
		if got := changes(whole, ev, ahead); !sameChanges(want, got) || whole.Requests() != alone.Requests() {
			t.Fatalf("payout event %s listed ahead whole: %d changes (%d requests) against %d (%d)", ev.ID, len(got), whole.Requests(), len(want), alone.Requests())
		}
		ahead.close()

		for kept := 1; kept <= 2; kept++ {
			// A bound that holds kept pages but not the next.
			var bound int64
			for _, n := range sizes[:kept] {
				bound += n
			}
			bound += sizes[kept] / 2
			p := provider(bound)
			ahead := p.newBTAheads(ctx, "")
			ahead.start(ahead.add(ev))
			<-ahead.byID[ev.ID].done
			if n := len(ahead.byID[ev.ID].pages); n != kept {
				t.Fatalf("payout event %s at a bound of %d bytes: %d pages kept, want %d", ev.ID, bound, n, kept)
			}
			got := changes(p, ev, ahead)
			if !sameChanges(want, got) {
				t.Fatalf("payout event %s, %d pages kept: %d changes against %d", ev.ID, kept, len(got), len(want))
			}
			if p.Requests() > alone.Requests()+1 {
				t.Fatalf("payout event %s, %d pages kept: %d requests against %d", ev.ID, kept, p.Requests(), alone.Requests())
			}
			if p.PayoutsListedAhead() != 1 {
				t.Fatalf("payout event %s: the mapping read %d listings ahead", ev.ID, p.PayoutsListedAhead())
			}
			ahead.close()
			if left := ahead.share.Left(); left != bound {
				t.Fatalf("payout event %s: %d of the bound's %d bytes given back", ev.ID, left, bound)
			}
		}
	}
}

func sameChanges(a, b []reconcile.Change) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}
