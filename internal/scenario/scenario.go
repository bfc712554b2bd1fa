// Package scenario builds a provider account and a local database "as the
// webhooks left it" with every kind of drift: the demo, the example reports
// and the tests share it.
package scenario

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

// Stripe is a generated Stripe account with every drift kind crafted in.
type Stripe struct {
	Acct *stripefake.Account
	// The crafted payments, by the drift they must produce.
	MissingLocal, Behind, Conflict, Stale, Mismatch, UnknownStatus, OutOfOrder, LocalAhead string
	// Deliveries is what the webhooks delivered (in delivery order) and
	// Missed how many deliveries were lost.
	Deliveries []webhooksim.Delivery
	Missed     int
}

// Options sizes the scenario.
type Options struct {
	Payments  int   // generated background payments (realistic histories)
	Seed      int64 // generator seed
	MissEvery int   // the webhook of every Nth delivery is lost (0: none)
}

// NewStripe builds the account in acct, as of now.
func NewStripe(acct *stripefake.Account, now time.Time, o Options) *Stripe {
	h := func(x float64) time.Time { return now.Add(time.Duration(x * float64(time.Hour))).Truncate(time.Second) }
	if o.Payments > 0 {
		acct.Generate(stripefake.GenOptions{Payments: o.Payments, Start: h(-20), End: h(-0.5), Seed: o.Seed})
	}
	s := &Stripe{Acct: acct}
	// A payment whose webhooks never arrived.
	s.MissingLocal = acct.CreatePayment(4200, "gbp", false, h(-5))
	acct.Capture(s.MissingLocal, h(-5).Add(time.Minute))
	// Authorised locally; the capture webhook was lost.
	s.Behind = acct.CreatePayment(1999, "gbp", true, h(-6))
	acct.Authorise(s.Behind, h(-6).Add(time.Minute))
	acct.Capture(s.Behind, h(-3))
	// Captured at the provider, canceled locally (someone canceled by hand).
	s.Conflict = acct.CreatePayment(7500, "gbp", false, h(-7))
	acct.Capture(s.Conflict, h(-7).Add(time.Minute))
	// Captured at the provider, but the row's authorisation was recorded
	// with a later provider time (a clock or a bug): the guard refuses the
	// older capture. (A refund against a later settlement is no longer
	// stale: a payout undoes no refund.)
	s.Stale = acct.CreatePayment(1250, "gbp", true, h(-9))
	acct.Authorise(s.Stale, h(-9).Add(time.Minute))
	acct.Capture(s.Stale, h(-4))
	// Recorded locally with another amount.
	s.Mismatch = acct.CreatePayment(3000, "gbp", false, h(-8))
	acct.Capture(s.Mismatch, h(-8).Add(time.Minute))
	// A status the mapping does not know.
	s.UnknownStatus = acct.CreatePayment(500, "gbp", true, h(-10))
	acct.Authorise(s.UnknownStatus, h(-10).Add(time.Minute))
	acct.SetRawStatus(s.UnknownStatus, "requires_reauthorization", "payment_intent.processing", h(-2))
	// Webhooks delivered out of order: the payout before the refund.
	s.OutOfOrder = acct.CreatePayment(6400, "gbp", false, h(-60))
	acct.Capture(s.OutOfOrder, h(-60).Add(time.Minute))
	acct.Refund(s.OutOfOrder, 1400, h(-12))
	// Local state ahead of the provider: a chargeback recorded locally for
	// a dispute the provider says was won.
	s.LocalAhead = acct.CreatePayment(8800, "gbp", false, h(-30))
	acct.Capture(s.LocalAhead, h(-30).Add(time.Minute))
	dp := acct.Dispute(s.LocalAhead, h(-11))
	acct.CloseDispute(dp, "won", h(-1))

	crafted := map[string]bool{s.MissingLocal: true, s.Behind: true, s.Conflict: true, s.Stale: true, s.Mismatch: true, s.UnknownStatus: true, s.OutOfOrder: true, s.LocalAhead: true}
	all := webhooksim.Stripe(acct.Deliveries())
	var outOfOrder []webhooksim.Delivery
	for i, d := range all {
		mine := ""
		for _, f := range d.Facts {
			if crafted[f.PaymentID] {
				mine = f.PaymentID
			}
		}
		switch {
		case mine == s.MissingLocal,
			mine == s.Behind && d.EventType != "payment_intent.created" && d.EventType != "payment_intent.amount_capturable_updated",
			mine == s.Stale && (d.EventType == "payment_intent.succeeded" || d.EventType == "charge.captured"),
			mine == s.UnknownStatus && d.EventType == "payment_intent.processing":
			s.Missed++
		case mine == s.OutOfOrder && d.EventType == "charge.refunded":
			outOfOrder = append(outOfOrder, d) // arrives after everything else
		case mine == "" && o.MissEvery > 0 && i%o.MissEvery == o.MissEvery/2:
			s.Missed++
		default:
			s.Deliveries = append(s.Deliveries, d)
		}
	}
	s.Deliveries = append(s.Deliveries, outOfOrder...)
	return s
}

// SeedLocal delivers the webhooks that arrived, then makes the local edits
// a person or a bug would have made.
func (s *Stripe) SeedLocal(ctx context.Context, db *gorm.DB, now time.Time) error {
	if _, _, err := webhooksim.Seed(ctx, db, "stripe", s.Deliveries, now, func(int, webhooksim.Delivery) bool { return true }); err != nil {
		return err
	}
	h := func(x float64) time.Time { return now.Add(time.Duration(x * float64(time.Hour))).Truncate(time.Second) }
	edits := []struct {
		id   string
		cols map[string]any
	}{
		{s.Conflict, map[string]any{"state": "canceled", "source_updated_at": h(-6.9)}},
		{s.Stale, map[string]any{"state": "authorised", "source_updated_at": h(-2)}},
		{s.Mismatch, map[string]any{"amount": 2999}},
		{s.LocalAhead, map[string]any{"state": "chargeback", "source_updated_at": h(-1.5)}},
	}
	for _, e := range edits {
		res := editPayments(ctx, db, "provider = 'stripe' AND provider_id = ?", []any{e.id}, e.cols)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("scenario: payment %s was not seeded", e.id)
		}
	}
	return nil
}
