package gcfake

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func getJSON(t testing.TB, s *Server, path string, v any) {
	t.Helper()
	st, _, body := get(t, s, path)
	require.Equal(t, 200, st, string(body))
	require.NoError(t, json.Unmarshal(body, v), string(body))
}

func getRefundObj(t testing.TB, s *Server, rf string) map[string]any {
	t.Helper()
	var r struct {
		Refunds map[string]any `json:"refunds"`
	}
	getJSON(t, s, "/refunds/"+rf, &r)
	return r.Refunds
}

func getPaymentObj(t testing.TB, s *Server, pm string) payment {
	t.Helper()
	var p struct {
		Payments payment `json:"payments"`
	}
	getJSON(t, s, "/payments/"+pm, &p)
	return p.Payments
}

// paidOut creates a payment collected and paid out at t0+4d; it returns the
// payment and payout ids.
func paidOut(s *Server, amount int64) (string, string) {
	pm := s.CreatePayment(amount, "GBP", t0)
	s.Submit(pm, t0.Add(24*time.Hour))
	s.Confirm(pm, t0.Add(72*time.Hour))
	return pm, s.PayOut(t0.Add(96*time.Hour), pm)
}

func TestRefundLifecycle(t *testing.T) {
	s := newServer(t, Options{Seed: 31})
	pm, po := paidOut(s, 3000)
	day := func(n int) time.Time { return t0.AddDate(0, 0, n) }

	// created: status pending_submission, amount_refunded raised at once
	rf := s.RefundCreated(pm, 1000, day(7))
	r := getRefundObj(t, s, rf)
	assert.Equal(t, "pending_submission", r["status"])
	assert.Equal(t, float64(1000), r["amount"])
	assert.Equal(t, ts(day(7)), r["created_at"])
	assert.Equal(t, pm, r["links"].(map[string]any)["payment"])
	assert.Equal(t, int64(1000), getPaymentObj(t, s, pm).AmountRefunded, "raised when the refund is created")
	assert.Equal(t, int64(1000), s.ExpectedAt(day(7))[pm].AmountRefunded)
	assert.Equal(t, models.StateSettled, s.ExpectedAt(day(7))[pm].State)

	s.RefundPaid(rf, day(8))
	assert.Equal(t, "paid", getRefundObj(t, s, rf)["status"])
	po2 := s.PayOut(day(9))
	s.RefundSettled(rf, day(9), po2)
	assert.Equal(t, "paid", getRefundObj(t, s, rf)["status"], "there is no refund_settled status")
	s.RefundFailed(rf, day(12))
	assert.Equal(t, "bounced", getRefundObj(t, s, rf)["status"])
	assert.Equal(t, int64(1000), getPaymentObj(t, s, pm).AmountRefunded, "a failure does not lower amount_refunded")
	po3 := s.PayOut(day(14))
	s.RefundFundsReturned(rf, day(14), po3)
	assert.Equal(t, "funds_returned", getRefundObj(t, s, rf)["status"])

	// a second refund, cancelled: no event
	rf2 := s.RefundCreated(pm, 500, day(15))
	nEvents := len(s.Deliveries())
	s.CancelRefund(rf2, day(16))
	assert.Len(t, s.Deliveries(), nEvents, "GoCardless documents no cancelled action")
	assert.Equal(t, "cancelled", getRefundObj(t, s, rf2)["status"])
	assert.Equal(t, int64(1500), getPaymentObj(t, s, pm).AmountRefunded, "cancelling does not lower amount_refunded")

	// an unknown action
	s.RefundRawAction(rf2, "bounced", day(17))
	assert.Equal(t, "cancelled", getRefundObj(t, s, rf2)["status"], "a raw action changes no status")

	l := listEventsOK(t, s, "resource_type=refunds")
	type want struct{ action, cause, origin, refund, at string }
	var got []want
	for _, e := range l.Events {
		assert.Equal(t, "refunds", e.ResourceType)
		assert.Equal(t, pm, e.Links["payment"])
		assert.NotContains(t, e.Links, "payout", "refund events carry refund and payment only")
		assert.Equal(t, "bacs", e.Details["scheme"])
		assert.NotEmpty(t, e.Details["description"])
		got = append(got, want{e.Action, e.Details["cause"].(string), e.Details["origin"].(string), e.Links["refund"], e.CreatedAt})
	}
	assert.Equal(t, []want{
		{"bounced", "refund_bounced", "gocardless", rf2, ts(day(17))},
		{"created", "refund_created", "api", rf2, ts(day(15))},
		{"funds_returned", "refund_funds_returned", "gocardless", rf, ts(day(14))},
		{"failed", "refund_failed", "gocardless", rf, ts(day(12))},
		{"refund_settled", "refund_settled", "gocardless", rf, ts(day(9))},
		{"paid", "refund_paid", "gocardless", rf, ts(day(8))},
		{"created", "refund_created", "api", rf, ts(day(7))},
	}, got)

	// facts: amount_refunded at creation only; failures and cancellations
	// counted apart
	for _, d := range s.Deliveries() {
		f := d.Facts[0]
		switch d.EventType {
		case "refunds.created":
			if f.RefundID == rf {
				assert.Equal(t, int64(1000), f.AmountRefunded)
			} else {
				assert.Equal(t, int64(1500), f.AmountRefunded)
			}
			assert.Equal(t, models.StateNone, f.State)
		case "refunds.refund_settled":
			assert.Equal(t, po2, f.PayoutID)
		case "refunds.funds_returned":
			assert.Equal(t, po3, f.PayoutID)
		}
		if f.RefundID != "" {
			assert.Equal(t, pm, f.PaymentID)
			assert.Equal(t, models.StateNone, f.State)
		}
	}
	x := s.ExpectedAt(day(11))[pm]
	assert.Equal(t, int64(1000), x.AmountRefunded)
	assert.Zero(t, x.RefundsFailed)
	x = s.ExpectedAt(day(12))[pm]
	assert.Equal(t, int64(1000), x.RefundsFailed)
	assert.Equal(t, int64(1000), x.AmountRefunded, "GoCardless's amount_refunded, never lowered")
	assert.Zero(t, s.ExpectedAt(day(16).Add(-time.Millisecond))[pm].RefundsCancelled)
	x = s.ExpectedAt(day(20))[pm]
	assert.Equal(t, Expected{State: models.StateSettled, At: t0.Add(96 * time.Hour), AmountRefunded: 1500, Amount: 3000,
		Currency: "gbp", RefundsFailed: 1000, RefundsCancelled: 500, PayoutID: po}, x)

	// the payouts' money: the refund deducted, then credited back
	var o struct {
		Payouts map[string]any `json:"payouts"`
	}
	getJSON(t, s, "/payouts/"+po2, &o)
	assert.Equal(t, float64(-1000), o.Payouts["amount"])
	getJSON(t, s, "/payouts/"+po3, &o)
	assert.Equal(t, float64(1000), o.Payouts["amount"])
}

