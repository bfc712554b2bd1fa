package scenario

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

// StripeBehaviour is one payment per Stripe behaviour of
// docs/providers/stripe.md that the plain drift kinds do not cover (issue
// 13): a partial capture, a payout that failed after it was paid, an open
// dispute with its funds withdrawn, failed refunds the row did and did not
// count, a payout whose balance transactions Stripe listed late, a captured
// payment only the stuck path can settle, a manual-payout account, and an
// account whose events are rendered in newer API versions, one of them
// unknown.
//
// The payments live on three accounts: the platform (automatic payouts),
// a connected account that pays out by hand, and a connected account on
// 2025-03-31.basil and then on a version no reconciler knows. A connected
// account is reconciled on its own (reconcile.Options.Account = its id) and
// its rows carry its id in payments.account.
type StripeBehaviour struct {
	Platform, Manual, Newer *stripefake.Account

	// On the platform.
	//
	// PartialCapture: 10000 gbp authorised, 7000 captured; pre-Basil Stripe
	// counts the 3000 released in the charge's amount_refunded. Every
	// webhook arrived.
	PartialCapture string
	// PayoutFailed: captured and paid out by FailedPayout, which then
	// failed (payout.failed). Every webhook arrived.
	PayoutFailed string
	// OpenDispute: captured, then disputed (Dispute, needs_response) and
	// its 4000 withdrawn. Every webhook arrived.
	OpenDispute string
	// RefundFailed: captured, a pending refund (FailedRefund, 400) that
	// then failed; its charge.refunded webhook was lost, so the row never
	// counted the refund.
	RefundFailed string
	// RefundFailedCounted: the same with CountedRefund, whose
	// charge.refunded webhook arrived: the row counts 400 that came back.
	RefundFailedCounted string
	// ReconciledLate: captured, paid out by ReconciledPayout, whose
	// payout.paid said reconciliation_status in_progress; Stripe completed
	// it hours later (payout.reconciliation_completed). Both payout
	// webhooks were lost. (The fake answers a run with the payout as it is
	// now, completed: a run made before the completion would list it
	// short.)
	ReconciledLate string
	// StuckCaptured: captured more than five days ago and paid out by
	// StuckPayout, whose payout.paid lies before any default run window;
	// that webhook was lost, so only the stuck path can settle the row.
	StuckCaptured string

	// On Manual (SetManualPayouts(2)), which also made ManualPayoutID, a
	// manual payout of no particular payment.
	//
	// ManualSettled: captured four days ago, so its funds became available
	// two days ago; its webhooks arrived (up to the capture: nothing else
	// is sent).
	ManualSettled string
	// ManualPending: captured an hour ago, funds still pending; only its
	// payment_intent.created webhook arrived.
	ManualPending string

	// On Newer.
	//
	// NewerPartial: in 2025-03-31.basil, 9000 authorised, 6000 captured
	// (no Refund for the 3000 released), then 1000 of the captured money
	// refunded; webhooks arrived up to the authorisation.
	NewerPartial string
	// UnknownVersion: captured after the account moved to UnknownAPIVersion;
	// every webhook was lost.
	UnknownVersion string

	// The objects the items name.
	FailedPayout, ReconciledPayout, StuckPayout, ManualPayoutID string
	Dispute, FailedRefund, CountedRefund                        string

	// Sent is every event of the crafted payments by account id ("" is
	// the platform), oldest first; Deliveries is what the application's
	// webhook worker received of them (in delivery order), and Missed how
	// many deliveries were lost.
	Sent, Deliveries map[string][]webhooksim.Delivery
	Missed           int

	// Expect is the outcome of one run of each account after SeedLocal,
	// by payment: the default window (24 hours and the hour of overlap)
	// ending at now, the stuck path on with StuckAfter at most 96 hours.
	// It is decided from Stripe's documented behaviour and DESIGN (see
	// each entry), not from what the code does.
	Expect map[string]Want
}

// Want is what one run must leave for one crafted payment.
type Want struct {
	Account string // "" for the platform, else the connected account's id
	// Kinds are the run's drift items for the payment, "kind/action",
	// sorted; empty when it is in sync.
	Kinds []string
	// The row after the run. State StateNone means no row.
	State          models.State
	AmountRefunded int64
	AmountCaptured int64 // 0: amount_captured stays null
	Settled        bool  // settled_at is set
	SettledAt      time.Time
	PayoutID       string // "" for none
	// ExplanationHas is a phrase one of the payment's items' explanations
	// must contain ("" when it has no item).
	ExplanationHas string
}

