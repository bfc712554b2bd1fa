package scenario

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/workdays"
)

// GoCardless is a generated GoCardless creditor (Direct Debit over Bacs)
// with every drift kind crafted in, its payments moving on UK working days.
type GoCardless struct {
	Srv *gcfake.Server
	// The crafted payments, by the drift they must produce.
	MissingLocal string // every webhook lost: missing_local, repaired
	Submitted    string // payments.submitted lost: behind (created → authorised)
	Confirmed    string // payments.confirmed lost: behind (authorised → captured)
	PaidOut      string // payments.paid_out lost: behind (captured → settled)
	LateFailure  string // a late failure before the payout, lost: behind (captured → failed)
	// FailedAfterPayout failed late after it was paid out; the failure
	// arrived, the payout webhook was lost: the row is already where
	// GoCardless's chain ends (settled → failed is an allowed edge): in
	// sync, no item.
	FailedAfterPayout string
	ChargedBack       string // payments.charged_back lost: behind (settled → chargeback)
	// ChargebackCancelled was charged back, then the chargeback was
	// cancelled: a revert, a conflict, refused.
	ChargebackCancelled string
	Refunded            string // refunds.created lost (GoCardless counts a refund from its creation): behind (settled → refunded)
	// Stale was confirmed at GoCardless (the webhook lost), but its row's
	// submission was recorded with a later time: the guard refuses it.
	Stale         string
	Mismatch      string // recorded locally with another amount: reported
	UnknownStatus string // a status the mapping does not know: reported
	OutOfOrder    string // paid_out delivered before confirmed: in sync
	// Start is the time of the oldest event: a window from before it covers
	// the scenario.
	Start time.Time
	// Deliveries is what the webhooks delivered (in delivery order) and
	// Missed how many deliveries were lost.
	Deliveries []webhooksim.Delivery
	Missed     int
}

// NewGoCardless builds the creditor in srv, as of now: a Bacs cycle (created,
// submitted the next working day, confirmed three working days later, paid
// out the next working day) for each crafted payment, on the England and
// Wales working days before today, so every event is in the past whatever
// the day of the week. o.Payments background payments are generated over
// the same span.
func NewGoCardless(srv *gcfake.Server, now time.Time, o Options) *GoCardless {
	day := workingDayClock(now, 123*time.Millisecond)
	g := &GoCardless{Srv: srv, Start: day(8, 8, 0)}
	if o.Payments > 0 {
		srv.Generate(gcfake.GenOptions{Payments: o.Payments, Start: g.Start, End: now.Add(-30 * time.Minute).Truncate(time.Second), Seed: o.Seed})
	}
	// cycle creates a payment k working days before the last one and moves it
	// through steps of its Bacs cycle: 1 submitted, 2 confirmed, 3 paid out.
	cycle := func(amount int64, k, steps int) string {
		pm := srv.CreatePayment(amount, "GBP", day(k, 9, 30))
		if steps >= 1 {
			srv.Submit(pm, day(k-1, 15, 5))
		}
		if steps >= 2 {
			srv.Confirm(pm, day(k-4, 6, 10))
		}
		if steps >= 3 {
			srv.PayOut(day(k-5, 7, 0), pm)
		}
		return pm
	}
	g.MissingLocal = cycle(4200, 5, 2)
	g.Submitted = cycle(1500, 1, 1)
	g.Confirmed = cycle(2750, 4, 2)
	g.PaidOut = cycle(9900, 6, 3)
	g.LateFailure = cycle(3600, 5, 2)
	srv.Fail(g.LateFailure, day(0, 4, 20)) // on the payout day, before the payout
	g.FailedAfterPayout = cycle(12000, 7, 3)
	srv.Fail(g.FailedAfterPayout, day(0, 5, 40)) // the bank reversed it after GoCardless paid it out
	g.ChargedBack = cycle(6500, 7, 3)
	srv.ChargeBack(g.ChargedBack, day(1, 8, 45))
	g.ChargebackCancelled = cycle(5400, 8, 3)
	srv.ChargeBack(g.ChargebackCancelled, day(2, 8, 15))
	srv.CancelChargeback(g.ChargebackCancelled, day(0, 10, 0))
	g.Refunded = cycle(2000, 8, 3)
	srv.Refund(g.Refunded, 2000, day(2, 11, 0)) // paid a day later
	g.Stale = cycle(1250, 8, 2)
	g.Mismatch = cycle(3000, 6, 2)
	g.UnknownStatus = cycle(800, 3, 1)
	srv.SetRawStatus(g.UnknownStatus, "under_review", "placed_under_review", day(0, 13, 0))
	g.OutOfOrder = cycle(7000, 7, 3)

	type rule struct{ pm, eventType string }
	missed := map[rule]bool{
		{g.Submitted, "payments.submitted"}:               true,
		{g.Confirmed, "payments.confirmed"}:               true,
		{g.PaidOut, "payments.paid_out"}:                  true,
		{g.LateFailure, "payments.failed"}:                true,
		{g.FailedAfterPayout, "payments.paid_out"}:        true,
		{g.ChargedBack, "payments.charged_back"}:          true,
		{g.Refunded, "refunds.created"}:                   true,
		{g.Stale, "payments.confirmed"}:                   true,
		{g.UnknownStatus, "payments.placed_under_review"}: true,
	}
	crafted := map[string]bool{}
	for _, pm := range []string{g.MissingLocal, g.Submitted, g.Confirmed, g.PaidOut, g.LateFailure, g.FailedAfterPayout, g.ChargedBack,
		g.ChargebackCancelled, g.Refunded, g.Stale, g.Mismatch, g.UnknownStatus, g.OutOfOrder} {
		crafted[pm] = true
	}
	all := webhooksim.GoCardless(srv.Deliveries())
	var outOfOrder []webhooksim.Delivery
	for i, d := range all {
		mine := ""
		for _, f := range d.Facts {
			if crafted[f.PaymentID] {
				mine = f.PaymentID
			}
		}
		switch {
		case mine == g.MissingLocal, mine != "" && missed[rule{mine, d.EventType}]:
			g.Missed++
		case mine == g.OutOfOrder && d.EventType == "payments.confirmed":
			outOfOrder = append(outOfOrder, d) // arrives after everything else
		case mine == "" && o.MissEvery > 0 && i%o.MissEvery == o.MissEvery/2:
			g.Missed++
		default:
			g.Deliveries = append(g.Deliveries, d)
		}
	}
	g.Deliveries = append(g.Deliveries, outOfOrder...)
	return g
}

