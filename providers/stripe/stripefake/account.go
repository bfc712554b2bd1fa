package stripefake

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
	"github.com/reconciler/reconciler/models"
)

// Account is one Stripe account held by the fake: the platform account ("")
// or a connected account selected with the Stripe-Account header. Its builder
// methods record object changes and emit the events Stripe would; they panic
// on misuse (unknown ids), as befits a test helper. All methods are safe for
// concurrent use.
type Account struct {
	id   string
	ids  idCodec
	now  func() time.Time // the server's clock (Options.Now)
	full bool             // Options.FullObjects

	mu sync.RWMutex

	pis      []piObj
	charges  []chargeObj
	refunds  []refundObj
	disputes []disputeObj
	payouts  []payoutObj
	bts      []btObj

	piOrder     fakekit.Order
	refundOrder fakekit.Order
	payoutOrder fakekit.Order
	btOrder     fakekit.Order

	events     []eventRec
	eventOrder fakekit.Order
	facts      []factRec
	types      []string
	typeIdx    map[string]uint16
	statuses   []string
	statusIdx  map[string]uint16
	persons    []person

	// vers are the API versions events were rendered in (vers[0] is
	// APIVersion), ver the one new events get (SetAPIVersion).
	vers      []string
	verRules  []rules
	verIdx    map[string]uint16
	ver       uint16
	manual    bool // SetManualPayouts
	delayDays int64

	// unpaid holds captured charges not yet paid out, kept sorted by
	// capture time lazily (unpaidDirty); orphans holds refund balance
	// transactions created after their charge was paid out.
	unpaid      []int32
	unpaidDirty bool
	orphans     []int32
}

func newAccount(id string, seed int64, now func() time.Time) *Account {
	if now == nil {
		now = time.Now
	}
	return &Account{id: id, ids: newIDCodec(seed, id), now: now, typeIdx: map[string]uint16{}, statusIdx: map[string]uint16{},
		vers: []string{APIVersion}, verRules: []rules{rulesOf(APIVersion)}, verIdx: map[string]uint16{APIVersion: 0}}
}

// ID returns the account id ("" for the platform account).
func (a *Account) ID() string { return a.id }

// ---- objects -------------------------------------------------------------

type piObj struct {
	amount, received, capturable int64
	created, canceledAt          int64
	currency, status             string
	cancelReason                 string
	person                       int32 // index in Account.persons
	charge                       int32 // -1: none
	manual                       bool
}

// person is a customer's personal data (realistic PII, so that tests can
// prove it never leaks into reports).
type person struct{ name, email string }

type chargeObj struct {
	amount, amountRefunded int64
	created, capturedAt    int64
	pi                     int32
	bt                     int32 // -1 until captured
	payout                 int32 // -1 until paid out
	release                int32 // the refund of a partial capture's released remainder; -1: none
	refunds                []int32
	captured, refunded     bool
	disputed               bool
}

type refundObj struct {
	amount, created int64
	charge          int32
	bt, failBT      int32 // -1: none
	status          string
	release         bool // the released remainder of a partial capture (PartialCapture)
}

type disputeObj struct {
	amount, created int64
	charge          int32
	status          string
	bts             []int32 // funds withdrawn / reinstated, oldest first
}

type payoutObj struct {
	amount, created, arrival int64
	currency                 string
	status                   string // "" is paid (FailPayout sets failed or canceled)
	bts                      []int32
	recon                    uint8 // reconCompleted, reconInProgress, reconNotApplicable (manual)
}

const (
	reconCompleted uint8 = iota
	reconInProgress
	reconNotApplicable
)

var reconName = [...]string{"completed", "in_progress", "not_applicable"}

const (
	btCharge uint8 = iota
	btRefund
	btRefundFailure
	btAdjustment // a dispute's funds withdrawn (< 0) or reinstated (> 0)
)

var btTypeName = [...]string{"charge", "refund", "refund_failure", "adjustment"}

type btObj struct {
	amount, created, availableOn int64
	src                          int32 // charge index (btCharge), refund index, or dispute index (btAdjustment)
	payout                       int32 // -1: not paid out
	typ                          uint8
}

// ---- events and facts ----------------------------------------------------

