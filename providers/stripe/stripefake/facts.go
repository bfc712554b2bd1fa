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
}

func (a *Account) fact(seq int32, f factRec) Fact {
	e := &a.events[seq]
	p := &a.pis[f.pi]
	return Fact{
		EventID:        a.ids.id(kEvent, int(seq)),
		EventType:      a.types[e.typ],
		At:             time.Unix(e.created, 0).UTC(),
		PaymentID:      a.ids.id(kPI, int(f.pi)),
		State:          fakekit.StateOf(f.state),
		AmountRefunded: f.amountRefunded,
		Amount:         p.amount,
		Currency:       p.currency,
	}
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
// canceled payments. Payments created after t are absent.
func (a *Account) ExpectedAt(t time.Time) map[string]Expected {
	a.rlock()
	defer a.mu.RUnlock()
	limit := t.Unix()
	type st struct {
		state    models.State
		at       time.Time
		refunded int64
	}
	cur := make([]st, len(a.pis))
	for _, seq := range a.eventOrder.Idx {
		e := &a.events[seq]
		if e.created > limit {
			break
		}
		at := time.Unix(e.created, 0).UTC()
		for _, f := range a.eventFacts(int(seq)) {
			c := &cur[f.pi]
			if to := fakekit.StateOf(f.state); to != models.StateNone {
				if c.state == models.StateNone || models.Guard(c.state, &c.at, to, at) {
					c.state, c.at = to, at
				}
			}
			c.refunded = max(c.refunded, f.amountRefunded)
		}
	}
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
		out[a.ids.id(kPI, i)] = Expected{State: c.state, At: c.at, AmountRefunded: c.refunded, Amount: p.amount, Currency: p.currency}
	}
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