// SeedLocal delivers the webhooks that arrived, then makes the local edits
// a person or a bug would have made.
func (g *GoCardless) SeedLocal(ctx context.Context, db *gorm.DB, now time.Time) error {
	if _, _, err := webhooksim.Seed(ctx, db, "gocardless", g.Deliveries, now, func(int, webhooksim.Delivery) bool { return true }); err != nil {
		return err
	}
	// The stale payment's submission was recorded after its confirmation.
	var confirmed time.Time
	for _, d := range webhooksim.GoCardless(g.Srv.Deliveries()) {
		for _, f := range d.Facts {
			if f.PaymentID == g.Stale && d.EventType == "payments.confirmed" {
				confirmed = f.At
			}
		}
	}
	if confirmed.IsZero() {
		return fmt.Errorf("scenario: payment %s was never confirmed", g.Stale)
	}
	edits := []struct {
		id   string
		cols map[string]any
	}{
		{g.Stale, map[string]any{"state": "authorised", "source_updated_at": confirmed.Add(2 * time.Hour)}},
		{g.Mismatch, map[string]any{"amount": 2990}},
	}
	for _, e := range edits {
		res := editPayments(ctx, db, "provider = 'gocardless' AND provider_id = ?", []any{e.id}, e.cols)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("scenario: payment %s was not seeded", e.id)
		}
	}
	return nil
}

// workingDayClock returns day(k, h, m): k UK working days before the last
// working day before now, at h:m London time plus ms (GoCardless timestamps
// carry milliseconds).
func workingDayClock(now time.Time, ms time.Duration) func(k, h, m int) time.Time {
	cal := workdays.EnglandAndWales()
	london := cal.AddWorkingDays(now, -1).Location()
	return func(k, h, m int) time.Time {
		d := cal.AddWorkingDays(now, -(k + 1))
		y, mo, dd := d.Date()
		return time.Date(y, mo, dd, h, m, 0, int(ms), london).UTC()
	}
}
