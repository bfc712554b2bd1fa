package gcfake

import (
	"strconv"
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
	"github.com/reconciler/reconciler/internal/jsonw"
)

// Hand-written JSON appenders: objects are rendered straight into byte
// slices in the shapes of GoCardless API version 2015-07-06.

// APIVersion is the GoCardless-Version every request must carry.
const APIVersion = "2015-07-06"

func appendStr(b []byte, v string) []byte { return jsonw.String(b, v) }

// appendKey appends `,"k":` (or `"k":` right after an opening brace).
func appendKey(b []byte, k string) []byte {
	if n := len(b); n > 0 && b[n-1] != '{' && b[n-1] != '[' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, k...)
	return append(b, '"', ':')
}

func appendStrField(b []byte, k, v string) []byte { return appendStr(appendKey(b, k), v) }

func appendIntField(b []byte, k string, v int64) []byte {
	return strconv.AppendInt(appendKey(b, k), v, 10)
}

func appendNull(b []byte, k string) []byte { return append(appendKey(b, k), "null"...) }

func (s *Server) appendIDField(b []byte, k string, kd kind, n int32) []byte {
	b = append(appendKey(b, k), '"')
	b = s.ids.appendID(b, kd, int(n))
	return append(b, '"')
}

const timeLayout = "2006-01-02T15:04:05.000Z"

func appendTimeField(b []byte, k string, v int64) []byte {
	b = append(appendKey(b, k), '"')
	b = msTime(v).AppendFormat(b, timeLayout)
	return append(b, '"')
}

func appendDateField(b []byte, k string, d int32) []byte {
	b = append(appendKey(b, k), '"')
	b = time.Unix(int64(d)*86400, 0).UTC().AppendFormat(b, "2006-01-02")
	return append(b, '"')
}

// ---- details -------------------------------------------------------------

type details struct{ origin, cause, description, reasonCode string }

func eventDetails(rt uint8, action string, variant uint8) details {
	switch rt {
	case rtRefunds:
		switch action {
		case "created":
			return details{"api", "refund_created", "The refund has been created, and will be submitted in the next batch.", ""}
		case "paid":
			return details{"gocardless", "refund_paid", "The refund has been paid to your customer.", ""}
		case "refund_settled":
			return details{"gocardless", "refund_settled", "The refund has been deducted from a payout.", ""}
		case "failed":
			return details{"gocardless", "refund_failed", "The refund did not reach your customer. The funds will be returned to you.", ""}
		case "funds_returned":
			return details{"gocardless", "refund_funds_returned", "The funds for the refund have been returned to you.", ""}
		}
		return details{"gocardless", "refund_" + action, "The refund is now " + action + ".", ""}
	case rtCreditors:
		if action == "bounced_payout" {
			return details{"gocardless", "bounced_payout", "A payout for this creditor has failed. Please contact your bank for more information or retry the payout.", ""}
		}
		return details{"gocardless", action, "The creditor has been updated (" + action + ").", ""}
	}
	switch action {
	case "created":
		return details{"api", "payment_created", "Payment created via the API.", ""}
	case "submitted":
		return details{"gocardless", "payment_submitted", "Payment submitted to the banks. As a result, it can no longer be cancelled.", ""}
	case "confirmed":
		return details{"gocardless", "payment_confirmed", "Enough time has passed since the payment was submitted for the banks to return an error, so this payment is now confirmed.", ""}
	case "paid_out":
		return details{"gocardless", "payment_paid_out", "The payment has been paid out by GoCardless.", ""}
	case "failed":
		switch variant {
		case varLateFailure:
			return details{"bank", "refer_to_payer", "The customer's bank wasn't able to pay the Direct Debit; the failure was reported after the payment was confirmed.", "ARUDD-0"}
		case varReferToPayer:
			return details{"bank", "refer_to_payer", "The customer's bank wasn't able to pay the Direct Debit. The customer should contact their bank.", "ARUDD-0"}
		}
		return details{"bank", "mandate_cancelled", "The mandate for this payment was cancelled at a bank branch.", "ARUDD-1"}
	case "cancelled":
		return details{"api", "payment_cancelled", "Payment cancelled.", ""}
	case "customer_approval_denied":
		return details{"gocardless", "customer_approval_denied", "The customer denied approval for this payment.", ""}
	case "charged_back":
		return details{"bank", "authorisation_disputed", "The customer has disputed that the amount taken differs from the amount they were notified of.", "DDICA-1"}
	case "chargeback_cancelled":
		return details{"gocardless", "chargeback_cancelled", "The customer's bank has cancelled the chargeback request.", ""}
	case "resubmission_requested":
		if variant == varAutoRetried {
			return details{"gocardless", "payment_autoretried", "The payment was scheduled for resubmission automatically by GoCardless.", ""}
		}
		return details{"api", "payment_retried", "An attempt to retry this payment was requested.", ""}
	case "late_failure_settled":
		return details{"gocardless", "late_failure_settled", "This late failed payment has been settled against a payout.", ""}
	case "chargeback_settled":
		return details{"gocardless", "chargeback_settled", "This charged back payment has been settled against a payout.", ""}
	}
	return details{"gocardless", action, "The payment's status changed (" + action + ").", ""}
}

