package stripefake

import (
	"fmt"
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
	"github.com/reconciler/reconciler/models"
)

// Builders for the Stripe behaviours documented in docs/providers/stripe.md
// (partial capture, API versions, payout reconciliation, manual payouts,
// dispute funds, pending and canceled refunds).

func (a *Account) partialCapture(pi int32, amount, at int64) {
	p := &a.pis[pi]
	ch := p.charge
	if !p.manual || p.status != "requires_capture" || ch < 0 || a.charges[ch].captured || amount <= 0 || amount >= p.amount {
		panic(fmt.Sprintf("stripefake: partial capture of %d of payment %s (status %s, amount %d): want a manual-capture payment in requires_capture and 0 < amount < authorised",
			amount, a.ids.id(kPI, int(pi)), p.status, p.amount))
	}
	a.captureCharge(ch, at)
	c := &a.charges[ch]
	re := a.newRefund(ch, c.amount-amount, at, "succeeded")
	a.refunds[re].release = true
	c.release = re
	p.status = "succeeded"
	p.received = amount
	p.capturable = 0
	a.emit("payment_intent.succeeded", at, a.snapPI(pi), factRec{pi: pi, state: fakekit.StateCode(models.StateCaptured), flags: factPartial})
	a.emit("charge.captured", at, a.snapCharge(ch), factRec{pi: pi, state: fakekit.StateCode(models.StateCaptured), flags: factPartial})
	if a.rulesNow()&ruleBasil == 0 {
		a.emit("charge.refunded", at, a.snapCharge(ch), factRec{pi: pi})
		a.emitRefund("refund.created", re, at)
	}
}

// PartialCapture captures amount (0 < amount < authorised) of a
// manual-capture payment in requires_capture: the payment intent becomes
// succeeded with amount_received = amount and amount_capturable = 0; the
// charge keeps amount = authorised, with amount_captured = amount and
// captured = true. The remainder is released as Stripe does before
// 2025-03-31.basil: a succeeded Refund of the remainder, counted in the
// charge's amount_refunded (refunded stays false), the capture's balance
// transaction of the authorised amount plus a refund balance transaction
// (source: that Refund) of minus the remainder. A client rendering in Basil
// or later (Stripe-Version, or the account's event version) sees no Refund,
// amount_refunded without the remainder and one balance transaction of the
// captured amount. Emits payment_intent.succeeded and charge.captured, then,
// for events before Basil, charge.refunded (and refund.created in Acacia).
// A later Refund refunds captured money only. Implied: captured,
// Fact.AmountCaptured = amount, refunds of captured money unchanged (0).
func (a *Account) PartialCapture(pi string, amount int64, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.partialCapture(a.mustPI(pi), amount, secs(at))
}

// PendingRefund refunds captured money of the payment (amount as for
// Refund) with a refund in status pending, counted in the charge's
// amount_refunded as Stripe counts pending card refunds, with its balance
// transaction. Emits charge.refunded (and refund.created in
// 2024-10-28.acacia and later) and returns the refund id; FailRefund or
// CancelRefund may follow. Implied: as for Refund (refunded only when the
// charge is fully refunded; amount_refunded = the new total).
func (a *Account) PendingRefund(pi string, amount int64, at time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids.id(kRefund, int(a.refund(a.mustPI(pi), amount, secs(at), "pending")))
}

// CancelRefund cancels a pending (or succeeded) refund: status canceled, a
// reversing refund_failure balance transaction, the charge's
// amount_refunded lowered by its amount and refunded false (our reading:
// Stripe documents neither; it documents canceling only for refunds in
// requires_action). Emits charge.refund.updated (refund snapshot) and, in
// 2024-10-28.acacia and later, refund.updated. Implied: no state change,
// Fact.Reverted = the refund's amount (not a refund of captured money).
func (a *Account) CancelRefund(refundID string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.revertRefund(a.mustRefund(refundID), "canceled", secs(at))
}

func (a *Account) mustRefund(id string) int32 {
	re := a.ids.decode(kRefund, id, len(a.refunds))
	if re < 0 {
		panic(fmt.Sprintf("stripefake: unknown refund %q", id))
	}
	return int32(re)
}

func (a *Account) mustPayout(id string) int32 {
	po := a.ids.decode(kPayout, id, len(a.payouts))
	if po < 0 {
		panic(fmt.Sprintf("stripefake: unknown payout %q", id))
	}
	return int32(po)
}

func (a *Account) mustDispute(id string) int32 {
	dp := a.ids.decode(kDispute, id, len(a.disputes))
	if dp < 0 {
		panic(fmt.Sprintf("stripefake: unknown dispute %q", id))
	}
	return int32(dp)
}

