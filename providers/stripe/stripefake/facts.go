package stripefake

import (
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
	"github.com/reconciler/reconciler/models"
)

// Fact is one implied state change of a payment, as the webhooks would apply
// it.
type Fact struct {
	EventID   string
	EventType string
	At        time.Time
	PaymentID string       // pi_…
	State     models.State // "" when the event implies no state change
	// AmountRefunded is the charge's amount_refunded of captured money after
	// this event, for events carrying a charge snapshot (charge.refunded,
	// charge.captured); 0 otherwise (n/a, or the cancel trap).
	AmountRefunded int64
	Amount         int64
	Currency       string
	// AmountCaptured is the captured amount of a partial capture
	// (PartialCapture), on its payment_intent.succeeded and charge.captured
	// facts; 0 otherwise.
	AmountCaptured int64
	// Reverted is, on the charge.refund.updated fact of a refund that
	// failed or was canceled, its amount: counted in AmountRefunded before,
	// it is not a refund of captured money. 0 otherwise.
	Reverted int64
	// PayoutID is, on a settled fact, the payout that settled the payment.
	PayoutID string
}

// Delivery is one event as a webhook delivery would carry it.
type Delivery struct {
	EventID, EventType string
	At                 time.Time
	Payload            []byte // the event JSON exactly as /v1/events lists it
	Facts              []Fact // the implied facts (a payout.paid has one per swept payment)
}

// Expected is the ground-truth state of one payment at some time.
type Expected struct {
	State          models.State
	At             time.Time // when State was established
	AmountRefunded int64
	Amount         int64
	Currency       string
	// AmountCaptured is the captured amount when the payment was partially
	// captured (less than Amount); 0 otherwise (not captured, or all of
	// Amount).
	AmountCaptured int64
	// Reverted is how much of AmountRefunded (which the webhooks never
	// lower) refunds that failed or were canceled later took back: refunds
	// of captured money are AmountRefunded − Reverted.
	Reverted int64
	// PayoutID is, when State is settled, the payout that settled it; ""
	// for a payment of a manual-payout account, settled when its funds
	// became available.
	PayoutID string
}

func (a *Account) fact(seq int32, f factRec) Fact {
	e := &a.events[seq]
	p := &a.pis[f.pi]
	out := Fact{
		EventID:   a.ids.id(kEvent, int(seq)),
		EventType: a.types[e.typ],
		At:        time.Unix(e.created, 0).UTC(),
		PaymentID: a.ids.id(kPI, int(f.pi)),
		State:     fakekit.StateOf(f.state),
		Amount:    p.amount,
		Currency:  p.currency,
	}
	if f.flags&factReverted != 0 {
		out.Reverted = f.amountRefunded
	} else {
		out.AmountRefunded = f.amountRefunded
	}
	if f.flags&factPartial != 0 {
		out.AmountCaptured = a.partialCaptured(f.pi)
	}
	if out.State == models.StateSettled && e.snap.kind == kPayout {
		out.PayoutID = a.ids.id(kPayout, int(e.snap.obj))
	}
	return out
}

// partialCaptured is the captured amount of the payment's partially
// captured charge.
func (a *Account) partialCaptured(pi int32) int64 {
	ch := a.pis[pi].charge
	if ch < 0 {
		return 0
	}
	c := &a.charges[ch]
	return c.amount - a.released(c)
}

// Deliveries returns every event of the account, oldest first by (created,
// creation sequence), regardless of the 30-day horizon. Every payload is
// rendered on the call (about 550 bytes an event), so at millions of events
// prefer paging /v1/events.
func (a *Account) Deliveries() []Delivery {
	a.rlock()
	defer a.mu.RUnlock()
	out := make([]Delivery, 0, len(a.events))
	for _, seq := range a.eventOrder.Idx {
		e := &a.events[seq]
		d := Delivery{
			EventID:   a.ids.id(kEvent, int(seq)),
			EventType: a.types[e.typ],
			At:        time.Unix(e.created, 0).UTC(),
			Payload:   a.appendEvent(nil, seq),
		}
		for _, f := range a.eventFacts(int(seq)) {
			d.Facts = append(d.Facts, a.fact(seq, f))
		}
		out = append(out, d)
	}
	return out
}

