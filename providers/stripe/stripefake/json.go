package stripefake

import (
	"strconv"

	"github.com/reconciler/reconciler/internal/fakekit"
	"github.com/reconciler/reconciler/internal/jsonw"
)

// Hand-written JSON appenders: the objects are rendered straight into byte
// slices (API version 2023-10-16 shapes, with the later versions' rules of
// version.go), which is what lets a million payments be generated quickly.

// APIVersion is the Stripe API version the fake renders objects in by
// default: fetched objects without a Stripe-Version header, and events until
// Account.SetAPIVersion.
const APIVersion = "2023-10-16"

func appendStr(b []byte, v string) []byte { return jsonw.String(b, v) }

func appendKey(b []byte, k string) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	return append(b, '"', ':')
}

func appendInt(b []byte, k string, v int64) []byte {
	return strconv.AppendInt(appendKey(b, k), v, 10)
}

func appendBool(b []byte, k string, v bool) []byte {
	return strconv.AppendBool(appendKey(b, k), v)
}

func appendStrField(b []byte, k, v string) []byte {
	return appendStr(appendKey(b, k), v)
}

func appendNullStr(b []byte, k, v string) []byte {
	if v == "" {
		return append(appendKey(b, k), "null"...)
	}
	return appendStrField(b, k, v)
}

func (a *Account) appendIDField(b []byte, k string, kd kind, n int32) []byte {
	b = appendKey(b, k)
	if n < 0 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = a.ids.appendID(b, kd, int(n))
	return append(b, '"')
}

func (a *Account) appendHead(b []byte, kd kind, n int32, object string) []byte {
	b = append(b, `{"id":"`...)
	b = a.ids.appendID(b, kd, int(n))
	b = append(b, `","object":"`...)
	b = append(b, object...)
	return append(b, '"')
}

// Expansions, as bits: of a payment intent, expandCharge (latest_charge)
// with the charge's own expandRefunds and expandBT.
const (
	expandNone    = 0
	expandCharge  = 1 << iota // latest_charge
	expandRefunds             // (latest_charge.)refunds
	expandBT                  // (latest_charge.)balance_transaction
)

func (a *Account) appendPI(b []byte, i int32, expand int, rv render) []byte {
	return a.appendPIObj(b, i, &a.pis[i], expand, rv)
}

func (a *Account) appendPIObj(b []byte, i int32, p *piObj, expand int, rv render) []byte {
	who := &a.persons[p.person]
	b = a.appendHead(b, kPI, i, "payment_intent")
	b = appendInt(b, "amount", p.amount)
	b = appendInt(b, "amount_capturable", p.capturable)
	b = appendInt(b, "amount_received", p.received)
	b = appendKey(b, "canceled_at")
	if p.canceledAt == 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, p.canceledAt, 10)
	}
	b = appendNullStr(b, "cancellation_reason", p.cancelReason)
	capture := "automatic"
	if p.manual {
		capture = "manual"
	}
	b = appendStrField(b, "capture_method", capture)
	b = appendInt(b, "created", p.created)
	b = appendStrField(b, "currency", p.currency)
	b = a.appendIDField(b, "customer", kCustomer, i)
	b = appendKey(b, "description")
	b = strconv.AppendInt(append(b, `"Order #`...), int64(i)+100001, 10)
	b = append(b, '"')
	if expand&expandCharge != 0 && p.charge >= 0 {
		b = appendKey(b, "latest_charge")
		b = a.appendCharge(b, p.charge, expand, rv)
	} else {
		b = a.appendIDField(b, "latest_charge", kCharge, p.charge)
	}
	b = appendBool(b, "livemode", false)
	b = appendKey(b, "metadata")
	b = appendStr(append(b, `{"customer_email":`...), who.email)
	b = appendStr(append(b, `,"customer_name":`...), who.name)
	b = append(b, '}')
	b = append(appendKey(b, "payment_method_types"), `["card"]`...)
	b = appendNullStr(b, "receipt_email", who.email)
	b = appendStrField(b, "status", p.status)
	if a.full {
		b = append(b, piRest...)
	}
	return append(b, '}')
}

// appendCharge renders charge i with the expandRefunds and expandBT bits of
// expand.
func (a *Account) appendCharge(b []byte, i int32, expand int, rv render) []byte {
	c := &a.charges[i]
	return a.appendChargeObj(b, i, c, a.pis[c.pi].person, expand, rv)
}