// Versions the Newer account's events are rendered in.
const (
	BasilAPIVersion   = "2025-03-31.basil"
	UnknownAPIVersion = "2031-01-01.zeta"
)

// ManualDelayDays is the Manual account's payout delay.
const ManualDelayDays = 2

// NewStripeBehaviour builds the behaviours into the three accounts, as of
// now. Every fact a default run window (24 hours and an hour of overlap)
// must read lies within the last 24 hours; StuckCaptured's payout and
// ManualSettled's capture lie before it on purpose. Payments an account
// already holds are left alone. Background payments (Account.Generate)
// belong before the call on the platform and Newer, since their payouts
// would otherwise sweep the crafted charges, and after it on Manual, which
// pays out by hand from the call on.
func NewStripeBehaviour(platform, manual, newer *stripefake.Account, now time.Time) *StripeBehaviour {
	h := func(x float64) time.Time { return now.Add(time.Duration(x * float64(time.Hour))).Truncate(time.Second) }
	m := time.Minute
	s := &StripeBehaviour{Platform: platform, Manual: manual, Newer: newer}
	p := platform

	s.PartialCapture = p.CreatePayment(10000, "gbp", true, h(-20))
	p.Authorise(s.PartialCapture, h(-20).Add(m))
	p.PartialCapture(s.PartialCapture, 7000, h(-18))

	s.PayoutFailed = p.CreatePayment(2500, "gbp", false, h(-21))
	p.Capture(s.PayoutFailed, h(-21).Add(m))
	s.FailedPayout = p.Payout(h(-10), s.PayoutFailed)
	p.FailPayout(s.FailedPayout, "failed", h(-4))

	s.OpenDispute = p.CreatePayment(4000, "gbp", false, h(-22))
	p.Capture(s.OpenDispute, h(-22).Add(m))
	s.Dispute = p.Dispute(s.OpenDispute, h(-6))
	p.WithdrawDisputeFunds(s.Dispute, h(-6).Add(m))

	s.RefundFailed = p.CreatePayment(1500, "gbp", false, h(-19))
	p.Capture(s.RefundFailed, h(-19).Add(m))
	s.FailedRefund = p.PendingRefund(s.RefundFailed, 400, h(-8))
	p.FailRefund(s.FailedRefund, h(-5))

	s.RefundFailedCounted = p.CreatePayment(1600, "gbp", false, h(-18.5))
	p.Capture(s.RefundFailedCounted, h(-18.5).Add(m))
	s.CountedRefund = p.PendingRefund(s.RefundFailedCounted, 400, h(-7.5))
	p.FailRefund(s.CountedRefund, h(-4.5))

	s.ReconciledLate = p.CreatePayment(3300, "gbp", false, h(-23))
	p.Capture(s.ReconciledLate, h(-23).Add(m))
	s.ReconciledPayout = p.PayoutInProgress(h(-12), s.ReconciledLate)
	p.CompleteReconciliation(s.ReconciledPayout, h(-3))

	s.StuckCaptured = p.CreatePayment(5200, "gbp", false, h(-130))
	p.Capture(s.StuckCaptured, h(-130).Add(m))
	s.StuckPayout = p.Payout(h(-80), s.StuckCaptured) // its funds became available at h(-82)

	manual.SetManualPayouts(ManualDelayDays)
	s.ManualSettled = manual.CreatePayment(6100, "gbp", false, h(-96))
	manual.Capture(s.ManualSettled, h(-96).Add(m))
	s.ManualPending = manual.CreatePayment(2400, "gbp", false, h(-1.5))
	manual.Capture(s.ManualPending, h(-1))
	s.ManualPayoutID = manual.ManualPayout(h(-10), 6100, "gbp")

	newer.SetAPIVersion(BasilAPIVersion)
	s.NewerPartial = newer.CreatePayment(9000, "gbp", true, h(-20))
	newer.Authorise(s.NewerPartial, h(-20).Add(m))
	newer.PartialCapture(s.NewerPartial, 6000, h(-16))
	newer.Refund(s.NewerPartial, 1000, h(-9))
	newer.SetAPIVersion(UnknownAPIVersion)
	s.UnknownVersion = newer.CreatePayment(1800, "gbp", false, h(-7))
	newer.Capture(s.UnknownVersion, h(-7).Add(m))

	// Which deliveries were lost, by payment.
	lost := map[string]func(webhooksim.Delivery) bool{
		s.RefundFailed: func(d webhooksim.Delivery) bool { return d.EventType == "charge.refunded" },
		s.ReconciledLate: func(d webhooksim.Delivery) bool {
			return d.EventType == "payout.paid" || d.EventType == "payout.reconciliation_completed"
		},
		s.StuckCaptured: func(d webhooksim.Delivery) bool { return d.At.After(h(-130).Add(m)) },
		s.ManualPending: func(d webhooksim.Delivery) bool { return d.EventType != "payment_intent.created" },
		s.NewerPartial: func(d webhooksim.Delivery) bool {
			return d.EventType != "payment_intent.created" && d.EventType != "payment_intent.amount_capturable_updated"
		},
		s.UnknownVersion: func(webhooksim.Delivery) bool { return true },
	}
	s.Sent, s.Deliveries = map[string][]webhooksim.Delivery{}, map[string][]webhooksim.Delivery{}
	for _, a := range s.Accounts() {
		acct := s.account(a)
		mine := map[string]bool{}
		for _, id := range s.Payments(a) {
			mine[id] = true
		}
		for _, d := range webhooksim.Stripe(acct.Deliveries()) {
			of := ""
			for _, f := range d.Facts {
				if mine[f.PaymentID] {
					of = f.PaymentID
				}
			}
			if of == "" && !(a == manual.ID() && d.EventType == "payout.paid" && bytes.Contains(d.Payload, []byte(`"`+s.ManualPayoutID+`"`))) {
				continue
			}
			s.Sent[a] = append(s.Sent[a], d)
			if l := lost[of]; l != nil && l(d) {
				s.Missed++
				continue
			}
			s.Deliveries[a] = append(s.Deliveries[a], d)
		}
	}

	settled := func(at time.Time, payout string) Want {
		return Want{State: models.StateSettled, Settled: true, SettledAt: at, PayoutID: payout}
	}
	with := func(w Want, account string, expl string, kinds ...string) Want {
		w.Account, w.ExplanationHas = account, expl
		w.Kinds = slices.Sorted(slices.Values(kinds))
		return w
	}
	captured := Want{State: models.StateCaptured}
	partial := func(amount, captured int64) string {
		return fmt.Sprintf("the %s released went back to the customer and is not a refund", models.Money(amount-captured, "gbp"))
	}
	const (
		behind       = models.KindBehind + "/" + models.ActionRepaired
		missingLocal = models.KindMissingLocal + "/" + models.ActionRepaired
		conflict     = models.KindConflict + "/" + models.ActionRefused
		mismatch     = models.KindMismatch + "/" + models.ActionReported
		dispute      = models.KindDispute + "/" + models.ActionReported
		unknown      = models.KindUnknownStatus + "/" + models.ActionReported
	)
	pc := captured
	pc.AmountCaptured = 7000
	np := captured
	np.AmountCaptured, np.AmountRefunded = 6000, 1000
	counted := captured
	counted.AmountRefunded = 400
	mid := manual.ID()
	nid := newer.ID()
	s.Expect = map[string]Want{
		// DESIGN 2 and 4, stripe.md 1: captured, the remainder is no refund,
		// the partial capture is reported.
		s.PartialCapture: with(pc, "", partial(10000, 7000), mismatch),
		// DESIGN 3, stripe.md 5: never moved back, a conflict naming the
		// payout; settled_at/payout_id still name it (paid at h(-10)).
		s.PayoutFailed: with(settled(h(-10), s.FailedPayout), "", s.FailedPayout, conflict),
		// stripe.md 17: an open dispute is reported, no state change.
		s.OpenDispute: with(captured, "", s.Dispute, dispute),
		// stripe.md 19: a failed refund the row never counted is nothing.
		s.RefundFailed: with(captured, "", ""),
		// stripe.md 19: one the row counted is a conflict; amount_refunded
		// is never lowered.
		s.RefundFailedCounted: with(counted, "", s.CountedRefund, conflict),
		// stripe.md 16: listed again at reconciliation_completed, still
		// dated at the payout.paid event.
		s.ReconciledLate: with(settled(h(-12), s.ReconciledPayout), "", "settled", behind),
		// stripe.md 18: the stuck path finds the paid payout that swept the
		// charge, dated at its arrival_date (the fake's is its creation).
		s.StuckCaptured: with(settled(h(-80), s.StuckPayout), "", "settled", behind),
		// DESIGN 3, stripe.md 15: settled at available_on, no payout.
		s.ManualSettled: with(settled(h(-96).Add(m).Add(ManualDelayDays*24*time.Hour), ""), mid, "settled", behind),
		// DESIGN 3: funds still pending are not settled; the capture it
		// missed is repaired.
		s.ManualPending: with(captured, mid, "captured", behind),
		// stripe.md 1 and 12: in Basil amount_refunded is refunds of
		// captured money already; the partial capture is reported.
		s.NewerPartial: with(np, nid, partial(9000, 6000), behind, mismatch),
		// stripe.md 12, DESIGN 3: the events are reported, never read; the
		// payment unknown locally is fetched by id (rendered in 2023-10-16)
		// and created from that.
		s.UnknownVersion: with(captured, nid, UnknownAPIVersion, missingLocal, unknown),
	}
	return s
}

