package stripe

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// PaymentIntentState maps a PaymentIntent status to a state (DESIGN section
// 4). ok is false for a status the mapping does not know: it is reported as
// unknown_status, never guessed.
func PaymentIntentState(status string) (s models.State, ok bool) {
	switch stripego.PaymentIntentStatus(status) {
	case stripego.PaymentIntentStatusRequiresPaymentMethod,
		stripego.PaymentIntentStatusRequiresConfirmation,
		stripego.PaymentIntentStatusRequiresAction,
		stripego.PaymentIntentStatusProcessing:
		// payment_intent.payment_failed lands here too: on Stripe a failed
		// attempt returns the intent to requires_payment_method, not final.
		return models.StateCreated, true
	case stripego.PaymentIntentStatusRequiresCapture:
		return models.StateAuthorised, true
	case stripego.PaymentIntentStatusSucceeded:
		return models.StateCaptured, true
	case stripego.PaymentIntentStatusCanceled:
		return models.StateCanceled, true
	}
	return models.StateNone, false
}

func at(unix int64) time.Time { return time.Unix(unix, 0).UTC() }

// mapEvent turns one event into changes. A payout.paid event lists the
// balance transactions it paid out (one list request per 100 charges).
func (p *Provider) mapEvent(ctx context.Context, account string, ev *leanEvent) ([]reconcile.Change, error) {
	if ev.obj == nil {
		return nil, fmt.Errorf("stripe event %s has no data", ev.ID)
	}
	t := at(ev.Created)
	base := reconcile.Change{At: t, EventID: ev.ID, EventType: ev.Type}
	typ := ev.Type
	decode := func(kind string, v any) error {
		if err := fill(ev.obj, v); err != nil {
			return fmt.Errorf("decode %s in stripe event %s: %w", kind, ev.ID, err)
		}
		return nil
	}
	switch {
	case strings.HasPrefix(typ, "payment_intent."):
		var pi leanPI
		if err := decode("payment intent", &pi); err != nil {
			return nil, err
		}
		return keep(piChange(base, pi)), nil

	case typ == "charge.captured" || typ == "charge.refunded":
		var ch leanCharge
		if err := decode("charge", &ch); err != nil {
			return nil, err
		}
		c, ok := chargeChange(base, &ch, ev.APIVersion)
		if !ok {
			return nil, nil
		}
		return []reconcile.Change{c}, nil

	case typ == "charge.refund.updated":
		var r leanRefund
		if err := decode("refund", &r); err != nil {
			return nil, err
		}
		if st := stripego.RefundStatus(r.Status); st != stripego.RefundStatusFailed && st != stripego.RefundStatusCanceled {
			return nil, nil
		}
		c := base
		c.ProviderID = string(r.PaymentIntent)
		c.RawStatus = "refund_" + r.Status
		c.Revert = fmt.Sprintf("Refund %s of %d %s %s at Stripe after it was recorded; amount_refunded is never lowered.", r.ID, r.Amount, r.Currency, r.Status)
		return keep(c), nil

	case typ == "charge.dispute.closed":
		var d leanDispute
		if err := decode("dispute", &d); err != nil {
			return nil, err
		}
		c := base
		c.ProviderID = string(d.PaymentIntent)
		c.RawStatus = "dispute_" + d.Status
		switch stripego.DisputeStatus(d.Status) {
		case stripego.DisputeStatusLost:
			c.State = models.StateChargeback
		case stripego.DisputeStatusWon:
			c.Revert = fmt.Sprintf("Dispute %s was won at Stripe, so the money came back.", d.ID)
			c.RevertOnlyFrom = []models.State{models.StateChargeback}
		case stripego.DisputeStatusWarningClosed:
			return nil, nil
		default:
			c.Unknown = true
		}
		return keep(c), nil

	case typ == "payout.paid":
		var po leanPayout
		if err := decode("payout", &po); err != nil {
			return nil, err
		}
		return p.payoutChanges(ctx, account, base, po.ID)

	case typ == "payout.failed" || typ == "payout.canceled":
		// Stripe documents that a payout can show paid, then fail
		// (docs/providers/stripe.md). Its payments are never moved back:
		// each is a conflict naming the payout.
		var po leanPayout
		if err := decode("payout", &po); err != nil {
			return nil, err
		}
		changes, err := p.payoutChanges(ctx, account, base, po.ID)
		if err != nil {
			return nil, err
		}
		status := strings.TrimPrefix(typ, "payout.")
		for i := range changes {
			c := &changes[i]
			c.State, c.PayoutID, c.View, c.ViewCurrent = models.StateNone, "", false, false
			c.RawStatus = "payout_" + status
			c.Revert = fmt.Sprintf("Payout %s that paid this payment out %s at Stripe after it was paid; settled_at and payout_id still name it.", po.ID, status)
		}
		return changes, nil
	}
	return nil, nil
}

func keep(c reconcile.Change) []reconcile.Change {
	if c.ProviderID == "" {
		return nil
	}
	return []reconcile.Change{c}
}

func piChange(base reconcile.Change, pi leanPI) reconcile.Change {
	c := base
	c.ProviderID = pi.ID
	if pi.ID == "" {
		return c
	}
	c.Snapshot = true
	c.Amount, c.Currency = pi.Amount, pi.Currency
	c.RawStatus = pi.Status
	st, ok := PaymentIntentState(pi.Status)
	c.State, c.Unknown = st, !ok
	return c
}

