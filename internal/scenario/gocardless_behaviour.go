package scenario

import (
	"context"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
)

// GoCardlessUnknownRefundAction is the refunds action RefundUnknownAction's
// refund is reported with: none of GoCardless's five documented refund
// actions (created, paid, refund_settled, failed, funds_returned), nor the
// two statuses reconciler also reads as actions (bounced, cancelled).
const GoCardlessUnknownRefundAction = "reversed"

// GoCardlessBehaviour is one payment per GoCardless behaviour of
// docs/providers/gocardless.md that the plain drift kinds do not cover
// (issue 14): a Success+ failure GoCardless retried and collected, late
// failures after the payout, the refund lifecycle (a refund counted from
// its creation; failed refunds the row did and did not count; an action
// nobody documents), a payout that bounced after it was paid, a payout
// recorded from links.payout, and a confirmed and a paid-out payment only
// the stuck path can find.
//
// Every payment is a Bacs cycle on England and Wales working days (created,
// submitted the next working day, confirmed, paid out at 07:00 London time)
// within the last eight working days before today, but StuckConfirmed and
// StuckPaidOut, whose events all lie before Start (twelve working days
// back at most).
type GoCardlessBehaviour struct {
	Srv *gcfake.Server

	// SuccessPlusRetried failed with details.will_attempt_retry true
	// (FailWillRetry), was resubmitted by GoCardless (AutoRetry), then
	// submitted, confirmed and paid out by RetriedPayout. The webhooks up
	// to the failure arrived (created, submitted, failed); the
	// resubmission and everything after it were lost.
	SuccessPlusRetried string
	// LateFailureRecorded was paid out by DayPayout, then failed late
	// (Fail, will_attempt_retry false) and was debited from
	// LateFailureDebitPayout (LateFailureSettled). Every webhook arrived:
	// the row is failed already.
	LateFailureRecorded string
	// LateFailureLost is the same with the failed and late_failure_settled
	// webhooks lost: the row is settled.
	LateFailureLost string
	// RefundCreatedLost was paid out by DayPayout and refunded in full
	// (CreatedRefund: RefundCreated, then RefundPaid); refunds.created was
	// lost, refunds.paid arrived (it implies nothing).
	RefundCreatedLost string
	// RefundFailedCounted was paid out by DayPayout; CountedRefund (10.00
	// of 40.00) was created, paid, then failed and its funds were returned
	// in RetriedPayout. Every webhook arrived: the row counts 1000.
	RefundFailedCounted string
	// RefundFailedUncounted was paid out by DayPayout; UncountedRefund
	// (15.00 of 30.00) was created and failed; every refunds webhook was
	// lost: the row counts nothing.
	RefundFailedUncounted string
	// RefundUnknownAction was paid out by DayPayout; UnknownRefund (5.00)
	// was created (delivered), then reported with action
	// GoCardlessUnknownRefundAction (lost).
	RefundUnknownAction string
	// PayoutBounced was paid out by BouncedPayout, which then bounced
	// (BouncePayout: status bounced, a creditors bounced_payout event).
	// Every webhook arrived.
	PayoutBounced string
	// PayoutIDRecorded was paid out by RecordedPayout (which also debits
	// the late failures); its paid_out webhook was lost.
	PayoutIDRecorded string
	// StuckConfirmed was created, submitted and confirmed before Start;
	// only its created and submitted webhooks arrived, so the row is
	// authorised and no run window from Start on holds its confirmation:
	// only the stuck path (StuckBefore) finds it.
	StuckConfirmed string
	// StuckPaidOut was confirmed and paid out by StuckPayout before Start;
	// the paid_out webhook was lost, so the row is captured at its
	// confirmation and only the stuck path finds the payout. (The issue's
	// nightly stale item: dated at charge_date 00:00 UTC, before the
	// confirmation that set the row, the settlement was refused as stale
	// on every run.)
	StuckPaidOut string

	// The objects the items name.
	RetriedPayout, DayPayout, LateFailureDebitPayout, BouncedPayout, RecordedPayout, StuckPayout string
	CreatedRefund, CountedRefund, UncountedRefund, UnknownRefund                                 string
	// (LateFailureDebitPayout is RecordedPayout: the later payout the late
	// failures were debited from.)

	// Start is the time of the oldest event of every crafted payment but
	// StuckConfirmed: a run window from Start (an hour before it is fine)
	// to now reads them all and none of StuckConfirmed's.
	Start time.Time
	// StuckBefore is a stuck-path cutoff (reconcile.Options.StuckBefore
	// returning it) that StuckConfirmed's row qualifies for, before and
	// after the run (its confirmation lies before it), and no row whose
	// state was set from Start on.
	StuckBefore time.Time
	// ConfirmedAt is StuckConfirmed's payments.confirmed event time;
	// StuckPaidOutAt StuckPaidOut's payments.paid_out.
	ConfirmedAt, StuckPaidOutAt time.Time

	// Sent is every event of the crafted payments (the bounce's creditors
	// event with PayoutBounced's), oldest first; Deliveries is what the
	// application's webhook worker received of them, and Missed how many
	// deliveries were lost.
	Sent, Deliveries []webhooksim.Delivery
	Missed           int

	// Expect is the outcome of one run after SeedLocal, by payment: the
	// window [Start-1h, now), the stuck path on with StuckBefore. It is
	// decided from GoCardless's documented behaviour
	// (docs/providers/gocardless.md) and DESIGN (see each entry), not from
	// what the code does.
	Expect map[string]Want
	// StateAt is the row's source_updated_at after that run, by payment:
	// the GoCardless event that established its state.
	StateAt map[string]time.Time
}