func (a *Account) appendChargeObj(b []byte, i int32, c *chargeObj, personIdx int32, expand int, rv render) []byte {
	p := &a.pis[c.pi]
	who := &a.persons[personIdx]
	b = a.appendHead(b, kCharge, i, "charge")
	b = appendInt(b, "amount", c.amount)
	released := a.released(c)
	captured := int64(0)
	if c.captured {
		captured = c.amount - released
	}
	refunded, isRefunded := c.amountRefunded, c.refunded
	if rv.basil() {
		// Basil creates no Refund for a partial capture's remainder or a
		// cancellation's release.
		if c.captured {
			refunded -= released
		} else {
			refunded, isRefunded = 0, false
		}
	}
	b = appendInt(b, "amount_captured", captured)
	b = appendInt(b, "amount_refunded", refunded)
	if expand&expandBT != 0 && c.bt >= 0 {
		b = appendKey(b, "balance_transaction")
		b = a.appendBT(b, c.bt, false, rv)
	} else {
		b = a.appendIDField(b, "balance_transaction", kTxn, c.bt)
	}
	b = appendKey(b, "billing_details")
	b = append(b, `{"address":null,"email":`...)
	b = appendStr(b, who.email)
	b = appendStr(append(b, `,"name":`...), who.name)
	b = append(b, `,"phone":null}`...)
	b = appendBool(b, "captured", c.captured)
	b = appendInt(b, "created", c.created)
	b = appendStrField(b, "currency", p.currency)
	b = a.appendIDField(b, "customer", kCustomer, c.pi)
	b = appendBool(b, "disputed", c.disputed)
	b = appendBool(b, "livemode", false)
	b = append(appendKey(b, "metadata"), "{}"...)
	b = appendBool(b, "paid", true)
	b = a.appendIDField(b, "payment_intent", kPI, c.pi)
	b = appendBool(b, "refunded", isRefunded)
	if expand&expandRefunds != 0 {
		b = appendKey(b, "refunds")
		b = append(b, `{"object":"list","data":[`...)
		refs := a.sortedRefunds(i, rv)
		for k, re := range refs {
			if k > 0 {
				b = append(b, ',')
			}
			b = a.appendRefund(b, re)
		}
		b = append(b, `],"has_more":false,"total_count":`...)
		b = strconv.AppendInt(b, int64(len(refs)), 10)
		b = append(b, `,"url":"/v1/charges/`...)
		b = a.ids.appendID(b, kCharge, int(i))
		b = append(b, `/refunds"}`...)
	}
	b = appendStrField(b, "status", "succeeded")
	if a.full {
		b = append(b, chargeRest...)
	}
	return append(b, '}')
}

// sortedRefunds returns the charge's refunds newest first, as version rv
// shows them.
func (a *Account) sortedRefunds(ch int32, rv render) []int32 {
	refs := make([]int32, 0, len(a.charges[ch].refunds))
	for _, re := range a.charges[ch].refunds {
		if !a.refundHidden(re, rv) {
			refs = append(refs, re)
		}
	}
	fakekit.Ascending(refs, a.refundCreated)
	for l, r := 0, len(refs)-1; l < r; l, r = l+1, r-1 {
		refs[l], refs[r] = refs[r], refs[l]
	}
	return refs
}

// refundHidden reports whether version rv has no such refund: the
// released remainder of a partial capture, in Basil or later.
func (a *Account) refundHidden(re int32, rv render) bool {
	return rv.basil() && a.refunds[re].release
}

// btHidden reports whether version rv has no such balance transaction: the
// reversal of a partial capture's remainder, in Basil or later.
func (a *Account) btHidden(bt int32, rv render) bool {
	t := &a.bts[bt]
	return t.typ != btCharge && t.typ != btAdjustment && a.refundHidden(t.src, rv)
}

func (a *Account) appendRefund(b []byte, i int32) []byte {
	return a.appendRefundObj(b, i, &a.refunds[i])
}

