package gcfake

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
	"github.com/reconciler/reconciler/models"
)

// ---- objects -------------------------------------------------------------

// Times are Unix milliseconds (GoCardless timestamps carry milliseconds);
// dates are days since the Unix epoch.

type pmObj struct {
	amount, amountRefunded int64
	created                int64
	chargeDate             int32
	payout                 int32 // -1 until paid out
	status                 uint16
	currency               uint8
	retry                  bool // retry_if_possible (Success+)
	// lastFailRetried says the payment's latest failure had
	// will_attempt_retry true (GoCardless retries it).
	lastFailRetried bool
}

type refundObj struct {
	amount int64
	// totalAfter is the payment's amount_refunded once this refund is
	// created: GoCardless raises amount_refunded when a refund is created,
	// not when it is paid.
	totalAfter int64
	created    int64
	cancelled  int64 // when CancelRefund cancelled it (isCancelled)
	pm         int32
	status     uint16
	// isCancelled: CancelRefund ran (no event records it).
	isCancelled bool
}

type payoutObj struct {
	amount, created int64
	fees            int64 // deducted_fees (gocardless_fee items)
	arrival         int32
	status          uint16 // pending, paid or bounced
	currency        uint8
	// items are the payout's items in the order they were added: an event
	// seq (>= 0) whose money moved in this payout, or -1-i for fee i.
	items []int32
}

// feeObj is a gocardless_fee payout item.
type feeObj struct {
	amount int64
	pm     int32
}

// evPayout says that event seq moved money in payout po (an item of the
// payout); kept in seq order, as events are only ever appended.
type evPayout struct{ seq, po int32 }

// Resource types of events.
const (
	rtPayments uint8 = iota
	rtRefunds
	rtCreditors // obj is a payout (bounced_payout)
	rtCount
)

var rtName = [rtCount]string{"payments", "refunds", "creditors"}

// Variants of an event's details, for actions with more than one cause.
const (
	varDefault uint8 = iota
	varMandateCancelled
	varLateFailure  // failed after confirmed or paid_out: refer_to_payer, reported late
	varReferToPayer // failed on the charge date: refer_to_payer (Bacs 0, insufficient funds)
	varAutoRetried  // resubmission_requested by GoCardless (Success+), not the API
)

// flagWillRetry marks a failed event with details.will_attempt_retry true.
const flagWillRetry uint8 = 1 << 5

// flagRefunded marks the refunds.created event that raised the payment's
// amount_refunded to the refund's totalAfter.
const flagRefunded uint8 = 1 << 6

// eventRec is one event (16 bytes). Its JSON is rendered when listed; its
// one implied fact is derived from it (the payment is obj, or the refund's
// payment; a refund's created event carries the refund's totalAfter; a
// creditors event's obj is a payout and concerns no payment).
type eventRec struct {
	created int64
	obj     int32 // payment or refund index
	action  uint16
	// flags: low 2 bits resource type; next 3 bits details variant; bit 5
	// flagWillRetry; bit 6 flagRefunded.
	flags uint8
	state uint8 // implied state: 0 none, else index+1 in models.States
}

func (e *eventRec) rtype() uint8    { return e.flags & 3 }
func (e *eventRec) variant() uint8  { return e.flags >> 2 & 7 }
func (e *eventRec) willRetry() bool { return e.flags&flagWillRetry != 0 }

// ---- store ---------------------------------------------------------------

func (s *Server) pmCreated(i int32) int64     { return s.pms[i].created }
func (s *Server) refundCreated(i int32) int64 { return s.refunds[i].created }
func (s *Server) eventCreated(i int32) int64  { return s.events[i].created }
func (s *Server) payoutCreated(i int32) int64 { return s.payouts[i].created }

func (s *Server) dirty() bool {
	for t := range s.typeOrder {
		if s.typeOrder[t].Dirty {
			return true
		}
	}
	return s.eventOrder.Dirty || s.pmOrder.Dirty || s.refundOrder.Dirty || s.payoutOrder.Dirty
}

