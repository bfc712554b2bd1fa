package stripefake

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
)

// GenOptions configures Account.Generate.
type GenOptions struct {
	Payments   int
	Start, End time.Time
	Seed       int64
	Currency   string // default "gbp"
}

// Generate adds o.Payments payments with realistic histories created
// uniformly over [Start, End) (a history whose next step would fall at or after End stops there):
// ~60% automatic capture within minutes, ~10% manual capture hours after
// authorisation, ~5% authorised then canceled (the charge.refunded trap),
// ~8% a failed attempt then success, ~5% left at requires_payment_method,
// ~8% refunded days later (half partial, half full), ~2% disputed (three in
// four lost), ~1% a refund that later fails, the rest automatic capture;
// then a daily payout at 00:00 UTC of each day after Start (before End)
// sweeping charges captured at least two days earlier. Amounts are
// 100..50000 and every payment carries a random customer name and e-mail.
// It is deterministic for a given Seed and account.
func (a *Account) Generate(o GenOptions) {
	if o.Payments <= 0 || !o.End.After(o.Start) {
		return
	}
	cur := o.Currency
	if cur == "" {
		cur = "gbp"
	}
	cur = lowerASCII(cur)
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x6E6E_5EED))
	start, end := o.Start.Unix(), o.End.Unix()
	if end <= start {
		end = start + 1
	}
	span := end - start
	times := make([]int64, o.Payments)
	for i := range times {
		times[i] = start + rng.Int64N(span)
	}
	slices.Sort(times)

	a.mu.Lock()
	defer a.mu.Unlock()
	n := o.Payments
	a.pis = slices.Grow(a.pis, n)
	a.charges = slices.Grow(a.charges, n*95/100)
	a.bts = slices.Grow(a.bts, n)
	a.events = slices.Grow(a.events, n*24/10)
	a.facts = slices.Grow(a.facts, n*34/10)
	a.piOrder.Idx = slices.Grow(a.piOrder.Idx, n)
	a.eventOrder.Idx = slices.Grow(a.eventOrder.Idx, n*24/10)
	a.btOrder.Idx = slices.Grow(a.btOrder.Idx, n)

	last := end - 1
	for _, t0 := range times {
		t := t0
		// next advances the payment's clock by lo..hi seconds; a history
		// whose next step would fall at or after End stops there (still
		// pending at End, as in real life).
		next := func(lo, hi int64) bool {
			t += lo + rng.Int64N(hi-lo+1)
			return t <= last
		}
		amount := 100 + rng.Int64N(49901)
		name, email := fakekit.Person(rng.Uint64())
		r := rng.IntN(100)
		manual := r >= 60 && r < 75
		partial := rng.IntN(2) == 0
		lost := rng.IntN(4) != 0
		pi := a.createPayment(amount, cur, manual, t0, name, email)
		refundAmount := amount
		if partial {
			refundAmount = 1 + rng.Int64N(amount-1)
		}
		switch {
		case r < 60 || r >= 99: // automatic capture
			if next(2, 600) {
				a.capture(pi, t)
			}
		case r < 70: // manual capture
			if next(2, 120) {
				a.authorise(pi, t)
				if next(3600, 48*3600) {
					a.capture(pi, t)
				}
			}
		case r < 75: // authorised, then canceled
			if next(2, 120) {
				a.authorise(pi, t)
				if next(600, 72*3600) {
					a.cancel(pi, t)
				}
			}
		case r < 83: // failed attempt, then success
			if next(2, 120) {
				a.failAttempt(pi, t)
				if next(30, 1800) {
					a.capture(pi, t)
				}
			}
		case r < 88: // abandoned
		case r < 96: // refunded later
			if next(2, 600) {
				a.capture(pi, t)
				if next(3600, 20*86400) {
					a.refund(pi, refundAmount, t, "succeeded")
				}
			}
		case r < 98: // disputed
			if next(2, 600) {
				a.capture(pi, t)
				if next(86400, 30*86400) {
					dp := a.dispute(pi, t)
					if next(86400, 20*86400) {
						status := "won"
						if lost {
							status = "lost"
						}
						a.closeDispute(dp, status, t)
					}
				}
			}
		default: // refund that fails
			if next(2, 600) {
				a.capture(pi, t)
				if next(3600, 10*86400) {
					re := a.refund(pi, refundAmount, t, "succeeded")
					if next(3600, 5*86400) {
						a.failRefund(re, t)
					}
				}
			}
		}
	}

	day := o.Start.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	for ; day.Before(o.End); day = day.Add(24 * time.Hour) {
		a.payoutCaptured(day.Unix(), 48*time.Hour)
	}
}