func (a *Account) appendRefundObj(b []byte, i int32, r *refundObj) []byte {
	c := &a.charges[r.charge]
	b = a.appendHead(b, kRefund, i, "refund")
	b = appendInt(b, "amount", r.amount)
	b = a.appendIDField(b, "balance_transaction", kTxn, r.bt)
	b = a.appendIDField(b, "charge", kCharge, r.charge)
	b = appendInt(b, "created", r.created)
	b = appendStrField(b, "currency", a.pis[c.pi].currency)
	if r.status == "failed" {
		b = a.appendIDField(b, "failure_balance_transaction", kTxn, r.failBT)
		b = appendStrField(b, "failure_reason", "unknown")
	}
	b = append(appendKey(b, "metadata"), "{}"...)
	b = a.appendIDField(b, "payment_intent", kPI, c.pi)
	b = appendStrField(b, "reason", "requested_by_customer")
	b = appendStrField(b, "status", r.status)
	return append(b, '}')
}

func (a *Account) appendDispute(b []byte, i int32, rv render) []byte {
	d := &a.disputes[i]
	return a.appendDisputeObj(b, i, d, len(d.bts), rv)
}

// appendDisputeObj renders dispute i with the first nBT of its balance
// transactions.
func (a *Account) appendDisputeObj(b []byte, i int32, d *disputeObj, nBT int, rv render) []byte {
	c := &a.charges[d.charge]
	b = a.appendHead(b, kDispute, i, "dispute")
	b = appendInt(b, "amount", d.amount)
	b = append(appendKey(b, "balance_transactions"), '[')
	for k, bt := range d.bts[:nBT] {
		if k > 0 {
			b = append(b, ',')
		}
		b = a.appendBT(b, bt, false, rv)
	}
	b = append(b, ']')
	b = a.appendIDField(b, "charge", kCharge, d.charge)
	b = appendInt(b, "created", d.created)
	b = appendStrField(b, "currency", a.pis[c.pi].currency)
	b = appendBool(b, "is_charge_refundable", false)
	b = appendBool(b, "livemode", false)
	b = append(appendKey(b, "metadata"), "{}"...)
	b = a.appendIDField(b, "payment_intent", kPI, c.pi)
	b = appendStrField(b, "reason", "fraudulent")
	b = appendStrField(b, "status", d.status)
	return append(b, '}')
}

func (a *Account) appendPayout(b []byte, i int32) []byte {
	return a.appendPayoutStatus(b, i, a.payouts[i].status, a.payouts[i].recon)
}

// appendPayoutStatus renders payout i with the given status ("" is paid)
// and reconciliation status, so that an event's snapshot keeps the ones it
// was emitted with.
func (a *Account) appendPayoutStatus(b []byte, i int32, status string, recon uint8) []byte {
	p := &a.payouts[i]
	if status == "" {
		status = "paid"
	}
	b = a.appendHead(b, kPayout, i, "payout")
	b = appendInt(b, "amount", p.amount)
	b = appendInt(b, "arrival_date", p.arrival)
	b = appendBool(b, "automatic", p.recon != reconNotApplicable)
	b = appendInt(b, "created", p.created)
	b = appendStrField(b, "currency", p.currency)
	b = append(appendKey(b, "failure_balance_transaction"), "null"...)
	if status == "failed" {
		b = appendStrField(b, "failure_code", "could_not_process")
		b = appendStrField(b, "failure_message", "The bank could not process this payout.")
	} else {
		b = append(appendKey(b, "failure_code"), "null"...)
		b = append(appendKey(b, "failure_message"), "null"...)
	}
	b = appendBool(b, "livemode", false)
	b = append(appendKey(b, "metadata"), "{}"...)
	b = appendStrField(b, "method", "standard")
	b = appendStrField(b, "reconciliation_status", reconName[recon])
	b = appendStrField(b, "source_type", "card")
	b = appendStrField(b, "status", status)
	b = appendStrField(b, "type", "bank_account")
	return append(b, '}')
}

// btCharge returns the charge balance transaction i is about.
func (a *Account) btChargeOf(i int32) int32 {
	t := &a.bts[i]
	switch t.typ {
	case btCharge:
		return t.src
	case btAdjustment:
		return a.disputes[t.src].charge
	}
	return a.refunds[t.src].charge
}

func (a *Account) btCurrency(i int32) string {
	return a.pis[a.charges[a.btChargeOf(i)].pi].currency
}

// btSourceKind is the kind of balance transaction i's source.
func (a *Account) btSourceKind(i int32) kind {
	switch a.bts[i].typ {
	case btCharge:
		return kCharge
	case btAdjustment:
		return kDispute
	}
	return kRefund
}