// PayoutInProgress is Payout for a payout whose balance transactions Stripe
// is still reconciling: payout.paid carries reconciliation_status
// "in_progress", and until CompleteReconciliation
// GET /v1/balance_transactions?payout= lists only the older half (rounded
// down) of its balance transactions. Implied: settled at `at` for each
// payment whose charge it swept (even one its listing does not show yet).
func (a *Account) PayoutInProgress(at time.Time, pis ...string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids.id(kPayout, int(a.payout(secs(at), a.payableCharges(pis), reconInProgress)))
}

// CompleteReconciliation ends the reconciliation of a PayoutInProgress
// payout: reconciliation_status "completed", the balance transaction
// listing complete; emits payout.reconciliation_completed (payout
// snapshot). Implied: no state change (the payments were settled at
// payout.paid).
func (a *Account) CompleteReconciliation(payout string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	po := a.mustPayout(payout)
	p := &a.payouts[po]
	if p.recon != reconInProgress {
		panic(fmt.Sprintf("stripefake: payout %s is not being reconciled (%s)", payout, reconName[p.recon]))
	}
	p.recon = reconCompleted
	a.emit("payout.reconciliation_completed", secs(at), a.snapPayout(po), a.payoutFacts(po)...)
}

// payoutFacts are no-change facts naming each payment the payout swept.
func (a *Account) payoutFacts(po int32) []factRec {
	var facts []factRec
	for _, bt := range a.payouts[po].bts {
		if a.bts[bt].typ == btCharge {
			facts = append(facts, factRec{pi: a.charges[a.bts[bt].src].pi})
		}
	}
	return facts
}

// SetManualPayouts makes the account pay out manually, with funds held
// delayDays days: GET /v1/account shows settings.payouts.schedule
// {interval: manual, delay_days: delayDays}; a charge captured from now on
// has a balance transaction with available_on = capture + delayDays days
// (status pending until the server's clock reaches it). Payout and
// PayoutInProgress panic from now on and PayoutCaptured creates nothing;
// use ManualPayout. Implied: a payment whose charge was not paid out by an
// automatic payout is settled (no payout) at its balance transaction's
// available_on once the server's clock has passed it, never by a payout.
func (a *Account) SetManualPayouts(delayDays int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.manual = true
	a.delayDays = int64(delayDays)
}

// ManualPayout creates a paid manual payout (automatic false,
// reconciliation_status not_applicable) of amount in currency, sweeping no
// balance transactions: GET /v1/balance_transactions?payout= answers 400
// for it, as Stripe does. Emits payout.paid and returns the payout id.
// Implied: nothing (Stripe cannot tell which transactions it paid out).
func (a *Account) ManualPayout(at time.Time, amount int64, currency string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := secs(at)
	po := int32(len(a.payouts))
	a.payouts = append(a.payouts, payoutObj{amount: amount, created: t, arrival: t, currency: lowerASCII(currency), recon: reconNotApplicable})
	a.payoutOrder.Add(po, t, a.payoutCreated)
	a.emit("payout.paid", t, a.snapPayout(po))
	return a.ids.id(kPayout, int(po))
}

func (a *Account) disputeFunds(dp int32, sign int64, typ string, at int64) {
	d := &a.disputes[dp]
	bt := int32(len(a.bts))
	a.bts = append(a.bts, btObj{amount: sign * d.amount, created: at, availableOn: at, src: dp, payout: -1, typ: btAdjustment})
	a.btOrder.Add(bt, at, a.btCreated)
	a.orphans = append(a.orphans, bt) // swept by the next payout
	d.bts = append(d.bts, bt)
	a.emit(typ, at, a.snapDispute(dp), factRec{pi: a.charges[d.charge].pi})
}

// WithdrawDisputeFunds withdraws the disputed amount: an adjustment balance
// transaction (source the dispute, amount −dispute amount, reporting
// category dispute) added to the dispute's balance_transactions and swept
// by the next payout. Emits charge.dispute.funds_withdrawn (dispute
// snapshot). Implied: no state change (a chargeback only at CloseDispute
// lost).
func (a *Account) WithdrawDisputeFunds(dispute string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.disputeFunds(a.mustDispute(dispute), -1, "charge.dispute.funds_withdrawn", secs(at))
}

// ReinstateDisputeFunds gives the disputed amount back: an adjustment
// balance transaction of +dispute amount (reporting category
// dispute_reversal) added to the dispute's balance_transactions. Emits
// charge.dispute.funds_reinstated (dispute snapshot). Implied: no state
// change.
func (a *Account) ReinstateDisputeFunds(dispute string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.disputeFunds(a.mustDispute(dispute), 1, "charge.dispute.funds_reinstated", secs(at))
}

// UpdateDispute sets an open dispute's status (under_review,
// warning_under_review, ... any string is stored as is) and emits
// charge.dispute.updated. Implied: no state change.
func (a *Account) UpdateDispute(dispute, status string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	dp := a.mustDispute(dispute)
	d := &a.disputes[dp]
	d.status = status
	a.emit("charge.dispute.updated", secs(at), a.snapDispute(dp), factRec{pi: a.charges[d.charge].pi})
}
