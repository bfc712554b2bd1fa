package gcfake

import (
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
	"github.com/reconciler/reconciler/models"
)

// Fact is one implied change of a payment, as the webhooks would apply it.
// Every event carries exactly one fact. A creditors event (bounced_payout)
// concerns no payment: its PaymentID is "", State "", Amount 0, Currency
// the payout's and PayoutID the bounced payout.
type Fact struct {
	EventID   string
	EventType string // "<resource_type>.<action>", e.g. "payments.confirmed"
	At        time.Time
	PaymentID string       // PM…
	State     models.State // "" when the event implies no state change
	// AmountRefunded is the payment's amount_refunded after a refund's
	// created event (GoCardless raises it when a refund is created); 0 for
	// every other event (n/a).
	AmountRefunded int64
	Amount         int64
	Currency       string // lower-case ISO 4217, as the local rows keep it
	RefundID       string // RF… for a refunds event, else ""
	// PayoutID is the payout the event concerns: links.payout of a
	// payments event (paid_out; late_failure_settled and chargeback_settled
	// when the builder named the payout debited) or of a creditors
	// bounced_payout event, or the payout a refund_settled or
	// funds_returned event's money moved in (not rendered on refund
	// events); "" when none.
	PayoutID string
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
	State models.State
	At    time.Time // when State was established
	// AmountRefunded is amount_refunded as GoCardless shows it: the total
	// of the payment's refunds at their creation. It is never lowered:
	// failed and cancelled refunds stay in it (GoCardless documents no
	// decrease); they are counted in RefundsFailed and RefundsCancelled.
	AmountRefunded int64
	Amount         int64
	Currency       string // lower-case
	// RefundsFailed is the total amount of the payment's refunds with a
	// refunds.failed event by then (status bounced, or funds_returned
	// after it); RefundsCancelled that of its refunds cancelled by then
	// (CancelRefund: no event).
	RefundsFailed, RefundsCancelled int64
	// PayoutID is the payment's links.payout: the payout of its latest
	// paid_out event, cleared by a later resubmission GoCardless made
	// (AutoRetry); "" when not paid out.
	PayoutID string
}

func (s *Server) fact(seq int32) Fact {
	e := &s.events[seq]
	f := Fact{
		EventID:        s.ids.id(kEvent, int(seq)),
		EventType:      s.eventType(e),
		At:             msTime(e.created),
		State:          fakekit.StateOf(e.state),
		AmountRefunded: s.eventRefunded(e),
	}
	if e.rtype() == rtRefunds {
		f.RefundID = s.ids.id(kRefund, int(e.obj))
	}
	if po := s.eventPayout(seq); po >= 0 {
		f.PayoutID = s.ids.id(kPayout, int(po))
		f.Currency = lowerASCII(s.currencies[s.payouts[po].currency])
	}
	if pm := s.eventPM(e); pm >= 0 {
		p := &s.pms[pm]
		f.PaymentID = s.ids.id(kPayment, int(pm))
		f.Amount, f.Currency = p.amount, lowerASCII(s.currencies[p.currency])
	}
	return f
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
// Refunds: a refund's created event raises amount_refunded to the payment's
// new total and implies state refunded when that reaches the amount, as
// GoCardless's amount_refunded shows it (raised at creation, never lowered);
// a failed or cancelled refund leaves both as they are and is counted in
// RefundsFailed or RefundsCancelled instead.
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
		state            models.State
		at               time.Time
		refunded         int64
		failed, canceled int64
		payout           int32
	}
	cur := make([]st, len(s.pms))
	for i := range cur {
		cur[i].payout = -1
	}
	lower := make([]string, len(s.currencies))
	for i, c := range s.currencies {
		lower[i] = lowerASCII(c)
	}
	for _, seq := range s.eventOrder.Idx {
		e := &s.events[seq]
		if e.created > limit {
			break
		}
		pm := s.eventPM(e)
		if pm < 0 {
			continue // a creditors event
		}
		c := &cur[pm]
		if to := fakekit.StateOf(e.state); to != models.StateNone {
			at := msTime(e.created)
			if c.state == models.StateNone || models.Guard(c.state, &c.at, to, at) {
				c.state, c.at = to, at
			}
		}
		c.refunded = max(c.refunded, s.eventRefunded(e))
		switch rt, action := e.rtype(), s.actions[e.action]; {
		case rt == rtRefunds && action == "failed":
			c.failed += s.refunds[e.obj].amount
		case rt == rtPayments && action == "paid_out":
			c.payout = s.eventPayout(seq)
		case rt == rtPayments && action == "resubmission_requested" && e.variant() == varAutoRetried:
			c.payout = -1
		}
	}
	for i := range s.refunds {
		if r := &s.refunds[i]; r.isCancelled && r.cancelled <= limit {
			cur[r.pm].canceled += r.amount
		}
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
		x := Expected{State: c.state, At: c.at, AmountRefunded: c.refunded, Amount: p.amount,
			Currency: lower[p.currency], RefundsFailed: c.failed, RefundsCancelled: c.canceled}
		if c.payout >= 0 {
			x.PayoutID = s.ids.id(kPayout, int(c.payout))
		}
		out[s.ids.id(kPayment, i)] = x
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