// eventRec is one event. Instead of pre-marshalled JSON (about 550 bytes an
// event, too much at millions of events) it keeps a compact snapshot of the
// object's mutable fields right after the change; the JSON is rendered from
// it when listed, which costs about a microsecond an event.
type eventRec struct {
	created   int64
	snap      snapRec
	factStart int32
	typ       uint16
	ver       uint16 // index in Account.vers: the event's api_version
}

// snapRec holds the mutable fields of the event's object at emission; the
// immutable ones are read from the live object.
type snapRec struct {
	a, b, c int64 // PI: received, capturable, canceledAt; charge: amountRefunded; dispute: len(bts)
	obj     int32
	ref     int32 // PI: charge; charge: balance transaction; refund: failure BT
	person  int32 // PI and charge
	status  uint16
	flags   uint8 // charge: captured, refunded, disputed; payout: recon
	kind    kind
}

const (
	flagCaptured = 1 << iota
	flagRefunded
	flagDisputed
)

type factRec struct {
	amountRefunded int64 // with factReverted: the reverted refund's amount
	pi             int32
	state          uint8 // 0 none, else index+1 in models.States
	flags          uint8 // factPartial, factReverted
}

const (
	factPartial  = 1 << iota // the capture was partial (Fact.AmountCaptured)
	factReverted             // amountRefunded is a failed or canceled refund's amount (Fact.Reverted)
)

func (a *Account) piCreated(i int32) int64     { return a.pis[i].created }
func (a *Account) refundCreated(i int32) int64 { return a.refunds[i].created }
func (a *Account) payoutCreated(i int32) int64 { return a.payouts[i].created }
func (a *Account) btCreated(i int32) int64     { return a.bts[i].created }
func (a *Account) eventCreated(i int32) int64  { return a.events[i].created }

func (a *Account) dirty() bool {
	return a.eventOrder.Dirty || a.piOrder.Dirty || a.refundOrder.Dirty || a.payoutOrder.Dirty || a.btOrder.Dirty
}

func (a *Account) fixOrders() {
	a.eventOrder.Fix(a.eventCreated)
	a.piOrder.Fix(a.piCreated)
	a.refundOrder.Fix(a.refundCreated)
	a.payoutOrder.Fix(a.payoutCreated)
	a.btOrder.Fix(a.btCreated)
}

// rlock takes the read lock with every order sorted.
func (a *Account) rlock() {
	for {
		a.mu.RLock()
		if !a.dirty() {
			return
		}
		a.mu.RUnlock()
		a.mu.Lock()
		a.fixOrders()
		a.mu.Unlock()
	}
}

func (a *Account) typeCode(t string) uint16 {
	if c, ok := a.typeIdx[t]; ok {
		return c
	}
	c := uint16(len(a.types))
	a.types = append(a.types, t)
	a.typeIdx[t] = c
	return c
}

func (a *Account) statusCode(st string) uint16 {
	if c, ok := a.statusIdx[st]; ok {
		return c
	}
	c := uint16(len(a.statuses))
	a.statuses = append(a.statuses, st)
	a.statusIdx[st] = c
	return c
}

// emit records one event with the snapshot of its object and its implied
// facts.
func (a *Account) emit(typ string, at int64, snap snapRec, facts ...factRec) {
	seq := int32(len(a.events))
	a.events = append(a.events, eventRec{created: at, snap: snap, typ: a.typeCode(typ), ver: a.ver, factStart: int32(len(a.facts))})
	a.facts = append(a.facts, facts...)
	a.eventOrder.Add(seq, at, a.eventCreated)
}

func (a *Account) snapPI(pi int32) snapRec {
	p := &a.pis[pi]
	return snapRec{kind: kPI, obj: pi, a: p.received, b: p.capturable, c: p.canceledAt, ref: p.charge,
		person: p.person, status: a.statusCode(p.status)}
}

func (a *Account) snapCharge(ch int32) snapRec {
	c := &a.charges[ch]
	var f uint8
	if c.captured {
		f |= flagCaptured
	}
	if c.refunded {
		f |= flagRefunded
	}
	if c.disputed {
		f |= flagDisputed
	}
	return snapRec{kind: kCharge, obj: ch, a: c.amountRefunded, ref: c.bt, person: a.pis[c.pi].person, flags: f}
}

