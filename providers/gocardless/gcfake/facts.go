package gcfake

import (
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
	"github.com/reconciler/reconciler/models"
)

// Fact is one implied change of a payment, as the webhooks would apply it.
// Every event carries exactly one fact.
type Fact struct {
	EventID   string
	EventType string // "<resource_type>.<action>", e.g. "payments.confirmed"
	At        time.Time
	PaymentID string       // PM…
	State     models.State // "" when the event implies no state change
	// AmountRefunded is the payment's amount_refunded after a refund's paid
	// event; 0 for every other event (n/a).
	AmountRefunded int64
	Amount         int64
	Currency       string // lower-case ISO 4217, as the local rows keep it
}

// Delivery is one event as a webhook delivery would carry it.
type Delivery struct {
	EventID, EventType string
	At                 time.Time
	Payload            []byte // the event JSON exactly as /events lists it
	Facts              []Fact // the implied facts (one)
}

// Expected is the ground-truth state of one payment at some time.
type Expected struct {
	State          models.State
	At             time.Time // when State was established
	AmountRefunded int64
	Amount         int64
	Currency       string // lower-case
}

func (s *Server) fact(seq int32) Fact {
	e := &s.events[seq]
	pm := s.eventPM(e)
	p := &s.pms[pm]
	return Fact{
		EventID:        s.ids.id(kEvent, int(seq)),
		EventType:      s.eventType(e),
		At:             msTime(e.created),
		PaymentID:      s.ids.id(kPayment, int(pm)),
		State:          fakekit.StateOf(e.state),
		AmountRefunded: s.eventRefunded(e),
		Amount:         p.amount,
		Currency:       lowerASCII(s.currencies[p.currency]),
	}
}

// Deliveries returns every event, oldest first by (created_at, id). Every
// payload is rendered on the call (about 450 bytes an event), so at
// millions of events prefer paging /events.
func (s *Server) Deliveries() []Delivery {
	s.rlock()
	defer s.mu.RUnlock()
	out := make([]Delivery, 0, len(s.events))
	for _, seq := range s.eventOrder.Idx {
		e := &s.events[seq]
		out = append(out, Delivery{
			EventID:   s.ids.id(kEvent, int(seq)),
			EventType: s.eventType(e),
			At:        msTime(e.created),
			Payload:   s.appendEvent(nil, seq),
			Facts:     []Fact{s.fact(seq)},
		})
	}
	return out
}

// ExpectedAt returns, per payment id, the state the webhooks should have
// produced by t: every fact with At <= t is applied in (At, id) order; a
// state change applies when the payment has no state yet or models.Guard
// allows it; amount_refunded only grows and stays 0 for canceled payments.
// Payments created after t are absent.
//
// A failure GoCardless retries (details.will_attempt_retry true) is not
// final: its fact, the resubmission after it and the settlement of such a
// late failure imply no state change, so a payment failed, retried and
// collected ends where the collection put it (captured, settled), and one
// whose failure is pending a retry stays where it was. Only a final failure
// (will_attempt_retry false) implies failed.
func (s *Server) ExpectedAt(t time.Time) map[string]Expected {
	s.rlock()
	defer s.mu.RUnlock()
	limit := t.UnixMilli()
	if t.Before(time.UnixMilli(limit)) { // sub-millisecond t before the epoch
		limit--
	}
	type st struct {
		state    models.State
		at       time.Time
		refunded int64
	}
	cur := make([]st, len(s.pms))
	lower := make([]string, len(s.currencies))
	for i, c := range s.currencies {
		lower[i] = lowerASCII(c)
	}
	for _, seq := range s.eventOrder.Idx {
		e := &s.events[seq]
		if e.created > limit {
			break
		}
		c := &cur[s.eventPM(e)]
		if to := fakekit.StateOf(e.state); to != models.StateNone {
			at := msTime(e.created)
			if c.state == models.StateNone || models.Guard(c.state, &c.at, to, at) {
				c.state, c.at = to, at
			}
		}
		c.refunded = max(c.refunded, s.eventRefunded(e))
	}
	out := make(map[string]Expected)
	for i := range s.pms {
		p := &s.pms[i]
		if p.created > limit {
			continue
		}
		c := cur[i]
		if c.state == models.StateCanceled {
			c.refunded = 0
		}
		out[s.ids.id(kPayment, i)] = Expected{State: c.state, At: c.at, AmountRefunded: c.refunded,
			Amount: p.amount, Currency: lower[p.currency]}
	}
	return out
}

// PaymentIDs returns every payment id in creation (builder call) order.
func (s *Server) PaymentIDs() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, len(s.pms))
	for i := range s.pms {
		out[i] = s.ids.id(kPayment, i)
	}
	return out
}