// Accounts are the three accounts' ids: the platform (""), Manual, Newer.
func (s *StripeBehaviour) Accounts() []string {
	return []string{s.Platform.ID(), s.Manual.ID(), s.Newer.ID()}
}

func (s *StripeBehaviour) account(id string) *stripefake.Account {
	for _, a := range []*stripefake.Account{s.Platform, s.Manual, s.Newer} {
		if a.ID() == id {
			return a
		}
	}
	panic(fmt.Sprintf("scenario: account %q is not one of the behaviour's", id))
}

// Names names each crafted payment by its behaviour ("PartialCapture",
// ...), as the fields do.
func (s *StripeBehaviour) Names() map[string]string {
	return map[string]string{
		s.PartialCapture: "PartialCapture", s.PayoutFailed: "PayoutFailed", s.OpenDispute: "OpenDispute",
		s.RefundFailed: "RefundFailed", s.RefundFailedCounted: "RefundFailedCounted", s.ReconciledLate: "ReconciledLate",
		s.StuckCaptured: "StuckCaptured", s.ManualSettled: "ManualSettled", s.ManualPending: "ManualPending",
		s.NewerPartial: "NewerPartial", s.UnknownVersion: "UnknownVersion",
	}
}

// Payments are the crafted payments of one account, in creation order.
func (s *StripeBehaviour) Payments(account string) []string {
	switch account {
	case s.Platform.ID():
		return []string{s.PartialCapture, s.PayoutFailed, s.OpenDispute, s.RefundFailed, s.RefundFailedCounted, s.ReconciledLate, s.StuckCaptured}
	case s.Manual.ID():
		return []string{s.ManualSettled, s.ManualPending}
	case s.Newer.ID():
		return []string{s.NewerPartial, s.UnknownVersion}
	}
	return nil
}