func (a *Account) snapRefund(re int32) snapRec {
	r := &a.refunds[re]
	return snapRec{kind: kRefund, obj: re, ref: r.failBT, status: a.statusCode(r.status)}
}

func (a *Account) snapDispute(dp int32) snapRec {
	d := &a.disputes[dp]
	return snapRec{kind: kDispute, obj: dp, a: int64(len(d.bts)), status: a.statusCode(d.status)}
}

func (a *Account) snapPayout(po int32) snapRec {
	return snapRec{kind: kPayout, obj: po, status: a.statusCode(a.payoutStatus(po)), flags: a.payouts[po].recon}
}

func (a *Account) eventFacts(seq int) []factRec {
	end := len(a.facts)
	if seq+1 < len(a.events) {
		end = int(a.events[seq+1].factStart)
	}
	return a.facts[a.events[seq].factStart:end]
}

// ---- lookups -------------------------------------------------------------

func (a *Account) mustPI(id string) int32 {
	i := a.ids.decode(kPI, id, len(a.pis))
	if i < 0 {
		panic(fmt.Sprintf("stripefake: unknown payment intent %q in account %q", id, a.id))
	}
	return int32(i)
}

func secs(t time.Time) int64 { return t.Unix() }

func (a *Account) piFact(pi int32, s models.State) factRec {
	return factRec{pi: pi, state: fakekit.StateCode(s)}
}

// capturedRefunded is the charge's amount_refunded of captured money (the
// released remainder of a partial capture excluded).
func (a *Account) capturedRefunded(ch int32) int64 {
	c := &a.charges[ch]
	if !c.captured {
		return 0
	}
	return c.amountRefunded - a.released(c)
}

// released is the amount a partial capture released (0 when none).
func (a *Account) released(c *chargeObj) int64 {
	if c.release < 0 {
		return 0
	}
	return a.refunds[c.release].amount
}

// ---- builder -------------------------------------------------------------

