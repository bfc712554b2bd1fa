package stripe

import (
	"context"
	"time"

	"github.com/reconciler/reconciler/reconcile"
)

// What the stripe-mock tests (stripemock_test.go, package stripe_test) need
// of the provider's unexported passes, to drive each one alone against
// stripe-mock and assert the requests it makes.

// AvailabilityLookback and PayoutSearch are the windows the passes below
// derive their created[] filters from.
const (
	AvailabilityLookback = availabilityLookback
	PayoutSearch         = payoutSearch
)

// SettleAvailable runs the manual-payout availability pass (settleAvailable)
// over [since, until) and returns every change it delivered, in order.
func (p *Provider) SettleAvailable(ctx context.Context, account string, since, until time.Time, delayDays int64) ([]reconcile.Change, error) {
	var out []reconcile.Change
	err := p.settleAvailable(ctx, account, since, until, delayDays, func(cs []reconcile.Change) error {
		out = append(out, cs...)
		return nil
	})
	return out, err
}

// PayoutSchedule is the account's payout schedule as the provider read it
// (GET /v1/account, once per provider and account).
func (p *Provider) PayoutSchedule(ctx context.Context, account string) (manual bool, delayDays int64, err error) {
	s, err := p.payoutSchedule(ctx, account)
	return s.manual, s.delayDays, err
}

// StuckPayoutSearch is the stuck path's search for the paid payouts that may
// have paid a charge out: one fetcher, as one Fetch call makes, so its cache
// of searches by day is the one Fetch uses.
type StuckPayoutSearch struct{ f *fetcher }

// StuckPayoutSearch returns a fresh search for account, as Fetch builds it.
func (p *Provider) StuckPayoutSearch(account string) *StuckPayoutSearch {
	return &StuckPayoutSearch{f: &fetcher{p: p, v: p.Verifier(), account: account, candidates: map[int64][]string{}}}
}

// PaidPayoutsFrom is (*fetcher).paidPayoutsFrom: the ids of the paid
// payouts created in [day, day+PayoutSearch), newest first.
func (s *StuckPayoutSearch) PaidPayoutsFrom(ctx context.Context, day int64) ([]string, error) {
	return s.f.paidPayoutsFrom(ctx, day)
}

// ReadAhead lists [since, until) of account as a read-ahead does (ahead.go),
// to its end, and returns the ids it listed, newest first, and its error.
func (p *Provider) ReadAhead(ctx context.Context, account string, since, until time.Time, events int) ([]string, error) {
	a, err := p.startAhead(ctx, account, since.Unix(), until.Unix(), true, events, nil, nil)
	if err != nil {
		return nil, err
	}
	defer a.close()
	<-a.done
	var ids []string
	for _, e := range a.evs {
		ids = append(ids, e.id)
	}
	return ids, a.err
}

// PayoutsAhead lists the payout events of [since, until) of account and
// their balance transactions ahead, as a stream latency-bound does
// (payoutahead.go), waits for the listings and returns how many were
// started.
func (p *Provider) PayoutsAhead(ctx context.Context, account string, since, until time.Time) int {
	s := p.newBTAheads(ctx, account)
	defer s.close()
	s.discover(since.Unix(), until.Unix())
	s.wg.Wait()
	s.mu.Lock()
	held := make([]*btAhead, 0, len(s.byID))
	for _, a := range s.byID {
		held = append(held, a)
	}
	s.mu.Unlock()
	n := 0
	for _, a := range held {
		a.mu.Lock()
		started := a.started
		a.mu.Unlock()
		if started {
			<-a.done
			n++
		}
	}
	return n
}