// NewGoCardlessBehaviour builds the behaviours into s, as of now. Payments
// s already holds are left alone; background payments (Server.Generate)
// have payouts of their own, so they may be generated before or after.
func NewGoCardlessBehaviour(s *gcfake.Server, now time.Time) *GoCardlessBehaviour {
	d := workingDayClock(now, 456*time.Millisecond)
	g := &GoCardlessBehaviour{Srv: s, Start: d(8, 9, 0)}

	// cycle creates a payment k working days back, submits it the next
	// working day and confirms it three working days after that.
	cycle := func(amount int64, k, m int) string {
		pm := s.CreatePayment(amount, "GBP", d(k, 9, 30+m))
		s.Submit(pm, d(k-1, 15, 5+m))
		s.Confirm(pm, d(k-4, 6, 10+m))
		return pm
	}

	// Success+: the charge-date failure GoCardless retries, resubmitted
	// minutes later for a new charge date, then the normal cycle.
	g.SuccessPlusRetried = s.CreatePayment(4500, "GBP", d(8, 9, 30))
	s.Submit(g.SuccessPlusRetried, d(7, 15, 5))
	s.FailWillRetry(g.SuccessPlusRetried, d(4, 4, 20))
	s.AutoRetry(g.SuccessPlusRetried, d(4, 5, 0))
	s.Submit(g.SuccessPlusRetried, d(3, 15, 5))
	s.Confirm(g.SuccessPlusRetried, d(1, 6, 10))

	// Confirmed on d(3), paid out on d(3) at 07:00 by one payout.
	g.LateFailureRecorded = cycle(12000, 7, 1)
	g.LateFailureLost = cycle(8800, 7, 2)
	g.RefundCreatedLost = cycle(2000, 7, 3)
	g.RefundFailedCounted = cycle(4000, 7, 4)
	g.RefundFailedUncounted = cycle(3000, 7, 5)
	g.RefundUnknownAction = cycle(2500, 7, 6)
	g.DayPayout = s.PayOut(d(3, 7, 0), g.LateFailureRecorded, g.LateFailureLost, g.RefundCreatedLost,
		g.RefundFailedCounted, g.RefundFailedUncounted, g.RefundUnknownAction)

	// Paid out on d(2) by a payout of its own, which bounces on d(1).
	g.PayoutBounced = cycle(6600, 7, 7)
	g.BouncedPayout = s.PayOut(d(2, 7, 0), g.PayoutBounced)
	s.BouncePayout(g.BouncedPayout, d(1, 12, 0))
	// Confirmed on d(2), paid out on d(1) (below).
	g.PayoutIDRecorded = cycle(9900, 6, 8)

	// The refunds, on d(2) and after.
	g.CreatedRefund = s.RefundCreated(g.RefundCreatedLost, 0, d(2, 11, 0))
	s.RefundPaid(g.CreatedRefund, d(1, 11, 0))
	g.CountedRefund = s.RefundCreated(g.RefundFailedCounted, 1000, d(2, 11, 30))
	s.RefundPaid(g.CountedRefund, d(2, 14, 0))
	s.RefundFailed(g.CountedRefund, d(1, 9, 0))
	g.UncountedRefund = s.RefundCreated(g.RefundFailedUncounted, 1500, d(2, 12, 0))
	s.RefundFailed(g.UncountedRefund, d(1, 9, 30))
	g.UnknownRefund = s.RefundCreated(g.RefundUnknownAction, 500, d(2, 13, 0))
	s.RefundRawAction(g.UnknownRefund, GoCardlessUnknownRefundAction, d(0, 10, 0))

	// The late failures after the payout, debited from the next payout,
	// which pays PayoutIDRecorded out.
	s.Fail(g.LateFailureRecorded, d(2, 5, 40))
	s.Fail(g.LateFailureLost, d(2, 5, 41))
	g.RecordedPayout = s.PayOut(d(1, 7, 0), g.PayoutIDRecorded)
	g.LateFailureDebitPayout = g.RecordedPayout
	s.LateFailureSettled(g.LateFailureRecorded, d(1, 7, 0), g.RecordedPayout)
	s.LateFailureSettled(g.LateFailureLost, d(1, 7, 0), g.RecordedPayout)

	// The last payout pays the retried payment and credits the refund
	// that failed back.
	g.RetriedPayout = s.PayOut(d(0, 7, 0), g.SuccessPlusRetried)
	s.RefundFundsReturned(g.CountedRefund, d(0, 7, 0), g.RetriedPayout)

	// Long ago, before Start: created on d(12) (charge date d(8), four
	// working days on), submitted the next working day and collected on
	// the charge date's morning, after charge_date 00:00 UTC.
	g.StuckConfirmed = s.CreatePayment(5200, "GBP", d(12, 9, 30))
	s.Submit(g.StuckConfirmed, d(11, 15, 5))
	g.ConfirmedAt = d(8, 6, 10)
	s.Confirm(g.StuckConfirmed, g.ConfirmedAt)
	g.StuckPaidOut = s.CreatePayment(7300, "GBP", d(12, 9, 45))
	s.Submit(g.StuckPaidOut, d(11, 15, 20))
	s.Confirm(g.StuckPaidOut, d(8, 6, 20))
	g.StuckPaidOutAt = d(8, 7, 0)
	g.StuckPayout = s.PayOut(g.StuckPaidOutAt, g.StuckPaidOut)
	g.StuckBefore = g.Start.Add(-time.Hour)

	crafted := g.Payments()
	mine := map[string]bool{}
	for _, id := range crafted {
		mine[id] = true
	}
	type rule struct{ pm, eventType string }
	lostTypes := map[rule]bool{
		{g.LateFailureLost, "payments.failed"}:                              true,
		{g.LateFailureLost, "payments.late_failure_settled"}:                true,
		{g.RefundCreatedLost, "refunds.created"}:                            true,
		{g.RefundFailedUncounted, "refunds.created"}:                        true,
		{g.RefundFailedUncounted, "refunds.failed"}:                         true,
		{g.RefundUnknownAction, "refunds." + GoCardlessUnknownRefundAction}: true,
		{g.PayoutIDRecorded, "payments.paid_out"}:                           true,
		{g.StuckConfirmed, "payments.confirmed"}:                            true,
		{g.StuckPaidOut, "payments.paid_out"}:                               true,
	}
	retriedAt := d(4, 5, 0) // SuccessPlusRetried: everything from the resubmission on was lost
	for _, sd := range s.Deliveries() {
		of := ""
		for _, f := range sd.Facts {
			switch {
			case mine[f.PaymentID]:
				of = f.PaymentID
			case f.PaymentID == "" && sd.EventType == "creditors.bounced_payout" && f.PayoutID == g.BouncedPayout:
				of = g.PayoutBounced
			}
		}
		if of == "" {
			continue
		}
		dl := webhooksim.GoCardless([]gcfake.Delivery{sd})[0]
		g.Sent = append(g.Sent, dl)
		if lostTypes[rule{of, dl.EventType}] || of == g.SuccessPlusRetried && !dl.At.Before(retriedAt) {
			g.Missed++
			continue
		}
		g.Deliveries = append(g.Deliveries, dl)
	}

	settled := func(at time.Time, payout string) Want {
		return Want{State: models.StateSettled, Settled: true, SettledAt: at, PayoutID: payout}
	}
	with := func(w Want, expl string, kinds ...string) Want {
		w.ExplanationHas = expl
		w.Kinds = slices.Sorted(slices.Values(kinds))
		return w
	}
	const (
		behind   = models.KindBehind + "/" + models.ActionRepaired
		conflict = models.KindConflict + "/" + models.ActionRefused
		unknown  = models.KindUnknownStatus + "/" + models.ActionReported
	)
	day := settled(d(3, 7, 0), g.DayPayout)
	failedAfterPayout := day
	failedAfterPayout.State = models.StateFailed
	refunded := func(w Want, amount int64) Want {
		w.AmountRefunded = amount
		return w
	}
	fullyRefunded := refunded(day, 2000)
	fullyRefunded.State = models.StateRefunded
	g.Expect = map[string]Want{
		// gocardless.md "Success+": a failure with will_attempt_retry true
		// is not final, and the retry "will go through the normal payment
		// flow": the row follows the retry to paid_out (links.payout
		// RetriedPayout), repaired; the resubmission after a retried
		// failure is no conflict for a row that is not failed.
		g.SuccessPlusRetried: with(settled(d(0, 7, 0), g.RetriedPayout), "settled", behind),
		// gocardless.md "Late failures", DESIGN settled → failed: a row
		// already failed matches GoCardless (status failed); the paid_out
		// in the window records its payout, which the late failure's debit
		// does not move. No item.
		g.LateFailureRecorded: with(failedAfterPayout, ""),
		// The same, the failure lost: behind to failed, dated by the failed
		// event, not by late_failure_settled (which only stands in when
		// the failure lies before the window).
		g.LateFailureLost: with(failedAfterPayout, "failed", behind),
		// gocardless.md "Refunds": amount_refunded is raised when a refund
		// is created; a refund for the whole amount makes the payment
		// refunded, and the item says which amount_refunded GoCardless
		// keeps (detail amount_refunded_counts).
		g.RefundCreatedLost: with(fullyRefunded, "from its creation", behind),
		// A refund the row counted failed: never lowered, a conflict naming
		// the refund (failed and funds_returned fold into one item).
		g.RefundFailedCounted: with(refunded(day, 1000), g.CountedRefund, conflict),
		// GoCardless's amount_refunded still counts the failed refund (no
		// source says it is ever lowered; the fake never lowers it), and
		// reconciler follows GoCardless's meaning of it: the run raises the
		// row to GoCardless's 1500 (behind, repaired, as verify then
		// agrees), so the row now counts a refund that failed, and the
		// conflict for "a refund the row counted" applies too. The docs'
		// "no item for a refund the row never counted" is about the row as
		// the run leaves it, which does count it: the customer was not
		// refunded and a person must know.
		g.RefundFailedUncounted: with(refunded(day, 1500), g.UncountedRefund, behind, conflict),
		// gocardless.md: any other refunds action is an unknown_status item
		// naming it; the created refund (delivered) stays counted.
		g.RefundUnknownAction: with(refunded(day, 500), GoCardlessUnknownRefundAction, unknown),
		// gocardless.md "Payouts": a payout that bounced after paid moves
		// no payment back; a conflict naming the payout, the row settled
		// with settled_at and payout_id still naming it (recorded by the
		// run from the paid_out event's links.payout).
		g.PayoutBounced: with(settled(d(2, 7, 0), g.BouncedPayout), g.BouncedPayout, conflict),
		// links.payout on paid_out names the payout; the lost paid_out is
		// repaired with it.
		g.PayoutIDRecorded: with(settled(d(1, 7, 0), g.RecordedPayout), "settled", behind),
		// gocardless.md "The stuck path": the re-fetched confirmed payment
		// is dated by its own confirmed event, never by charge_date 00:00.
		g.StuckConfirmed: with(Want{State: models.StateCaptured}, "captured", behind),
		// The same for a paid_out payment: settled at its paid_out event,
		// with the payment's links.payout.
		g.StuckPaidOut: with(settled(g.StuckPaidOutAt, g.StuckPayout), "settled", behind),
	}
	g.StateAt = map[string]time.Time{
		g.SuccessPlusRetried:    d(0, 7, 0),
		g.LateFailureRecorded:   d(2, 5, 40),
		g.LateFailureLost:       d(2, 5, 41),
		g.RefundCreatedLost:     d(2, 11, 0),
		g.RefundFailedCounted:   d(3, 7, 0),
		g.RefundFailedUncounted: d(3, 7, 0),
		g.RefundUnknownAction:   d(3, 7, 0),
		g.PayoutBounced:         d(2, 7, 0),
		g.PayoutIDRecorded:      d(1, 7, 0),
		g.StuckConfirmed:        g.ConfirmedAt,
		g.StuckPaidOut:          g.StuckPaidOutAt,
	}
	return g
}

