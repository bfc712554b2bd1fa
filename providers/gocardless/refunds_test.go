package gocardless

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
)

func refundEvent(action string) Event {
	var ev Event
	ev.ID, ev.Action, ev.ResourceType = "EV1", action, "refunds"
	ev.CreatedAt = time.Date(2026, 11, 19, 10, 0, 0, 0, time.UTC)
	ev.Links.Refund = "RF1"
	return ev
}

// Every refund action GoCardless documents is mapped, and any other is
// reported (docs/providers/gocardless.md, "Refunds").
func TestRefundEventChange(t *testing.T) {
	r := Refund{ID: "RF1", Amount: 400, Currency: "GBP"}
	for _, c := range []struct {
		action       string
		none, total  bool
		revert       bool
		unknown      bool
		explanation  string
		revertAmount int64
	}{
		{action: "created", total: true},
		{action: "paid", none: true},
		{action: "refund_settled", none: true},
		{action: "failed", revert: true, explanation: "the customer was not refunded", revertAmount: 400},
		{action: "funds_returned", revert: true, explanation: "credited in a payout", revertAmount: 400},
		{action: "bounced", revert: true, explanation: "bounced", revertAmount: 400},
		{action: "refund_reversed", unknown: true, explanation: `"refund_reversed"`},
	} {
		t.Run(c.action, func(t *testing.T) {
			got, total := refundEventChange(refundEvent(c.action), r, "PM1")
			if c.none {
				if got.ProviderID != "" || total {
					t.Fatalf("%s: %+v, want nothing", c.action, got)
				}
				return
			}
			if got.ProviderID != "PM1" || total != c.total || (got.Revert != "") != c.revert || got.Unknown != c.unknown || got.RevertIfRefunded != c.revertAmount {
				t.Fatalf("%s: %+v (total %v)", c.action, got, total)
			}
			if text := got.Revert + got.Notice; !strings.Contains(text, c.explanation) {
				t.Fatalf("%s: %q lacks %q", c.action, text, c.explanation)
			}
			if c.revert && !strings.Contains(got.Revert, "4.00 GBP") {
				t.Fatalf("the revert names the amount: %q", got.Revert)
			}
			if c.action == "created" && got.RefundNote == "" {
				t.Fatal("a refund's creation says what amount_refunded counts")
			}
		})
	}
	if c, _ := refundEventChange(refundEvent("created"), r, ""); c.ProviderID != "" {
		t.Fatal("a refund without a payment maps to none")
	}
}

// The stuck path dates each state from the payment's own events, never from
// the charge date's midnight, which lies before the confirmation that set the
// row; only with no event left does it fall back on the charge date.
func TestFetchedChangesDateFromEvents(t *testing.T) {
	day := time.Date(2026, 11, 16, 0, 0, 0, 0, time.UTC)
	pm := Payment{ID: "PM1", CreatedAt: day.Add(-72 * time.Hour), ChargeDate: "2026-11-16", Amount: 1000, Currency: "GBP", Status: "paid_out"}
	pm.Links.Payout = "PO1"
	ev := func(id, action string, at time.Time) Event {
		var e Event
		e.ID, e.Action, e.ResourceType, e.CreatedAt = id, action, "payments", at
		e.Links.Payment = "PM1"
		return e
	}
	evs := []Event{ev("EV3", "paid_out", day.Add(50*time.Hour)), ev("EV2", "confirmed", day.Add(9*time.Hour)), ev("EV1", "submitted", day.Add(-48*time.Hour))}
	c := fetchedChanges(pm, json.RawMessage(`{}`), evs, nil)
	if c.State != models.StateSettled || !c.At.Equal(day.Add(50*time.Hour)) || c.PayoutID != "PO1" || !c.Inferred {
		t.Fatalf("settled from paid_out's time with its payout: %+v", c)
	}
	c = fetchedChanges(pm, json.RawMessage(`{}`), nil, nil)
	if !c.At.Equal(day) {
		t.Fatalf("no event: the charge date, got %v", c.At)
	}
	pm.Status = "confirmed"
	c = fetchedChanges(pm, json.RawMessage(`{}`), evs, nil)
	if c.State != models.StateCaptured || !c.At.Equal(day.Add(9*time.Hour)) || c.PayoutID != "" {
		t.Fatalf("captured at the confirmation: %+v", c)
	}
	// A retried failure stays not final even when a payout debit
	// (late_failure_settled) is the newest failure-like event.
	failed := Payment{ID: "PM1", CreatedAt: day, Amount: 1000, Currency: "GBP", Status: "failed", RetryIfPossible: true}
	yes := true
	fe := ev("EV4", "failed", day.Add(60*time.Hour))
	fe.Details.WillAttemptRetry = &yes
	c = fetchedChanges(failed, json.RawMessage(`{}`), []Event{ev("EV5", "late_failure_settled", day.Add(70*time.Hour)), fe}, nil)
	if c.State != models.StateNone || c.RawStatus != RawFailedWillRetry {
		t.Fatalf("a failure GoCardless will retry is not final: %+v", c)
	}
	failed.RetryIfPossible = false
	c = fetchedChanges(failed, json.RawMessage(`{}`), []Event{ev("EV5", "late_failure_settled", day.Add(70*time.Hour)), fe}, nil)
	if c.State != models.StateFailed || !c.At.Equal(day.Add(70*time.Hour)) {
		t.Fatalf("without retry_if_possible it is final, dated by the newest failure fact: %+v", c)
	}
	pm.Status, pm.AmountRefunded = "paid_out", 1000
	refunds := []Refund{{ID: "RF1", Amount: 1000, CreatedAt: day.Add(80 * time.Hour)}}
	refunds[0].Links.Payment = "PM1"
	c = fetchedChanges(pm, json.RawMessage(`{}`), evs, refunds)
	if c.State != models.StateRefunded || !c.At.Equal(day.Add(80*time.Hour)) || c.RefundNote == "" {
		t.Fatalf("refunded at the refund's creation: %+v", c)
	}
}