// appendEvent renders event seq as /events lists it.
func (s *Server) appendEvent(b []byte, seq int32) []byte {
	e := &s.events[seq]
	rt := e.rtype()
	action := s.actions[e.action]
	b = append(b, '{')
	b = s.appendIDField(b, "id", kEvent, seq)
	b = appendTimeField(b, "created_at", e.created)
	b = appendStrField(b, "action", action)
	b = appendStrField(b, "resource_type", rtName[rt])
	b = append(appendKey(b, "links"), '{')
	switch rt {
	case rtRefunds:
		// No links.payout: GoCardless documents refund and (in a
		// transcription of the reference) payment only.
		b = s.appendIDField(b, "refund", kRefund, e.obj)
		b = s.appendIDField(b, "payment", kPayment, s.refunds[e.obj].pm)
	case rtCreditors:
		// bounced_payout: whether GoCardless sets links.payout on it is
		// not documented (the reference shows only "links"); the fake sets
		// it so that a client can tell which payout bounced.
		b = s.appendIDField(b, "creditor", kCreditor, 0)
		b = s.appendIDField(b, "payout", kPayout, e.obj)
	default:
		b = s.appendIDField(b, "payment", kPayment, e.obj)
		// paid_out: the payout the payment appears in (documented).
		// late_failure_settled, chargeback_settled: the payout debited,
		// when the builder named it (undocumented).
		if po := s.eventPayout(seq); po >= 0 {
			b = s.appendIDField(b, "payout", kPayout, po)
		}
	}
	b = append(b, '}')
	d := eventDetails(rt, action, e.variant())
	b = append(appendKey(b, "details"), '{')
	b = appendStrField(b, "origin", d.origin)
	b = appendStrField(b, "cause", d.cause)
	b = appendStrField(b, "description", d.description)
	if rt != rtCreditors {
		b = appendStrField(b, "scheme", "bacs")
	}
	if d.reasonCode != "" {
		b = appendStrField(b, "reason_code", d.reasonCode)
	}
	if rt == rtPayments && action == "failed" {
		// Set on every payment failed event: true when GoCardless retries it.
		if e.willRetry() {
			b = append(appendKey(b, "will_attempt_retry"), "true"...)
		} else {
			b = append(appendKey(b, "will_attempt_retry"), "false"...)
		}
	}
	b = append(b, '}')
	b = append(appendKey(b, "metadata"), "{}"...)
	return append(b, '}')
}

var descriptions = []string{"Monthly membership", "Gym membership", "Broadband subscription", "Invoice payment",
	"Annual plan", "Utility bill", "Insurance premium", "Magazine subscription", "Tuition fees", "Service plan"}

func (s *Server) appendPayment(b []byte, pm int32) []byte {
	p := &s.pms[pm]
	h := fakekit.SplitMix64(s.ids.key ^ uint64(pm)*0x51AF)
	name, email := fakekit.Person(h)
	b = append(b, '{')
	b = s.appendIDField(b, "id", kPayment, pm)
	b = appendTimeField(b, "created_at", p.created)
	b = appendDateField(b, "charge_date", p.chargeDate)
	b = appendIntField(b, "amount", p.amount)
	b = appendStrField(b, "description", descriptions[(h>>40)%uint64(len(descriptions))])
	b = appendStrField(b, "currency", s.currencies[p.currency])
	b = appendStrField(b, "status", s.statuses[p.status])
	b = appendIntField(b, "amount_refunded", p.amountRefunded)
	b = appendNull(b, "reference")
	b = appendStrField(b, "scheme", "bacs")
	if p.retry {
		b = append(appendKey(b, "retry_if_possible"), "true"...)
	} else {
		b = append(appendKey(b, "retry_if_possible"), "false"...)
	}
	b = append(appendKey(b, "metadata"), '{')
	b = appendStrField(b, "customer_name", name)
	b = appendStrField(b, "customer_email", email)
	b = append(b, '}')
	b = append(appendKey(b, "links"), '{')
	b = s.appendIDField(b, "mandate", kMandate, pm)
	b = s.appendIDField(b, "creditor", kCreditor, 0)
	if p.payout >= 0 {
		b = s.appendIDField(b, "payout", kPayout, p.payout)
	}
	b = append(b, '}')
	return append(b, '}')
}

func (s *Server) appendRefund(b []byte, rf int32) []byte {
	r := &s.refunds[rf]
	b = append(b, '{')
	b = s.appendIDField(b, "id", kRefund, rf)
	b = appendTimeField(b, "created_at", r.created)
	b = appendIntField(b, "amount", r.amount)
	b = appendStrField(b, "currency", s.currencies[s.pms[r.pm].currency])
	b = appendStrField(b, "status", s.statuses[r.status])
	b = appendNull(b, "reference")
	b = append(appendKey(b, "metadata"), "{}"...)
	b = append(appendKey(b, "links"), '{')
	b = s.appendIDField(b, "payment", kPayment, r.pm)
	b = s.appendIDField(b, "mandate", kMandate, r.pm)
	b = append(b, '}')
	return append(b, '}')
}

func (s *Server) appendPayout(b []byte, po int32) []byte {
	p := &s.payouts[po]
	b = append(b, '{')
	b = s.appendIDField(b, "id", kPayout, po)
	b = appendIntField(b, "amount", p.amount)
	b = appendStrField(b, "currency", s.currencies[p.currency])
	b = appendStrField(b, "status", s.statuses[p.status])
	b = appendDateField(b, "arrival_date", p.arrival)
	b = appendTimeField(b, "created_at", p.created)
	b = appendIntField(b, "deducted_fees", p.fees)
	b = appendStrField(b, "payout_type", "merchant")
	b = appendNull(b, "reference")
	b = append(appendKey(b, "links"), '{')
	b = s.appendIDField(b, "creditor", kCreditor, 0)
	b = append(b, '}')
	return append(b, '}')
}
