package stripe

import (
	"context"
	"fmt"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/valyala/fastjson"
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

// payoutEach hands each change of a payout event to emit as its balance
// transactions are read: a payout.paid event lists the balance
// transactions it paid out (one list request per 100 charges), and
// payout.reconciliation_completed lists them again once Stripe says the
// list is complete. Every other event is one payment's (mapOne).
func (p *Provider) payoutEach(ctx context.Context, account string, ev *leanEvent, ahead *btAheads, emit func(reconcile.Change) error) error {
	if !ev.o.present {
		return fmt.Errorf("stripe event %s has no data", ev.ID)
	}
	// The payout fields read (id, automatic, reconciliation_status) are
	// rendered alike in every version, and its balance transactions are
	// fetched in the pinned one.
	if err := ev.o.want(objPayout); err != nil {
		return fmt.Errorf("decode payout in stripe event %s: %w", ev.ID, err)
	}
	po := ev.o.po
	base := reconcile.Change{At: at(ev.Created), EventID: ev.ID, EventType: ev.Type}
	return p.payoutEventEach(ctx, account, base, ev.Type, po, ahead, emit)
}

// mapOne maps an event of a payment (not a payout's, which can settle many)
// to its change; ok is false when the event says nothing of a payment. It
// returns the change itself: a slice of one for each event was a
// fifteenth of a rerun's allocations.
func mapOne(ev *leanEvent) (c reconcile.Change, ok bool, err error) {
	if !ev.o.present {
		return c, false, fmt.Errorf("stripe event %s has no data", ev.ID)
	}
	t := at(ev.Created)
	base := reconcile.Change{At: t, EventID: ev.ID, EventType: ev.Type}
	typ := ev.Type
	decoded := func(kind string) error {
		if err := ev.o.err; err != nil {
			return fmt.Errorf("decode %s in stripe event %s: %w", kind, ev.ID, err)
		}
		return nil
	}
	vdate, known := versionDate(ev.APIVersion)
	if !known {
		// A version newer than any whose changelog was read may have changed
		// what the fields mean: the payment is reported, not misread.
		id, err := ev.o.payment, ev.o.paymentErr
		if err != nil {
			return c, false, fmt.Errorf("decode stripe event %s: %w", ev.ID, err)
		}
		c = base
		c.ProviderID, c.Unknown, c.RawStatus = id, true, "api_version "+ev.APIVersion
		c.Notice = fmt.Sprintf("Stripe rendered event %s (%s) in API version %q, newer than any this reconciler knows; it was not read. Upgrade reconciler, or check the payment in the Stripe dashboard.", ev.ID, typ, ev.APIVersion)
		return keep(c)
	}
	// The form decodeObject decoded is the event type's (objectKind).
	switch ev.o.kind {
	case objPI:
		if err := decoded("payment intent"); err != nil {
			return c, false, err
		}
		pi := ev.o.pi
		if vdate < versionStatusRename {
			pi.Status = renamedStatus(pi.Status)
		}
		return keep(piChange(base, pi))

	case objCharge:
		if err := decoded("charge"); err != nil {
			return c, false, err
		}
		ch := ev.o.ch
		c, ok = chargeChange(base, &ch, vdate)
		return c, ok, nil

	case objRefund:
		if err := decoded("refund"); err != nil {
			return c, false, err
		}
		r := ev.o.re
		switch st := stripego.RefundStatus(r.Status); st {
		case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		case stripego.RefundStatusPending, stripego.RefundStatusSucceeded, stripego.RefundStatusRequiresAction:
			return c, false, nil // the charge's events carry the amounts
		default:
			c = base
			c.ProviderID, c.Unknown, c.RawStatus = string(r.PaymentIntent), true, "refund_"+r.Status
			return keep(c)
		}
		c = base
		c.ProviderID = string(r.PaymentIntent)
		c.RawStatus = "refund_" + r.Status
		c.Revert = fmt.Sprintf("Refund %s of %s %s at Stripe, but the payment's amount_refunded counts it; amount_refunded is never lowered.", r.ID, money(r.Amount, r.Currency), r.Status)
		// Only a row that counted the refund is wrong; a refund that failed
		// before anyone counted it moved no money.
		c.RevertIfRefunded = max(r.Amount, 1)
		if r.Created > 0 && r.Created <= ev.Created {
			// Charge snapshots since the refund was created counted it.
			c.RefundSince = at(r.Created)
		}
		return keep(c)

	case objDispute:
		if err := decoded("dispute"); err != nil {
			return c, false, err
		}
		d := ev.o.di
		return keep(disputeChange(base, typ, d, vdate))
	}
	return c, false, nil
}

// renamedStatus maps a PaymentIntent status of a version before 2019-02-11
// to its current name.
func renamedStatus(s string) string {
	switch s {
	case "requires_source":
		return string(stripego.PaymentIntentStatusRequiresPaymentMethod)
	case "requires_source_action":
		return string(stripego.PaymentIntentStatusRequiresAction)
	}
	return s
}

// want returns the decode's error for kind, or an error when the event's
// type decoded another form (objectKind and the caller disagree: a bug).
func (o *leanObject) want(k objKind) error {
	if o.kind != k {
		return fmt.Errorf("internal: the object was decoded as form %d, read as %d", o.kind, k)
	}
	return o.err
}

// paymentOf is the PaymentIntent an event's object is about.
func paymentOf(obj *fastjson.Value, typ string) (string, error) {
	if strings.HasPrefix(typ, "payment_intent.") {
		return str(obj, "id", false)
	}
	id, err := ref(obj, "payment_intent")
	return string(id), err
}

func money(amount int64, currency string) string { return models.Money(amount, currency) }

// disputeChange maps a dispute event. An open dispute moves no state: it is
// a notice for support (the funds may already be withdrawn). Closed as lost
// it is the chargeback; won (or prevented) after a local chargeback it is a
// revert for a human.
func disputeChange(base reconcile.Change, typ string, d leanDispute, vdate string) reconcile.Change {
	c := base
	c.ProviderID = string(d.PaymentIntent)
	c.RawStatus = "dispute_" + d.Status
	c.NoticeKind = models.KindDispute
	amount := money(d.Amount, d.Currency)
	switch st := stripego.DisputeStatus(d.Status); {
	case st == stripego.DisputeStatusLost:
		c.State = models.StateChargeback
		return c
	case st == stripego.DisputeStatusWon || (st == "prevented" && vdate >= versionPrevented):
		c.Revert = fmt.Sprintf("Dispute %s was %s at Stripe, so the money came back.", d.ID, d.Status)
		c.RevertOnlyFrom = []models.State{models.StateChargeback}
		return c
	case st == stripego.DisputeStatusWarningClosed:
		return c // an inquiry closed without a chargeback: the notice is withdrawn
	case st == stripego.DisputeStatusNeedsResponse, st == stripego.DisputeStatusUnderReview,
		st == stripego.DisputeStatusWarningNeedsResponse, st == stripego.DisputeStatusWarningUnderReview:
	default:
		c.NoticeKind, c.Unknown = "", true
		return c
	}
	what := "is open"
	switch typ {
	case "charge.dispute.created":
		what = "was opened by the customer's bank"
	case "charge.dispute.funds_withdrawn":
		what = "is open and Stripe withdrew " + amount + " from the balance for it"
	case "charge.dispute.funds_reinstated":
		what = "is open and Stripe reinstated " + amount + " to the balance"
	}
	reason := ""
	if d.Reason != "" {
		reason = ", reason " + d.Reason
	}
	c.Notice = fmt.Sprintf("Dispute %s of %s %s (status %s%s). The payment's state stays as it is until the dispute closes; if it is lost it becomes a chargeback.", d.ID, amount, what, d.Status, reason)
	return c
}

// keep is c, unless it names no payment.
func keep(c reconcile.Change) (reconcile.Change, bool, error) {
	return c, c.ProviderID != "", nil
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
func chargeChange(base reconcile.Change, ch *leanCharge, vdate string) (reconcile.Change, bool) {
	c := base
	c.ProviderID = string(ch.PaymentIntent)
	if c.ProviderID == "" || !ch.Captured {
		return c, false
	}
	c.Amount, c.Currency = ch.Amount, ch.Currency
	c.AmountRefunded = capturedRefunds(ch, vdate)
	c.AmountCaptured = partialCapture(ch)
	// The charge is the provider's view of the payment's refunds at the
	// event's time (DESIGN section 2, the local-ahead rule).
	c.View, c.Refunded = true, ch.Refunded
	switch {
	case ch.Refunded:
		c.State, c.RawStatus = models.StateRefunded, "charge_refunded"
	case c.AmountRefunded > 0:
		// Refunds of captured money only: the remainder a partial capture
		// released before basil is in amount_refunded, and is not one.
		c.RawStatus = "charge_partially_refunded" // amount only
	default:
		c.State, c.RawStatus = models.StateCaptured, "charge_captured"
	}
	return c, true
}

// payoutChangesEach settles every charge whose balance transaction the
// payout paid, at the time of base (the payout.paid event), handing emit
// each change as its page of balance transactions is read.
func (p *Provider) payoutChangesEach(ctx context.Context, account string, base reconcile.Change, payout string, ahead *btAheads, emit func(reconcile.Change) error) error {
	settle := func(bt *leanBT) error {
		if bt.Source.Object != "charge" || bt.Source.PaymentIntent == "" {
			return nil // refunds, fees and adjustments settle no payment
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
			c.Refunded, c.AmountRefunded = bt.Source.Refunded, capturedRefunds(&bt.Source.leanCharge, pinnedDate)
			c.AmountCaptured = partialCapture(&bt.Source.leanCharge)
		}
		return emit(c)
	}
	params := &stripego.BalanceTransactionListParams{
		ListParams: listParams(ctx, account, 100),
		Payout:     stripego.String(payout),
	}
	params.AddExpand("data.source")
	if a := ahead.take(base.EventID); a != nil {
		// Listed ahead (payoutahead.go): its pages, then the rest.
		last, all, err := a.each(settle)
		a.close()
		p.payoutsAhead.Add(1)
		p.log.Debug("stripe payout's balance transactions read ahead", "payout_id", payout, "event_id", base.EventID, "whole", all, "error", err)
		if err != nil || all {
			return err
		}
		if last != "" {
			params.StartingAfter = stripego.String(last)
		}
	}
	it := p.btIter(params)
	for it.Next() {
		if err := settle(it.Current().(*leanBT)); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		if isManualPayoutRefusal(err) {
			// A payout that did not say it was manual, but is.
			p.log.Debug("manual payout: Stripe lists no balance transactions for it", "payout_id", payout)
			return nil
		}
		return fmt.Errorf("list balance transactions of payout %s: %w", payout, translate(err))
	}
	return nil
}

// capturedRefunds is the part of a charge's amount_refunded that refunds
// captured money, for a charge rendered in the version of date vdate. Before
// 2025-03-31.basil, capturing less than the authorised amount refunds the
// remainder and counts it in amount_refunded; that release is not a refund
// (DESIGN section 2). Objects rendered in a later version no longer count it.
func capturedRefunds(ch *leanCharge, vdate string) int64 {
	r := ch.AmountRefunded
	if p := partialCapture(ch); p > 0 && vdate < versionBasil {
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