// SeedLocal delivers what the webhooks delivered, account by account.
func (s *StripeBehaviour) SeedLocal(ctx context.Context, db *gorm.DB, now time.Time) error {
	for _, a := range s.Accounts() {
		if err := SeedStripeAccount(ctx, db, a, s.Deliveries[a], now); err != nil {
			return err
		}
	}
	return nil
}

// SeedStripeAccount delivers ds (up to now) as the application's webhook
// worker would, for the Stripe account with id account ("" the platform):
// the rows the deliveries create carry the account's id, as the worker of
// a Connect platform records which account a payment belongs to
// (webhooksim records every row as the platform's).
func SeedStripeAccount(ctx context.Context, db *gorm.DB, account string, ds []webhooksim.Delivery, now time.Time) error {
	if _, _, err := webhooksim.Seed(ctx, db, "stripe", ds, now, func(int, webhooksim.Delivery) bool { return true }); err != nil {
		return err
	}
	if account == "" {
		return nil
	}
	seen := map[string]bool{}
	var ids []string
	for _, d := range ds {
		for _, f := range d.Facts {
			if !seen[f.PaymentID] {
				seen[f.PaymentID] = true
				ids = append(ids, f.PaymentID)
			}
		}
	}
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		err := editPayments(ctx, db, "provider = 'stripe' AND account = '' AND provider_id IN ?", []any{ids[:n]}, map[string]any{"account": account}).Error
		if err != nil {
			return fmt.Errorf("scenario: record account %s: %w", account, err)
		}
		ids = ids[n:]
	}
	return nil
}