// btAmount is balance transaction i's amount as version rv shows it: Basil
// shows a partial capture's charge balance transaction with the captured
// amount (and no reversal), older versions with the authorised amount.
func (a *Account) btAmount(i int32, rv render) int64 {
	t := &a.bts[i]
	if t.typ == btCharge && rv.basil() {
		return t.amount - a.released(&a.charges[t.src])
	}
	return t.amount
}

func (a *Account) appendBT(b []byte, i int32, expandSource bool, rv render) []byte {
	t := &a.bts[i]
	amount := a.btAmount(i, rv)
	b = a.appendHead(b, kTxn, i, "balance_transaction")
	b = appendInt(b, "amount", amount)
	b = appendInt(b, "available_on", t.availableOn)
	b = appendInt(b, "created", t.created)
	b = appendStrField(b, "currency", a.btCurrency(i))
	b = append(appendKey(b, "description"), "null"...)
	b = appendInt(b, "fee", 0)
	b = append(appendKey(b, "fee_details"), "[]"...)
	b = appendInt(b, "net", amount)
	category := btTypeName[t.typ]
	if t.typ == btAdjustment {
		category = "dispute"
		if t.amount > 0 {
			category = "dispute_reversal"
		}
	}
	b = appendStrField(b, "reporting_category", category)
	b = appendKey(b, "source")
	k := a.btSourceKind(i)
	switch {
	case !expandSource:
		b = append(b, '"')
		b = append(a.ids.appendID(b, k, int(t.src)), '"')
	case k == kCharge:
		b = a.appendCharge(b, t.src, expandNone, rv)
	case k == kDispute:
		b = a.appendDispute(b, t.src, rv)
	default:
		b = a.appendRefund(b, t.src)
	}
	status := "available"
	if rv.now < t.availableOn {
		status = "pending"
	}
	b = appendStrField(b, "status", status)
	b = appendStrField(b, "type", btTypeName[t.typ])
	return append(b, '}')
}

// appendSnapshot renders an event's object as it was at emission.
func (a *Account) appendSnapshot(b []byte, s *snapRec, rv render) []byte {
	switch s.kind {
	case kPI:
		p := a.pis[s.obj]
		p.received, p.capturable, p.canceledAt, p.charge = s.a, s.b, s.c, s.ref
		p.person, p.status = s.person, a.statuses[s.status]
		return a.appendPIObj(b, s.obj, &p, expandNone, rv)
	case kCharge:
		c := a.charges[s.obj]
		c.amountRefunded, c.bt = s.a, s.ref
		c.captured, c.refunded, c.disputed = s.flags&flagCaptured != 0, s.flags&flagRefunded != 0, s.flags&flagDisputed != 0
		return a.appendChargeObj(b, s.obj, &c, s.person, expandNone, rv)
	case kRefund:
		r := a.refunds[s.obj]
		r.failBT, r.status = s.ref, a.statuses[s.status]
		return a.appendRefundObj(b, s.obj, &r)
	case kDispute:
		d := a.disputes[s.obj]
		d.status = a.statuses[s.status]
		return a.appendDisputeObj(b, s.obj, &d, int(s.a), rv)
	default:
		return a.appendPayoutStatus(b, s.obj, a.statuses[s.status], s.flags)
	}
}

// appendEvent renders the event envelope around the event's snapshot.
func (a *Account) appendEvent(b []byte, seq int32) []byte {
	e := &a.events[seq]
	b = append(b, `{"id":"`...)
	b = a.ids.appendID(b, kEvent, int(seq))
	b = append(b, `","object":"event"`...)
	if a.id != "" {
		b = appendStrField(b, "account", a.id)
	}
	b = appendStrField(b, "api_version", a.vers[e.ver])
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, e.created, 10)
	b = append(b, `,"data":{"object":`...)
	// The data is rendered in the event's version, and its balance
	// transactions' status as of the event.
	b = a.appendSnapshot(b, &e.snap, render{rules: a.verRules[e.ver], now: e.created})
	b = append(b, `},"livemode":false,"pending_webhooks":0,"request":{"id":null,"idempotency_key":null},"type":`...)
	b = appendStr(b, a.types[e.typ])
	return append(b, '}')
}