// chargeChange maps a charge snapshot. An uncaptured charge marked refunded
// is the hold released by canceling an authorisation: that payment is
// canceled by its payment_intent.canceled event, not refunded (ok=false).
func chargeChange(base reconcile.Change, ch *leanCharge, apiVersion string) (reconcile.Change, bool) {
	c := base
	c.ProviderID = string(ch.PaymentIntent)
	if c.ProviderID == "" || !ch.Captured {
		return c, false
	}
	c.Amount, c.Currency = ch.Amount, ch.Currency
	c.AmountRefunded = capturedRefunds(ch, apiVersion)
	c.AmountCaptured = partialCapture(ch)
	// The charge is the provider's view of the payment's refunds at the
	// event's time (DESIGN section 2, the local-ahead rule).
	c.View, c.Refunded = true, ch.Refunded
	switch {
	case ch.Refunded:
		c.State, c.RawStatus = models.StateRefunded, "charge_refunded"
	case ch.AmountRefunded > 0:
		c.RawStatus = "charge_partially_refunded" // amount only
	default:
		c.State, c.RawStatus = models.StateCaptured, "charge_captured"
	}
	return c, true
}

// payoutChanges settles every charge whose balance transaction the payout
// paid, at the time of the payout.paid event.
func (p *Provider) payoutChanges(ctx context.Context, account string, base reconcile.Change, payout string) ([]reconcile.Change, error) {
	params := &stripego.BalanceTransactionListParams{
		ListParams: listParams(ctx, account, 100),
		Payout:     stripego.String(payout),
	}
	params.AddExpand("data.source")
	it := p.btIter(params)
	var out []reconcile.Change
	for it.Next() {
		bt := it.Current().(*leanBT)
		if bt.Source.Object != "charge" || bt.Source.PaymentIntent == "" {
			continue // refunds, fees and adjustments settle no payment
		}
		c := base
		c.ProviderID = string(bt.Source.PaymentIntent)
		c.State, c.RawStatus = models.StateSettled, "paid_out"
		c.PayoutID = payout
		c.Amount, c.Currency = bt.Source.Amount, bt.Source.Currency
		// The expanded charge is the object as it is now, not at the
		// payout: a current view of its refunds.
		if bt.Source.Captured {
			c.View, c.ViewCurrent = true, true
			c.Refunded, c.AmountRefunded = bt.Source.Refunded, capturedRefunds(&bt.Source.leanCharge, stripego.APIVersion)
			c.AmountCaptured = partialCapture(&bt.Source.leanCharge)
		}
		out = append(out, c)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list balance transactions of payout %s: %w", payout, translate(err))
	}
	return out, nil
}

// fetchedChanges maps a re-fetched PaymentIntent (stuck-payment path) to
// changes with deterministic event ids and the most specific provider time
// the object carries for each state.
func fetchedChanges(pi *stripego.PaymentIntent, raw json.RawMessage) []reconcile.Change {
	st, ok := PaymentIntentState(string(pi.Status))
	when := at(pi.Created)
	ch := pi.LatestCharge
	switch {
	case st == models.StateCanceled && pi.CanceledAt > 0:
		when = at(pi.CanceledAt)
	case (st == models.StateCaptured || st == models.StateAuthorised) && ch != nil && ch.Created > 0:
		when = at(ch.Created)
	}
	mk := func(s models.State, t time.Time) reconcile.Change {
		c := reconcile.Change{
			ProviderID: pi.ID, State: s, At: t, Snapshot: true,
			Amount: pi.Amount, Currency: string(pi.Currency), RawStatus: string(pi.Status),
			EventType: "reconciler.payment_intent." + string(s), Inferred: true, Payload: raw,
		}
		c.EventID = reconcile.SyntheticEventID(pi.ID, s, t)
		return c
	}
	if !ok {
		c := mk(models.StateNone, when)
		c.Unknown = true
		c.EventID = ""
		return []reconcile.Change{c}
	}
	out := []reconcile.Change{mk(st, when)}
	if st != models.StateCaptured || ch == nil || !ch.Captured {
		return out
	}
	// The re-fetched charge is the provider's current view of refunds.
	lc := chargeOf(ch)
	refunded := capturedRefunds(&lc, stripego.APIVersion)
	out[0].View, out[0].ViewCurrent, out[0].Refunded = true, true, ch.Refunded
	out[0].AmountRefunded = refunded
	out[0].AmountCaptured = partialCapture(&lc)
	if refunded > 0 && ch.Refunded {
		rt := when
		if ch.Refunds != nil {
			for _, r := range ch.Refunds.Data {
				if r.Status == stripego.RefundStatusSucceeded && at(r.Created).After(rt) {
					rt = at(r.Created)
				}
			}
		}
		c := mk(models.StateRefunded, rt)
		c.AmountRefunded = refunded
		c.View, c.ViewCurrent, c.Refunded = true, true, true
		out = append(out, c)
	}
	return out
}

// basil is the first API version in which a partial capture no longer
// refunds the uncaptured remainder (docs/providers/stripe.md).
const basil = "2025-03-31"

// capturedRefunds is the part of a charge's amount_refunded that refunds
// captured money. Up to API version 2025-03-31.basil, capturing less than
// the authorised amount refunds the remainder and counts it in
// amount_refunded; that release is not a refund (DESIGN section 2). Objects
// rendered in a later version no longer count it.
func capturedRefunds(ch *leanCharge, apiVersion string) int64 {
	r := ch.AmountRefunded
	if p := partialCapture(ch); p > 0 && (apiVersion == "" || apiVersion < basil) {
		r -= ch.Amount - p
	}
	return max(r, 0)
}

// partialCapture is the captured amount of a charge that captured less than
// its amount, else 0.
func partialCapture(ch *leanCharge) int64 {
	if ch.Captured && ch.AmountCaptured > 0 && ch.AmountCaptured < ch.Amount {
		return ch.AmountCaptured
	}
	return 0
}