func (s *Server) fixOrders() {
	s.eventOrder.Fix(s.eventCreated)
	for t := range s.typeOrder {
		s.typeOrder[t].Fix(s.eventCreated)
	}
	s.pmOrder.Fix(s.pmCreated)
	s.refundOrder.Fix(s.refundCreated)
	s.payoutOrder.Fix(s.payoutCreated)
}

// rlock takes the read lock with every order sorted.
func (s *Server) rlock() {
	for {
		s.mu.RLock()
		if !s.dirty() {
			return
		}
		s.mu.RUnlock()
		s.mu.Lock()
		s.fixOrders()
		s.mu.Unlock()
	}
}

func intern(tab *[]string, idx map[string]uint16, v string) uint16 {
	if c, ok := idx[v]; ok {
		return c
	}
	if len(*tab) >= 1<<16 {
		panic("gcfake: too many distinct strings")
	}
	c := uint16(len(*tab))
	*tab = append(*tab, v)
	idx[v] = c
	return c
}

func (s *Server) statusCode(v string) uint16 { return intern(&s.statuses, s.statusIdx, v) }
func (s *Server) actionCode(v string) uint16 { return intern(&s.actions, s.actionIdx, v) }

func (s *Server) currencyCode(cur string) uint8 {
	cur = upperASCII(cur)
	for i, c := range s.currencies {
		if c == cur {
			return uint8(i)
		}
	}
	if len(s.currencies) >= 255 {
		panic("gcfake: too many currencies")
	}
	s.currencies = append(s.currencies, cur)
	return uint8(len(s.currencies) - 1)
}