// A refund of the whole amount implies refunded at its creation.
func TestFullRefundRefundedAtCreation(t *testing.T) {
	s := New(Options{Seed: 32})
	pm, _ := paidOut(s, 2000)
	at := t0.AddDate(0, 0, 7)
	rf := s.RefundCreated(pm, 0, at)
	x := s.ExpectedAt(at)[pm]
	assert.Equal(t, models.StateRefunded, x.State)
	assert.Equal(t, at, x.At)
	assert.Equal(t, int64(2000), x.AmountRefunded)
	s.RefundFailed(rf, at.Add(48*time.Hour))
	x = s.ExpectedAt(at.Add(72 * time.Hour))[pm]
	assert.Equal(t, models.StateRefunded, x.State, "a failed refund changes no state")
	assert.Equal(t, int64(2000), x.RefundsFailed)
	assert.Panics(t, func() { s.RefundCreated(pm, 1, at) }, "amount_refunded is not lowered: nothing left")
	assert.Panics(t, func() { s.RefundPaid("RF000000000000", at) })
}

func TestPayoutLinksOnPaymentEvents(t *testing.T) {
	s := newServer(t, Options{Seed: 33})
	pm, po := paidOut(s, 1200)
	cb, poCB := paidOut(s, 1300)
	unknown, _ := paidOut(s, 1400)
	day := func(n int) time.Time { return t0.AddDate(0, 0, n) }
	s.Fail(pm, day(6))
	poLate := s.PayOut(day(7))
	s.LateFailureSettled(pm, day(7), poLate)
	s.ChargeBack(cb, day(20))
	poCBSettled := s.PayOut(day(21))
	s.ChargebackSettled(cb, day(21), poCBSettled)
	s.Fail(unknown, day(6))
	s.LateFailureSettled(unknown, day(8)) // the payout debited is not known
	s.ChargebackSettled(unknown, day(9), "")

	payouts := map[string]map[string]string{}
	for _, id := range []string{pm, cb, unknown} {
		for _, e := range listEventsOK(t, s, "payment="+id).Events {
			if p, ok := e.Links["payout"]; ok {
				if payouts[id] == nil {
					payouts[id] = map[string]string{}
				}
				payouts[id][e.Action] = p
			}
		}
	}
	assert.Equal(t, map[string]map[string]string{
		pm:      {"paid_out": po, "late_failure_settled": poLate},
		cb:      {"paid_out": poCB, "chargeback_settled": poCBSettled},
		unknown: {"paid_out": payouts[unknown]["paid_out"]},
	}, payouts)
	assert.NotEqual(t, po, payouts[unknown]["paid_out"])

	// the payment object's links.payout is the payout that paid it
	assert.Equal(t, po, getPaymentObj(t, s, pm).Links["payout"])
	assert.Equal(t, poCB, getPaymentObj(t, s, cb).Links["payout"])
	np := s.CreatePayment(100, "GBP", t0)
	assert.NotContains(t, getPaymentObj(t, s, np).Links, "payout", "absent until paid out")

	// the debits lower the payouts that carry them
	var o struct {
		Payouts map[string]any `json:"payouts"`
	}
	getJSON(t, s, "/payouts/"+poLate, &o)
	assert.Equal(t, float64(-1200), o.Payouts["amount"])
	getJSON(t, s, "/payouts/"+po, &o)
	assert.Equal(t, float64(1200), o.Payouts["amount"])

	// facts and ground truth
	for _, d := range s.Deliveries() {
		var ev event
		require.NoError(t, json.Unmarshal(d.Payload, &ev))
		assert.Equal(t, ev.Links["payout"], d.Facts[0].PayoutID, d.EventType)
		if d.EventType == "payments.chargeback_settled" {
			assert.Equal(t, "chargeback_settled", ev.Details["cause"])
			assert.Equal(t, models.StateNone, d.Facts[0].State)
		}
	}
	x := s.ExpectedAt(day(30))
	assert.Equal(t, po, x[pm].PayoutID)
	assert.Equal(t, models.StateFailed, x[pm].State)
	assert.Equal(t, models.StateChargeback, x[cb].State)
	assert.Empty(t, x[np].PayoutID)
}