// ExpectedAt returns, per payment intent id, the state the webhooks should
// have produced by t: every fact with At <= t is applied in (At, sequence)
// order; a state change applies when the payment has no state yet or
// models.Guard allows it; amount_refunded only grows and stays 0 for
// canceled payments. On a manual-payout account (SetManualPayouts) a
// captured payment not paid out by an automatic payout is also settled at
// its charge balance transaction's available_on, once both t and the
// server's clock have reached it (a fact without an event, applied after
// the events of the same second). Payments created after t are absent.
func (a *Account) ExpectedAt(t time.Time) map[string]Expected {
	a.rlock()
	defer a.mu.RUnlock()
	limit := t.Unix()
	type st struct {
		state    models.State
		at       time.Time
		refunded int64
		captured int64
		net      int64 // amount_refunded of captured money, failed and canceled refunds taken out
		payout   int32
	}
	cur := make([]st, len(a.pis))
	for i := range cur {
		cur[i].payout = -1
	}
	settles := a.availableSettles(min(limit, a.now().Unix()))
	next := 0
	settleUntil := func(t int64) {
		for ; next < len(settles) && a.bts[a.charges[settles[next]].bt].availableOn <= t; next++ {
			c := &cur[a.charges[settles[next]].pi]
			at := time.Unix(a.bts[a.charges[settles[next]].bt].availableOn, 0).UTC()
			if c.state == models.StateNone || models.Guard(c.state, &c.at, models.StateSettled, at) {
				c.state, c.at, c.payout = models.StateSettled, at, -1
			}
		}
	}
	for _, seq := range a.eventOrder.Idx {
		e := &a.events[seq]
		if e.created > limit {
			break
		}
		if next < len(settles) {
			settleUntil(e.created - 1)
		}
		at := time.Unix(e.created, 0).UTC()
		for _, f := range a.eventFacts(int(seq)) {
			c := &cur[f.pi]
			if to := fakekit.StateOf(f.state); to != models.StateNone {
				if c.state == models.StateNone || models.Guard(c.state, &c.at, to, at) {
					c.state, c.at = to, at
					if to == models.StateSettled && e.snap.kind == kPayout {
						c.payout = e.snap.obj
					}
				}
			}
			if f.flags&factPartial != 0 {
				c.captured = a.partialCaptured(f.pi)
			}
			switch {
			case f.flags&factReverted != 0:
				c.net -= f.amountRefunded
			case e.snap.kind == kCharge:
				c.net = f.amountRefunded
				c.refunded = max(c.refunded, f.amountRefunded)
			default:
				c.refunded = max(c.refunded, f.amountRefunded)
			}
		}
	}
	settleUntil(limit)
	out := make(map[string]Expected)
	for i := range a.pis {
		p := &a.pis[i]
		if p.created > limit {
			continue
		}
		c := cur[i]
		if c.state == models.StateCanceled {
			c.refunded = 0
		}
		x := Expected{State: c.state, At: c.at, AmountRefunded: c.refunded, Amount: p.amount, Currency: p.currency,
			AmountCaptured: c.captured, Reverted: max(c.refunded-c.net, 0)}
		if c.state == models.StateSettled && c.payout >= 0 {
			x.PayoutID = a.ids.id(kPayout, int(c.payout))
		}
		out[a.ids.id(kPI, i)] = x
	}
	return out
}

// availableSettles returns, on a manual-payout account, the captured
// charges not paid out by an automatic payout whose balance transaction is
// available by `until`, in available_on order.
func (a *Account) availableSettles(until int64) []int32 {
	if !a.manual {
		return nil
	}
	var out []int32
	for ch := range a.charges {
		c := &a.charges[ch]
		if c.captured && c.payout < 0 && c.bt >= 0 && a.bts[c.bt].availableOn <= until {
			out = append(out, int32(ch))
		}
	}
	fakekit.Ascending(out, func(ch int32) int64 { return a.bts[a.charges[ch].bt].availableOn })
	return out
}

// PaymentIDs returns every payment intent id of the account in creation
// order.
func (a *Account) PaymentIDs() []string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]string, len(a.pis))
	for i := range a.pis {
		out[i] = a.ids.id(kPI, i)
	}
	return out
}
