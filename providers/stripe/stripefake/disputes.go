package stripefake

import (
	"fmt"
	"net/url"
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
)

// What `reconciler verify` reads besides the objects the event path reads:
// GET /v1/disputes filtered by charge or payment_intent (Stripe's "List all
// disputes": charge, payment_intent, created, ending_before, starting_after,
// limit; newest first), and payouts that failed or were canceled after they
// were paid.

func (a *Account) disputeCreated(i int32) int64 { return a.disputes[i].created }

func listDisputes(a *Account, _ string, q url.Values, rq request) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	ch, pi := int32(-1), int32(-1)
	if id := q.Get("charge"); id != "" {
		if ch, e = a.lookup(kCharge, id, len(a.charges)); e != nil {
			e.param = "charge"
			return nil, e
		}
	}
	if id := q.Get("payment_intent"); id != "" {
		if pi, e = a.lookup(kPI, id, len(a.pis)); e != nil {
			e.param = "payment_intent"
			return nil, e
		}
	}
	// Disputes are few: the ascending (created, index) view is built per
	// request instead of being kept sorted.
	items := make([]int32, 0, len(a.disputes))
	for i := range a.disputes {
		d := &a.disputes[i]
		if (ch < 0 || d.charge == ch) && (pi < 0 || a.charges[d.charge].pi == pi) {
			items = append(items, int32(i))
		}
	}
	fakekit.Ascending(items, a.disputeCreated)
	cur, before, e := a.resolveCursor(&p, kDispute, len(a.disputes), a.disputeCreated, -1<<63)
	if e != nil {
		return nil, e
	}
	out, more := paginate(view{items, a.disputeCreated, nil}, p.gte, p.lte, cur, before, p.limit)
	return a.renderList("/v1/disputes", out, more, func(b []byte, i int32) []byte { return a.appendDispute(b, i, rq.rv) }), nil
}

// payoutStatus is payout i's status as Stripe shows it.
func (a *Account) payoutStatus(i int32) string {
	if st := a.payouts[i].status; st != "" {
		return st
	}
	return "paid"
}

// FailPayout makes a paid payout "failed" or "canceled" after it was paid
// (the bank returned it) and emits payout.failed or payout.canceled. Its
// balance transactions stay listed under it, as on Stripe. Implied: no
// state change for the payments it paid out (never a backward move; a
// drift item naming the payout).
func (a *Account) FailPayout(payout, status string, at time.Time) {
	if status != "failed" && status != "canceled" {
		panic(fmt.Sprintf("stripefake: FailPayout status %q (want failed or canceled)", status))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	i := a.ids.decode(kPayout, payout, len(a.payouts))
	if i < 0 {
		panic(fmt.Sprintf("stripefake: unknown payout %q", payout))
	}
	po := int32(i)
	a.payouts[po].status = status
	a.emit("payout."+status, secs(at), a.snapPayout(po), a.payoutFacts(po)...)
}
