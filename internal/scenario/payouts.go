package scenario

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

// Payouts is an account with several payouts for payout reconciliation
// (reconciler payouts): most reconcile, WrongAmount's amount is not the sum
// of its lines, and once MisnameRow has run the row of Misnamed, a payment
// WrongRows paid out, names Outside, a payout created before the window.
// Unjudged is a payout that cannot be checked (Stripe: still being
// reconciled; GoCardless: its items are gone after six months). The rows
// are the run's to make: run the engine over [Since, Until) first.
type Payouts struct {
	Provider string
	// Since and Until bound the payouts' creation (and every event).
	Since, Until time.Time
	// Reconciled are the payouts that reconcile, oldest first.
	Reconciled             []string
	WrongAmount, WrongRows string
	Misnamed, Outside      string
	Unjudged               string
}

// NewStripePayouts builds the Stripe story in acct, as of now: payouts of
// charges with a refund and a dispute withdrawal swept into later payouts
// (their rows rightly name the first), one whose amount was set 5.00 GBP
// above its transactions, one in progress.
func NewStripePayouts(acct *stripefake.Account, now time.Time) *Payouts {
	h := func(x float64) time.Time { return now.Add(time.Duration(x * float64(time.Hour))).Truncate(time.Second) }
	pay := func(amount int64, at time.Time) string {
		pi := acct.CreatePayment(amount, "gbp", false, at)
		acct.Capture(pi, at.Add(time.Minute))
		return pi
	}
	s := &Payouts{Provider: "stripe", Since: h(-120), Until: now}
	s.Outside = acct.Payout(h(-130), pay(999, h(-131)))
	pi1, pi2 := pay(1200, h(-110)), pay(3400, h(-109))
	s.Reconciled = append(s.Reconciled, acct.Payout(h(-100), pi1, pi2))
	acct.Refund(pi1, 200, h(-90))
	s.Reconciled = append(s.Reconciled, acct.Payout(h(-80), pay(5000, h(-85))))
	acct.WithdrawDisputeFunds(acct.Dispute(pi2, h(-75)), h(-75))
	s.Reconciled = append(s.Reconciled, acct.Payout(h(-70), pay(6100, h(-72))))
	s.WrongAmount = acct.Payout(h(-60), pay(4500, h(-62)))
	acct.SetPayoutAmount(s.WrongAmount, 5000)
	pi6, pi7 := pay(1800, h(-52)), pay(2200, h(-52))
	s.WrongRows, s.Misnamed = acct.Payout(h(-50), pi6, pi7), pi7
	s.Unjudged = acct.PayoutInProgress(h(-40), pay(900, h(-42)), pay(1100, h(-42)))
	s.Reconciled = append(s.Reconciled, acct.Payout(h(-30), pay(650, h(-32))))
	return s
}

// NewGoCardlessPayouts builds the GoCardless story in srv, as of now:
// payouts of collected payments with GoCardless fees, a refund settled in a
// later payout, one whose amount was set 1.00 GBP below its items, and one
// created 200 days ago, whose items GoCardless no longer serves.
func NewGoCardlessPayouts(srv *gcfake.Server, now time.Time) *Payouts {
	d := func(days float64) time.Time {
		return now.Add(time.Duration(days * 24 * float64(time.Hour))).Truncate(time.Millisecond)
	}
	collect := func(amount int64, at time.Time) string {
		pm := srv.CreatePayment(amount, "GBP", at)
		srv.Submit(pm, at.Add(time.Hour))
		srv.Confirm(pm, at.Add(2*time.Hour))
		return pm
	}
	s := &Payouts{Provider: "gocardless", Since: d(-210), Until: now}
	s.Outside = srv.PayOut(d(-215), collect(999, d(-216)))
	s.Unjudged = srv.PayOut(d(-200), collect(600, d(-202)))
	pm1, pm2 := collect(1000, d(-22)), collect(2500, d(-22))
	first := srv.PayOut(d(-20), pm1, pm2)
	srv.AddPayoutFee(first, pm1, 25)
	srv.AddPayoutFee(first, pm2, 45)
	s.Reconciled = append(s.Reconciled, first)
	rf := srv.Refund(pm1, 400, d(-15))
	second := srv.PayOut(d(-12), collect(3000, d(-14)))
	srv.RefundSettled(rf, d(-12), second)
	s.Reconciled = append(s.Reconciled, second)
	s.WrongAmount = srv.PayOut(d(-9), collect(800, d(-11)))
	srv.SetPayoutAmount(s.WrongAmount, 700)
	pm5, pm6 := collect(1500, d(-9)), collect(2000, d(-9))
	s.WrongRows, s.Misnamed = srv.PayOut(d(-7), pm5, pm6), pm6
	pm8 := collect(1200, d(-5))
	last := srv.PayOut(d(-3), pm8)
	srv.AddPayoutFee(last, pm8, 30)
	s.Reconciled = append(s.Reconciled, last)
	return s
}

// MisnameRow makes Misnamed's row name Outside, as a bug in the live
// webhook worker would.
func (s *Payouts) MisnameRow(ctx context.Context, db *gorm.DB) error {
	res := editPayments(ctx, db, "provider = ? AND provider_id = ?", []any{s.Provider, s.Misnamed}, map[string]any{"payout_id": s.Outside})
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("scenario: payment %s has no row (run the engine first)", s.Misnamed)
	}
	return nil
}