func (a *Account) createPayment(amount int64, currency string, manual bool, at int64, name, email string) int32 {
	pi := int32(len(a.pis))
	if name == "" && email == "" {
		name, email = fakekit.Person(fakekit.SplitMix64(a.ids.key ^ uint64(pi)*0x51AF))
	}
	a.persons = append(a.persons, person{name, email})
	a.pis = append(a.pis, piObj{
		amount: amount, created: at, currency: lowerASCII(currency),
		status: "requires_payment_method", person: int32(len(a.persons) - 1), charge: -1, manual: manual,
	})
	a.piOrder.Add(pi, at, a.piCreated)
	a.emit("payment_intent.created", at, a.snapPI(pi), a.piFact(pi, models.StateCreated))
	return pi
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			b := []byte(s)
			for j := range b {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// CreatePayment creates a payment intent (status requires_payment_method)
// with a deterministic, realistic customer name and e-mail, emits
// payment_intent.created and returns its id. Implied state: created.
func (a *Account) CreatePayment(amount int64, currency string, manualCapture bool, at time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids.id(kPI, int(a.createPayment(amount, currency, manualCapture, secs(at), "", "")))
}

// SetCustomer replaces the customer name and e-mail (metadata, receipt_email
// and billing_details) of a payment from now on; it emits no event, and
// earlier event snapshots keep the previous values.
func (a *Account) SetCustomer(pi, name, email string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.persons = append(a.persons, person{name, email})
	a.pis[a.mustPI(pi)].person = int32(len(a.persons) - 1)
}

func (a *Account) newCharge(pi int32, at int64) int32 {
	ch := int32(len(a.charges))
	a.charges = append(a.charges, chargeObj{amount: a.pis[pi].amount, created: at, pi: pi, bt: -1, payout: -1, release: -1})
	a.pis[pi].charge = ch
	return ch
}

func (a *Account) authorise(pi int32, at int64) {
	p := &a.pis[pi]
	if p.charge < 0 || a.charges[p.charge].captured {
		a.newCharge(pi, at)
	}
	p.status = "requires_capture"
	p.capturable = p.amount
	a.emit("payment_intent.amount_capturable_updated", at, a.snapPI(pi), a.piFact(pi, models.StateAuthorised))
}

// Authorise creates the payment's uncaptured charge and moves the payment
// intent to requires_capture; emits payment_intent.amount_capturable_updated.
// Implied state: authorised.
func (a *Account) Authorise(pi string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.authorise(a.mustPI(pi), secs(at))
}

func (a *Account) capture(pi int32, at int64) {
	p := &a.pis[pi]
	ch := p.charge
	if ch < 0 || a.charges[ch].captured || a.charges[ch].refunded {
		ch = a.newCharge(pi, at)
	}
	a.captureCharge(ch, at)
	p.status = "succeeded"
	p.received = p.amount
	p.capturable = 0
	a.emit("payment_intent.succeeded", at, a.snapPI(pi), a.piFact(pi, models.StateCaptured))
	if p.manual {
		a.emit("charge.captured", at, a.snapCharge(ch), factRec{pi: pi, state: fakekit.StateCode(models.StateCaptured), amountRefunded: a.capturedRefunded(ch)})
	}
}

// captureCharge marks the charge captured at `at` with the balance
// transaction of its whole amount (the authorised amount, also for a partial
// capture: pre-Basil Stripe shows the reversal as a second, refund balance
// transaction).
func (a *Account) captureCharge(ch int32, at int64) {
	c := &a.charges[ch]
	c.captured = true
	c.capturedAt = at
	bt := int32(len(a.bts))
	a.bts = append(a.bts, btObj{amount: c.amount, created: at, availableOn: at + a.holdDays()*86400, src: ch, payout: -1, typ: btCharge})
	a.btOrder.Add(bt, at, a.btCreated)
	c.bt = bt
	if n := len(a.unpaid); n > 0 && a.charges[a.unpaid[n-1]].capturedAt > at {
		a.unpaidDirty = true
	}
	a.unpaid = append(a.unpaid, ch)
}

// holdDays is how long a captured charge's funds stay pending: 2 days, or
// the manual-payout account's delay (SetManualPayouts).
func (a *Account) holdDays() int64 {
	if a.manual {
		return a.delayDays
	}
	return 2
}

// Capture captures the payment (creating its charge if it has none): the
// payment intent becomes succeeded and the charge captured. Emits
// payment_intent.succeeded and, for manual capture, charge.captured in the
// same second. Implied state: captured.
func (a *Account) Capture(pi string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.capture(a.mustPI(pi), secs(at))
}

func (a *Account) failAttempt(pi int32, at int64) {
	a.pis[pi].status = "requires_payment_method"
	a.pis[pi].capturable = 0
	a.emit("payment_intent.payment_failed", at, a.snapPI(pi), a.piFact(pi, models.StateCreated))
}

// FailAttempt records a failed payment attempt: the payment intent returns to
// requires_payment_method; emits payment_intent.payment_failed. Implied
// state: created (Stripe payment failures are not final).
func (a *Account) FailAttempt(pi string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failAttempt(a.mustPI(pi), secs(at))
}

func (a *Account) cancel(pi int32, at int64) {
	p := &a.pis[pi]
	p.status = "canceled"
	p.canceledAt = at
	p.capturable = 0
	a.emit("payment_intent.canceled", at, a.snapPI(pi), a.piFact(pi, models.StateCanceled))
	if ch := p.charge; ch >= 0 && !a.charges[ch].captured && !a.charges[ch].refunded {
		c := &a.charges[ch]
		c.refunded = true
		c.amountRefunded = c.amount
		if a.rulesNow()&ruleBasil == 0 {
			a.emit("charge.refunded", at, a.snapCharge(ch), factRec{pi: pi})
		}
	}
}

// Cancel cancels the payment intent (canceled_at = at). An uncaptured charge
// is released the way Stripe does it: refunded=true, amount_refunded=amount,
// captured=false, and a charge.refunded event follows payment_intent.canceled
// (the trap: no captured money was refunded). Events rendered in
// 2025-03-31.basil or later have no charge.refunded, and a charge rendered
// in Basil shows amount_refunded 0 and refunded false. Implied state:
// canceled, with amount_refunded staying 0.
func (a *Account) Cancel(pi string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancel(a.mustPI(pi), secs(at))
}

func (a *Account) refund(pi int32, amount int64, at int64, status string) int32 {
	ch := a.pis[pi].charge
	if ch < 0 || !a.charges[ch].captured {
		panic(fmt.Sprintf("stripefake: refund of payment %s without captured charge", a.ids.id(kPI, int(pi))))
	}
	c := &a.charges[ch]
	if amount <= 0 || amount > c.amount-c.amountRefunded {
		amount = c.amount - c.amountRefunded
	}
	re := a.newRefund(ch, amount, at, status)
	st := models.StateNone
	if c.refunded {
		st = models.StateRefunded
	}
	a.emit("charge.refunded", at, a.snapCharge(ch), factRec{pi: pi, state: fakekit.StateCode(st), amountRefunded: a.capturedRefunded(ch)})
	a.emitRefund("refund.created", re, at)
	return re
}

// newRefund records a refund of the charge with its balance transaction,
// counted in the charge's amount_refunded.
func (a *Account) newRefund(ch int32, amount, at int64, status string) int32 {
	c := &a.charges[ch]
	re := int32(len(a.refunds))
	bt := int32(len(a.bts))
	a.bts = append(a.bts, btObj{amount: -amount, created: at, availableOn: at, src: re, payout: -1, typ: btRefund})
	a.btOrder.Add(bt, at, a.btCreated)
	if c.payout >= 0 {
		a.orphans = append(a.orphans, bt)
	}
	a.refunds = append(a.refunds, refundObj{amount: amount, created: at, charge: ch, bt: bt, failBT: -1, status: status})
	a.refundOrder.Add(re, at, a.refundCreated)
	c.refunds = append(c.refunds, re)
	c.amountRefunded += amount
	c.refunded = c.amountRefunded >= c.amount
	return re
}

// emitRefund emits a refund.* event (refund snapshot) when the account's
// events render in 2024-10-28.acacia or later, which send them for every
// refund; older versions send them only for refunds without a charge.
func (a *Account) emitRefund(typ string, re int32, at int64) {
	if a.rulesNow()&ruleAcacia != 0 {
		a.emit(typ, at, a.snapRefund(re), factRec{pi: a.charges[a.refunds[re].charge].pi})
	}
}

// Refund refunds captured money of the payment (amount <= 0 or more than the
// remainder refunds the remainder) with a succeeded refund and its
// balance transaction; charge.amount_refunded grows and refunded becomes true
// when it reaches the amount. Emits charge.refunded (charge snapshot) and
// returns the refund id. Implied: state refunded only when fully refunded;
// amount_refunded = the new total.
func (a *Account) Refund(pi string, amount int64, at time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids.id(kRefund, int(a.refund(a.mustPI(pi), amount, secs(at), "succeeded")))
}

func (a *Account) failRefund(re int32, at int64) {
	a.revertRefund(re, "failed", at)
}

// revertRefund moves a refund to failed or canceled with a reversing
// refund_failure balance transaction, and takes it out of the charge's
// amount_refunded. Stripe documents neither the lowering of amount_refunded
// nor, for a canceled refund, the reversing balance transaction: both are
// our reading (the money is back in the balance, so a refund that did not
// happen is not counted).
func (a *Account) revertRefund(re int32, status string, at int64) {
	r := &a.refunds[re]
	if r.status == "failed" || r.status == "canceled" || r.release {
		panic(fmt.Sprintf("stripefake: refund %s is %s, cannot become %s", a.ids.id(kRefund, int(re)), r.status, status))
	}
	r.status = status
	c := &a.charges[r.charge]
	c.amountRefunded -= r.amount
	c.refunded = false
	bt := int32(len(a.bts))
	a.bts = append(a.bts, btObj{amount: r.amount, created: at, availableOn: at, src: re, payout: -1, typ: btRefundFailure})
	a.btOrder.Add(bt, at, a.btCreated)
	r.failBT = bt
	if c.payout >= 0 {
		a.orphans = append(a.orphans, bt)
	}
	a.emit("charge.refund.updated", at, a.snapRefund(re), factRec{pi: c.pi, amountRefunded: r.amount, flags: factReverted})
	a.emitRefund("refund.updated", re, at)
	if status == "failed" {
		a.emitRefund("refund.failed", re, at)
	}
}

// FailRefund marks a succeeded or pending refund failed (with a
// refund_failure balance transaction); the charge's amount_refunded is
// reduced back and refunded becomes false. Emits charge.refund.updated
// (refund snapshot) and, in 2024-10-28.acacia and later, refund.updated and
// refund.failed. Implied: no state change (a revert the webhooks do not
// apply) and Fact.Reverted = the refund's amount: it is not a refund of
// captured money.
func (a *Account) FailRefund(refundID string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	re := a.ids.decode(kRefund, refundID, len(a.refunds))
	if re < 0 {
		panic(fmt.Sprintf("stripefake: unknown refund %q", refundID))
	}
	a.failRefund(int32(re), secs(at))
}

func (a *Account) dispute(pi int32, at int64) int32 {
	ch := a.pis[pi].charge
	if ch < 0 {
		panic(fmt.Sprintf("stripefake: dispute of payment %s without charge", a.ids.id(kPI, int(pi))))
	}
	dp := int32(len(a.disputes))
	a.disputes = append(a.disputes, disputeObj{amount: a.charges[ch].amount, created: at, charge: ch, status: "needs_response"})
	a.charges[ch].disputed = true
	a.emit("charge.dispute.created", at, a.snapDispute(dp), factRec{pi: pi})
	return dp
}

// Dispute opens a dispute (status needs_response) on the payment's charge
// and sets charge.disputed; emits charge.dispute.created and returns the
// dispute id. Implied: no state change.
func (a *Account) Dispute(pi string, at time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids.id(kDispute, int(a.dispute(a.mustPI(pi), secs(at))))
}

func (a *Account) closeDispute(dp int32, status string, at int64) {
	d := &a.disputes[dp]
	d.status = status
	st := models.StateNone
	if status == "lost" {
		st = models.StateChargeback
	}
	a.emit("charge.dispute.closed", at, a.snapDispute(dp),
		factRec{pi: a.charges[d.charge].pi, state: fakekit.StateCode(st)})
}

// CloseDispute closes a dispute with status "lost" or "won" (any other
// string is stored as is); emits charge.dispute.closed. Implied: lost →
// chargeback; otherwise no state change.
func (a *Account) CloseDispute(disputeID string, status string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	dp := a.ids.decode(kDispute, disputeID, len(a.disputes))
	if dp < 0 {
		panic(fmt.Sprintf("stripefake: unknown dispute %q", disputeID))
	}
	a.closeDispute(int32(dp), status, secs(at))
}

// payout sweeps the given charges (all captured and not yet paid out) plus
// their refund balance transactions created at or before at, and any orphan
// refund balance transactions created at or before at.
func (a *Account) payout(at int64, charges []int32, recon uint8) int32 {
	po := int32(len(a.payouts))
	var bts []int32
	take := func(bt int32) {
		if bt >= 0 && a.bts[bt].payout < 0 {
			a.bts[bt].payout = po
			bts = append(bts, bt)
		}
	}
	facts := make([]factRec, 0, len(charges))
	for _, ch := range charges {
		c := &a.charges[ch]
		c.payout = po
		take(c.bt)
		for _, re := range c.refunds {
			r := &a.refunds[re]
			for _, bt := range []int32{r.bt, r.failBT} {
				if bt < 0 || a.bts[bt].payout >= 0 {
					continue
				}
				if a.bts[bt].created <= at {
					take(bt)
				} else {
					a.orphans = append(a.orphans, bt)
				}
			}
		}
		facts = append(facts, factRec{pi: c.pi, state: fakekit.StateCode(models.StateSettled)})
	}
	keep := a.orphans[:0]
	for _, bt := range a.orphans {
		switch {
		case a.bts[bt].payout >= 0:
		case a.bts[bt].created <= at:
			take(bt)
		default:
			keep = append(keep, bt)
		}
	}
	a.orphans = keep
	fakekit.Ascending(bts, a.btCreated)
	var amount int64
	cur := ""
	for _, bt := range bts {
		amount += a.bts[bt].amount
		if cur == "" {
			cur = a.btCurrency(bt)
		}
	}
	if cur == "" {
		cur = "gbp"
		if len(a.pis) > 0 {
			cur = a.pis[0].currency
		}
	}
	a.payouts = append(a.payouts, payoutObj{amount: amount, created: at, arrival: at, currency: cur, bts: bts})
	a.payoutOrder.Add(po, at, a.payoutCreated)
	a.payouts[po].recon = recon
	a.emit("payout.paid", at, a.snapPayout(po), facts...)
	return po
}

// Payout creates a paid payout (payout.paid, created = at) sweeping the
// balance transactions of the given payments' captured charges that were not
// yet paid out, plus their refunds' balance transactions (and earlier
// unswept refund and dispute balance transactions). Its
// reconciliation_status is completed. Returns the payout id. Implied:
// settled at `at` for each payment whose charge it swept. It panics on a
// manual-payout account.
func (a *Account) Payout(at time.Time, pis ...string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids.id(kPayout, int(a.payout(secs(at), a.payableCharges(pis), reconCompleted)))
}

// payableCharges returns the captured, not yet paid out charges of the
// payments, without duplicates; it panics on a manual-payout account, which
// has no automatic payouts.
func (a *Account) payableCharges(pis []string) []int32 {
	if a.manual {
		panic(fmt.Sprintf("stripefake: automatic payout on manual-payout account %q (use ManualPayout)", a.id))
	}
	var chs []int32
	for _, id := range pis {
		pi := a.mustPI(id)
		if ch := a.pis[pi].charge; ch >= 0 && a.charges[ch].captured && a.charges[ch].payout < 0 && !slices.Contains(chs, ch) {
			chs = append(chs, ch)
		}
	}
	return chs
}

func (a *Account) payoutCaptured(at int64, minAge time.Duration) int32 {
	if a.manual {
		return -1
	}
	if a.unpaidDirty {
		fakekit.Ascending(a.unpaid, func(i int32) int64 { return a.charges[i].capturedAt })
		a.unpaidDirty = false
	}
	cutoff := at - int64(minAge/time.Second)
	k := sort.Search(len(a.unpaid), func(i int) bool { return a.charges[a.unpaid[i]].capturedAt > cutoff })
	var chs []int32
	for _, ch := range a.unpaid[:k] {
		if a.charges[ch].payout < 0 {
			chs = append(chs, ch)
		}
	}
	a.unpaid = a.unpaid[k:]
	if len(chs) == 0 {
		return -1
	}
	return a.payout(at, chs, reconCompleted)
}

// PayoutCaptured creates a payout sweeping every captured, not yet paid out
// charge captured at least minAge before at (see Payout). It returns "" and
// creates nothing when there is no such charge, or when the account pays
// out manually (SetManualPayouts).
func (a *Account) PayoutCaptured(at time.Time, minAge time.Duration) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	po := a.payoutCaptured(secs(at), minAge)
	if po < 0 {
		return ""
	}
	return a.ids.id(kPayout, int(po))
}

// SetRawStatus sets the payment intent's status to any raw string and emits
// eventType with that snapshot. Implied: no state change.
func (a *Account) SetRawStatus(pi, status, eventType string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := a.mustPI(pi)
	a.pis[i].status = status
	a.emit(eventType, secs(at), a.snapPI(i), a.piFact(i, models.StateNone))
}

// piEventState is the state a payment_intent event type implies.
func piEventState(t string) models.State {
	switch t {
	case "payment_intent.created", "payment_intent.payment_failed":
		return models.StateCreated
	case "payment_intent.amount_capturable_updated":
		return models.StateAuthorised
	case "payment_intent.succeeded":
		return models.StateCaptured
	case "payment_intent.canceled":
		return models.StateCanceled
	}
	return models.StateNone
}

// EmitPI re-emits the payment intent's current snapshot as eventType at `at`
// without changing it (to craft duplicates and out-of-order deliveries).
// Implied: the state eventType implies (payment_intent.created and
// .payment_failed → created, .amount_capturable_updated → authorised,
// .succeeded → captured, .canceled → canceled; anything else none).
func (a *Account) EmitPI(pi, eventType string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := a.mustPI(pi)
	a.emit(eventType, secs(at), a.snapPI(i), a.piFact(i, piEventState(eventType)))
}