// Payments are the crafted payments, in creation order.
func (g *GoCardlessBehaviour) Payments() []string {
	return []string{g.SuccessPlusRetried, g.LateFailureRecorded, g.LateFailureLost, g.RefundCreatedLost, g.RefundFailedCounted,
		g.RefundFailedUncounted, g.RefundUnknownAction, g.PayoutBounced, g.PayoutIDRecorded, g.StuckConfirmed, g.StuckPaidOut}
}

// Names names each crafted payment by its behaviour, as the fields do.
func (g *GoCardlessBehaviour) Names() map[string]string {
	return map[string]string{
		g.SuccessPlusRetried: "SuccessPlusRetried", g.LateFailureRecorded: "LateFailureRecorded", g.LateFailureLost: "LateFailureLost",
		g.RefundCreatedLost: "RefundCreatedLost", g.RefundFailedCounted: "RefundFailedCounted", g.RefundFailedUncounted: "RefundFailedUncounted",
		g.RefundUnknownAction: "RefundUnknownAction", g.PayoutBounced: "PayoutBounced", g.PayoutIDRecorded: "PayoutIDRecorded",
		g.StuckConfirmed: "StuckConfirmed", g.StuckPaidOut: "StuckPaidOut",
	}
}

// SeedLocal delivers what the webhooks delivered (up to now), as the
// application's worker would.
func (g *GoCardlessBehaviour) SeedLocal(ctx context.Context, db *gorm.DB, now time.Time) error {
	return SeedGoCardlessDeliveries(ctx, db, g.Deliveries, now)
}

// SeedGoCardlessDeliveries delivers ds (up to now, in their order, a
// duplicate doing nothing) as the application's webhook worker would.
func SeedGoCardlessDeliveries(ctx context.Context, db *gorm.DB, ds []webhooksim.Delivery, now time.Time) error {
	_, _, err := webhooksim.Seed(ctx, db, "gocardless", ds, now, func(int, webhooksim.Delivery) bool { return true })
	return err
}