func upperASCII(v string) string {
	b := []byte(v)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func lowerASCII(v string) string {
	b := []byte(v)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// emit records one event and returns its seq; extra are flags
// (flagWillRetry, flagRefunded).
func (s *Server) emit(rt uint8, action string, variant uint8, obj int32, at int64, st models.State, extra ...uint8) int32 {
	seq := int32(len(s.events))
	flags := rt | variant<<2
	for _, f := range extra {
		flags |= f
	}
	s.events = append(s.events, eventRec{created: at, obj: obj, action: s.actionCode(action),
		flags: flags, state: fakekit.StateCode(st)})
	s.eventOrder.Add(seq, at, s.eventCreated)
	s.typeOrder[rt].Add(seq, at, s.eventCreated)
	return seq
}

// inPayout records that event seq moved money in payout po (a payout item)
// by delta (credit > 0, debit < 0); po < 0 does nothing.
func (s *Server) inPayout(seq, po int32, delta int64) {
	if po < 0 {
		return
	}
	s.evPayouts = append(s.evPayouts, evPayout{seq: seq, po: po})
	s.payouts[po].items = append(s.payouts[po].items, seq)
	s.payouts[po].amount += delta
}

// eventPayout returns the payout an event concerns (a creditors event's
// payout, or the payout the event's money moved in), else -1.
func (s *Server) eventPayout(seq int32) int32 {
	if s.events[seq].rtype() == rtCreditors {
		return s.events[seq].obj
	}
	i, ok := slices.BinarySearchFunc(s.evPayouts, seq, func(e evPayout, t int32) int { return cmp.Compare(e.seq, t) })
	if !ok {
		return -1
	}
	return s.evPayouts[i].po
}

// linkedPayout is the event's rendered links.payout, else -1 (refund
// events render none).
func (s *Server) linkedPayout(seq int32) int32 {
	if s.events[seq].rtype() == rtRefunds {
		return -1
	}
	return s.eventPayout(seq)
}

// eventPM returns the payment an event is about, -1 for a creditors event.
func (s *Server) eventPM(e *eventRec) int32 {
	switch e.rtype() {
	case rtRefunds:
		return s.refunds[e.obj].pm
	case rtCreditors:
		return -1
	}
	return e.obj
}

// eventRefunded is the amount_refunded an event implies (the refunds.created
// event that raised it), else 0.
func (s *Server) eventRefunded(e *eventRec) int64 {
	if e.rtype() == rtRefunds && e.flags&flagRefunded != 0 {
		return s.refunds[e.obj].totalAfter
	}
	return 0
}

func (s *Server) eventType(e *eventRec) string {
	return rtName[e.rtype()] + "." + s.actions[e.action]
}

// ---- time helpers --------------------------------------------------------

func ms(t time.Time) int64 { return t.UnixMilli() }

func msTime(v int64) time.Time { return time.UnixMilli(v).UTC() }

const dayMS = 86400000

func dayOf(v int64) int32 {
	d := v / dayMS
	if v%dayMS < 0 {
		d--
	}
	return int32(d)
}

// working reports whether the day (since the epoch, a Thursday) is Monday to
// Friday. Bank holidays are ignored.
func working(d int32) bool {
	w := (int64(d)%7 + 7 + 4) % 7 // 0 Sunday
	return w != 0 && w != 6
}

// addWorkingDays returns the n-th working day after d (n >= 1).
func addWorkingDays(d int32, n int) int32 {
	for n > 0 {
		d++
		if working(d) {
			n--
		}
	}
	return d
}

// ---- lookups -------------------------------------------------------------

func (s *Server) mustPM(id string) int32 {
	i := s.ids.decode(kPayment, id, len(s.pms))
	if i < 0 {
		panic(fmt.Sprintf("gcfake: unknown payment %q", id))
	}
	return int32(i)
}

func (s *Server) mustRefund(id string) int32 {
	i := s.ids.decode(kRefund, id, len(s.refunds))
	if i < 0 {
		panic(fmt.Sprintf("gcfake: unknown refund %q", id))
	}
	return int32(i)
}

func (s *Server) mustPayout(id string) int32 {
	i := s.ids.decode(kPayout, id, len(s.payouts))
	if i < 0 {
		panic(fmt.Sprintf("gcfake: unknown payout %q", id))
	}
	return int32(i)
}

// optPayout resolves the optional payout argument of a builder: -1 when
// none is given.
func (s *Server) optPayout(po []string) int32 {
	switch len(po) {
	case 0:
		return -1
	case 1:
		if po[0] == "" {
			return -1
		}
		return s.mustPayout(po[0])
	}
	panic("gcfake: at most one payout")
}

// ---- builder internals ---------------------------------------------------

func (s *Server) createPayment(amount int64, currency uint8, at int64, status string) int32 {
	pm := int32(len(s.pms))
	s.pms = append(s.pms, pmObj{amount: amount, created: at, chargeDate: addWorkingDays(dayOf(at), 4),
		payout: -1, status: s.statusCode(status), currency: currency})
	s.pmOrder.Add(pm, at, s.pmCreated)
	s.emit(rtPayments, "created", varDefault, pm, at, models.StateCreated)
	return pm
}

func (s *Server) setStatus(pm int32, status, action string, variant uint8, at int64, st models.State) {
	s.pms[pm].status = s.statusCode(status)
	s.emit(rtPayments, action, variant, pm, at, st)
}

// newPayout creates a paid payout object (no payouts event: payouts.paid is
// not modelled).
func (s *Server) newPayout(at int64, currency uint8) int32 {
	po := int32(len(s.payouts))
	s.payouts = append(s.payouts, payoutObj{created: at, arrival: dayOf(at), currency: currency,
		status: s.statusCode("paid")})
	s.payoutOrder.Add(po, at, s.payoutCreated)
	return po
}

// payOut pays the payment out in po: status paid_out, links.payout, and
// payments.paid_out with links.payout (a payment_paid_out item).
func (s *Server) payOut(po int32, pm int32, at int64) {
	p := &s.pms[pm]
	p.payout = po
	p.status = s.statusCode("paid_out")
	seq := s.emit(rtPayments, "paid_out", varDefault, pm, at, models.StateSettled)
	s.inPayout(seq, po, p.amount)
}

// fail fails the payment. A failure GoCardless will retry
// (will_attempt_retry true, only for a payment with retry_if_possible)
// implies no state change: it is not final, and the retry's submitted,
// confirmed and paid_out follow. A final one implies failed.
func (s *Server) fail(pm int32, at int64, variant uint8, willRetry bool) {
	p := &s.pms[pm]
	p.status = s.statusCode("failed")
	p.lastFailRetried = willRetry
	if willRetry {
		p.retry = true
		s.emit(rtPayments, "failed", variant, pm, at, models.StateNone, flagWillRetry)
		return
	}
	s.emit(rtPayments, "failed", variant, pm, at, models.StateFailed)
}

// failVariant is the details variant of a failure now: late after the
// payment was confirmed or paid out.
func (s *Server) failVariant(pm int32, onTime uint8) uint8 {
	if st := s.statuses[s.pms[pm].status]; st == "confirmed" || st == "paid_out" {
		return varLateFailure
	}
	return onTime
}

// autoRetry is GoCardless resubmitting a failure it said it would retry
// (Success+): status pending_submission, a new charge date, and
// resubmission_requested with cause payment_autoretried. Implied: none.
func (s *Server) autoRetry(pm int32, at int64, chargeDate int32) {
	p := &s.pms[pm]
	p.chargeDate = chargeDate
	p.payout = -1
	s.setStatus(pm, "pending_submission", "resubmission_requested", varAutoRetried, at, models.StateNone)
}

// lateFailureSettled is a late failure (after the payout) debited from a
// later payout po (-1: not known; else a payment_failed item and
// links.payout): the status stays failed. Implied: none; the failed event
// before it established the failure.
func (s *Server) lateFailureSettled(pm int32, at int64, po int32) {
	seq := s.emit(rtPayments, "late_failure_settled", varDefault, pm, at, models.StateNone)
	s.inPayout(seq, po, -s.pms[pm].amount)
}

func (s *Server) refund(pm int32, amount int64, at int64) int32 {
	return s.refundPaid(pm, amount, at, at+dayMS)
}

// refundPaid creates a refund at `at` and pays it at paidAt; paidAt < 0
// leaves it in status created.
func (s *Server) refundPaid(pm int32, amount int64, at int64, paidAt int64) int32 {
	rf := s.createRefund(pm, amount, at, "created")
	if paidAt >= 0 {
		s.refundEvent(rf, "paid", "paid", paidAt)
	}
	return rf
}

// createRefund creates a refund (the unrefunded rest when amount <= 0 or
// more than it) with the given status and emits refunds.created. The
// payment's amount_refunded is raised now, as GoCardless does when a refund
// is created; the event implies the new total, and state refunded when it
// reaches the payment's amount.
func (s *Server) createRefund(pm int32, amount int64, at int64, status string) int32 {
	p := &s.pms[pm]
	rest := p.amount - p.amountRefunded
	if rest <= 0 {
		panic(fmt.Sprintf("gcfake: payment %s is already fully refunded", s.ids.id(kPayment, int(pm))))
	}
	if amount <= 0 || amount > rest {
		amount = rest
	}
	p.amountRefunded += amount
	rf := int32(len(s.refunds))
	s.refunds = append(s.refunds, refundObj{amount: amount, totalAfter: p.amountRefunded, created: at, pm: pm,
		status: s.statusCode(status)})
	s.refundOrder.Add(rf, at, s.refundCreated)
	st := models.StateNone
	if p.amountRefunded >= p.amount {
		st = models.StateRefunded
	}
	s.emit(rtRefunds, "created", varDefault, rf, at, st, flagRefunded)
	return rf
}

// refundEvent sets the refund's status ("" keeps it) and emits
// refunds.<action>. Implied: no state change. amount_refunded is left as
// it is: no source says GoCardless ever lowers it (after a failed,
// cancelled or bounced refund the money comes back through a payout, as a
// refund_funds_returned item), so the fake never lowers it.
func (s *Server) refundEvent(rf int32, status, action string, at int64) int32 {
	if status != "" {
		s.refunds[rf].status = s.statusCode(status)
	}
	return s.emit(rtRefunds, action, varDefault, rf, at, models.StateNone)
}

// ---- builder -------------------------------------------------------------

// CreatePayment creates a Bacs payment (status pending_submission, charge
// date four working days after at, a deterministic realistic customer name
// and e-mail in its metadata), emits payments.created and returns its PM id.
// The currency is stored upper-case. Implied state: created.
func (s *Server) CreatePayment(amount int64, currency string, at time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids.id(kPayment, int(s.createPayment(amount, s.currencyCode(currency), ms(at), "pending_submission")))
}

// Submit moves the payment to submitted and emits payments.submitted.
// Implied state: authorised.
func (s *Server) Submit(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(s.mustPM(pm), "submitted", "submitted", varDefault, ms(at), models.StateAuthorised)
}

// Confirm moves the payment to confirmed (collected) and emits
// payments.confirmed. Implied state: captured.
func (s *Server) Confirm(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(s.mustPM(pm), "confirmed", "confirmed", varDefault, ms(at), models.StateCaptured)
}

// PayOut creates a paid payout (PO id returned; arrival_date is at's UTC
// date; amount the sum of the payments' amounts; currency the first
// payment's) and, for each given payment (duplicates ignored), sets status
// paid_out and links.payout and emits payments.paid_out at `at` with
// links.payout the payout (as GoCardless documents), adding a
// payment_paid_out item to the payout. Implied state: settled.
func (s *Server) PayOut(at time.Time, pms ...string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := make([]int32, 0, len(pms))
	for _, id := range pms {
		if i := s.mustPM(id); !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	cur := uint8(0)
	if len(idx) > 0 {
		cur = s.pms[idx[0]].currency
	} else {
		cur = s.currencyCode("GBP")
	}
	po := s.newPayout(ms(at), cur)
	for _, i := range idx {
		s.payOut(po, i, ms(at))
	}
	return s.ids.id(kPayout, int(po))
}

// Fail moves the payment to failed and emits payments.failed with
// details.will_attempt_retry false: a final failure GoCardless does not
// retry. Details: a payment that was confirmed or paid_out fails late
// (origin "bank", cause "refer_to_payer", reason_code "ARUDD-0"); any other
// fails with origin "bank", cause "mandate_cancelled", reason_code
// "ARUDD-1". Implied state: failed (also after settled: a Direct Debit late
// failure after payout).
func (s *Server) Fail(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.mustPM(pm)
	s.fail(i, ms(at), s.failVariant(i, varMandateCancelled), false)
}

// FailWillRetry moves the payment to failed and emits payments.failed with
// details.will_attempt_retry true (Success+ retries only insufficient
// funds: origin "bank", cause "refer_to_payer", reason_code "ARUDD-0"); the
// payment's retry_if_possible becomes true. Implied: no state change (the
// failure is not final). Follow it with AutoRetry.
func (s *Server) FailWillRetry(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.mustPM(pm)
	s.fail(i, ms(at), s.failVariant(i, varReferToPayer), true)
}

// AutoRetry is GoCardless resubmitting a payment after a failure it said
// it would retry: status pending_submission, charge_date three working
// days after at, links.payout cleared, and payments.resubmission_requested
// with origin "gocardless", cause "payment_autoretried". Implied: no state
// change. Then Submit, Confirm and PayOut run the cycle again.
func (s *Server) AutoRetry(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := ms(at)
	s.autoRetry(s.mustPM(pm), t, addWorkingDays(dayOf(t), 3))
}

// LateFailureSettled emits payments.late_failure_settled: a payment that
// failed after it was paid out has been debited from a later payout. The
// status stays failed. With po (at most one PO id, "" = none) the debit is
// a payment_failed item of that payout (its amount drops by the payment's)
// and the event carries links.payout = po; without it, no links.payout.
// Whether GoCardless sets links.payout on late_failure_settled is not
// documented ("has been debited from a payout" is all it says). Implied:
// none (the failed event before it established the failure).
func (s *Server) LateFailureSettled(pm string, at time.Time, po ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lateFailureSettled(s.mustPM(pm), ms(at), s.optPayout(po))
}

// ChargebackSettled emits payments.chargeback_settled: a payment charged
// back after it was paid out has been debited from a payout. The status
// stays charged_back. With po (at most one PO id) the debit is a
// payment_charged_back item of that payout and the event carries
// links.payout = po (not documented by GoCardless, like
// LateFailureSettled's). Implied: none (charged_back established the
// chargeback).
func (s *Server) ChargebackSettled(pm string, at time.Time, po ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.mustPM(pm)
	seq := s.emit(rtPayments, "chargeback_settled", varDefault, i, ms(at), models.StateNone)
	s.inPayout(seq, s.optPayout(po), -s.pms[i].amount)
}

// BouncePayout is a payout bouncing after it was paid ("the payout bounced
// when sent, the payout can be retried"): its status becomes bounced and a
// creditors event with action bounced_payout is emitted (GoCardless has no
// payouts bounced action; cause bounced_payout, origin gocardless,
// links.creditor and links.payout = po; whether GoCardless sets
// links.payout there is not documented). The payments it paid keep their
// status and links.payout (GoCardless documents no change to them): the
// bounce is money for a human to chase, not a payment state. Implied: none
// (the event's fact has no payment).
func (s *Server) BouncePayout(po string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.mustPayout(po)
	s.payouts[i].status = s.statusCode("bounced")
	s.emit(rtCreditors, "bounced_payout", varDefault, i, ms(at), models.StateNone)
}

// AddPayoutFee adds a gocardless_fee item of amount (minor units, > 0 a
// debit: the fee charged for the payment; < 0 a credit, e.g. a fee refunded
// after a failure) for payment pm to the payout: the payout's amount drops
// by it and its deducted_fees rises by it. No event.
func (s *Server) AddPayoutFee(po, pm string, amount int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, p := s.mustPayout(po), s.mustPM(pm)
	s.fees = append(s.fees, feeObj{amount: amount, pm: p})
	o := &s.payouts[i]
	o.items = append(o.items, -int32(len(s.fees)))
	o.amount -= amount
	o.fees += amount
}

// SetRetryIfPossible sets the payment's retry_if_possible (no event).
func (s *Server) SetRetryIfPossible(pm string, v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pms[s.mustPM(pm)].retry = v
}

// Cancel moves the payment to cancelled and emits payments.cancelled.
// Implied state: canceled.
func (s *Server) Cancel(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(s.mustPM(pm), "cancelled", "cancelled", varDefault, ms(at), models.StateCanceled)
}

// DenyApproval moves the payment to customer_approval_denied and emits
// payments.customer_approval_denied. Implied state: canceled.
func (s *Server) DenyApproval(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(s.mustPM(pm), "customer_approval_denied", "customer_approval_denied", varDefault, ms(at), models.StateCanceled)
}

// ChargeBack moves the payment to charged_back (an indemnity claim) and
// emits payments.charged_back. Implied state: chargeback.
func (s *Server) ChargeBack(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(s.mustPM(pm), "charged_back", "charged_back", varDefault, ms(at), models.StateChargeback)
}

// CancelChargeback moves the payment back to paid_out and emits
// payments.chargeback_cancelled. Implied: no state change (a revert the
// webhooks do not apply).
func (s *Server) CancelChargeback(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(s.mustPM(pm), "paid_out", "chargeback_cancelled", varDefault, ms(at), models.StateNone)
}

// RequestResubmission is the merchant retrying the payment through the API
// (POST /payments/{id}/actions/retry): status pending_submission and
// payments.resubmission_requested with origin "api", cause
// "payment_retried". Implied: no state change (after a final failure, a
// revert the webhooks do not apply).
func (s *Server) RequestResubmission(pm string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(s.mustPM(pm), "pending_submission", "resubmission_requested", varDefault, ms(at), models.StateNone)
}

// Refund refunds part of the payment (amount <= 0 or more than the
// unrefunded rest refunds the rest; it panics when nothing is left) and
// returns the RF id. The refund is created at `at` (refunds.created) and
// paid at at+24h (refunds.paid); the refund object shows status paid. The
// payment's amount_refunded includes it from its creation (GoCardless
// raises amount_refunded when a refund is created). The payment's status
// is unchanged. Implied at the created event: AmountRefunded = the
// payment's new total, and state refunded when that reaches the amount;
// the paid event implies nothing.
func (s *Server) Refund(pm string, amount int64, at time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids.id(kRefund, int(s.refund(s.mustPM(pm), amount, ms(at))))
}

// RefundCreated creates a refund as Refund does (same amount rule, same
// implied fact at refunds.created: AmountRefunded the payment's new total,
// state refunded when it reaches the amount) but leaves it in status
// pending_submission, not yet paid. Returns the RF id.
func (s *Server) RefundCreated(pm string, amount int64, at time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids.id(kRefund, int(s.createRefund(s.mustPM(pm), amount, ms(at), "pending_submission")))
}

// RefundPaid sets the refund's status to paid and emits refunds.paid
// (cause refund_paid: "The refund has been paid to your customer").
// Implied: none (amount_refunded was raised at creation).
func (s *Server) RefundPaid(rf string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refundEvent(s.mustRefund(rf), "paid", "paid", ms(at))
}

// RefundSettled emits refunds.refund_settled (cause refund_settled: "The
// refund has been deducted from a payout"); the status is unchanged (there
// is no refund_settled status). With po (at most one PO id) the deduction
// is a payment_refunded item of that payout (its amount drops by the
// refund's); refund events carry no links.payout. Implied: none.
func (s *Server) RefundSettled(rf string, at time.Time, po ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.mustRefund(rf)
	seq := s.refundEvent(i, "", "refund_settled", ms(at))
	s.inPayout(seq, s.optPayout(po), -s.refunds[i].amount)
}

// RefundFailed sets the refund's status to bounced ("the refund has failed
// to be paid"; which status GoCardless leaves after a failed event is not
// documented, bounced is the inference) and emits refunds.failed (cause
// refund_failed: the refund did not reach the customer, the funds will be
// returned). A refund can fail after it was settled. The payment's
// amount_refunded is not lowered (GoCardless documents no decrease).
// Implied: no state change; Expected.RefundsFailed counts the refund's
// amount from `at`.
func (s *Server) RefundFailed(rf string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refundEvent(s.mustRefund(rf), "bounced", "failed", ms(at))
}

// RefundFundsReturned sets the refund's status to funds_returned and emits
// refunds.funds_returned (cause refund_funds_returned: "The refund has been
// credited in a payout"). With po (at most one PO id) the credit is a
// refund_funds_returned item of that payout (its amount rises by the
// refund's). amount_refunded is not lowered. Implied: none.
func (s *Server) RefundFundsReturned(rf string, at time.Time, po ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.mustRefund(rf)
	seq := s.refundEvent(i, "funds_returned", "funds_returned", ms(at))
	s.inPayout(seq, s.optPayout(po), s.refunds[i].amount)
}

// CancelRefund sets the refund's status to cancelled and emits NO event:
// GoCardless documents no refunds "cancelled" action (cancelled is only a
// status), so a client learns of it only by reading the refund. The
// payment's amount_refunded is not lowered (undocumented either way).
// Implied: none; Expected.RefundsCancelled counts the refund's amount from
// `at`.
func (s *Server) CancelRefund(rf string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.mustRefund(rf)
	r := &s.refunds[i]
	r.status, r.isCancelled, r.cancelled = s.statusCode("cancelled"), true, ms(at)
}

// RefundRawAction emits refunds.<action> for any action string (e.g. an
// action GoCardless may add, or the undocumented bounced), with the
// refund's status unchanged. Implied: none.
func (s *Server) RefundRawAction(rf, action string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refundEvent(s.mustRefund(rf), "", action, ms(at))
}

// SetRawStatus sets the payment's status to any raw string and emits
// payments.<action>. Implied: no state change.
func (s *Server) SetRawStatus(pm, status, action string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(s.mustPM(pm), status, action, varDefault, ms(at), models.StateNone)
}

// Short names of the states, for the builder internals.
const (
	stNone       = models.StateNone
	stAuthorised = models.StateAuthorised
	stCaptured   = models.StateCaptured
	stCanceled   = models.StateCanceled
	stChargeback = models.StateChargeback
)
