package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// Fetch implements reconcile.Provider: the stuck-payment path. It re-reads
// each PaymentIntent with its latest charge, the charge's refunds and its
// balance transaction, and finishes what the row waits for
// (docs/providers/stripe.md, section 18):
//
//   - each state is dated from the most specific field the objects carry:
//     canceled_at; the charge's created for an authorisation; the capture's
//     balance transaction's created for a capture (a charge has no
//     captured_at, and its created is the authorisation); a refund's created;
//   - a captured charge is settled: on an account that pays out by hand when
//     its balance transaction is available (at available_on); otherwise when
//     a paid payout whose balance transactions Stripe has finished listing
//     contains it (at the payout's arrival_date);
//   - a disputed charge's newest dispute is read: lost is a chargeback, open
//     is a notice for support, won after a local chargeback a revert.
//
// Each payment costs one request, plus one for its disputes when the charge
// is disputed; payouts are read once per call however many payments they
// paid. The engine bounds the call by stuck_limit and records its requests.
func (p *Provider) Fetch(ctx context.Context, fp reconcile.FetchParams) ([]reconcile.Change, error) {
	sched, err := p.payoutSchedule(ctx, fp.Account)
	if err != nil {
		return nil, err
	}
	f := &fetcher{p: p, v: p.Verifier(), account: fp.Account, sched: sched, candidates: map[int64][]string{}}
	var out []reconcile.Change
	for _, id := range fp.ProviderIDs {
		cs, err := f.one(ctx, id)
		if err != nil {
			return out, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

type fetcher struct {
	p       *Provider
	v       *Verifier // its payout cache: each payout is read once per call
	account string
	sched   schedule
	// candidates are the paid payouts created on or after a day, by that
	// day (Unix seconds at 00:00 UTC), newest first.
	candidates map[int64][]string
	// until, when set, reads the objects as they stood before it (object
	// listing, listing.go): a fact dated at or after it is left out, and an
	// automatic account's settlement is left to the window's payouts.
	until time.Time
}

// before reports whether t is before the fetcher's cap (always, uncapped).
func (f *fetcher) before(t time.Time) bool { return f.until.IsZero() || t.Before(f.until) }

// payoutSearch is how long after a charge's funds became available the
// payout that paid them out is looked for: Stripe's schedules pay daily,
// weekly or monthly.
const payoutSearch = 35 * 24 * time.Hour

func (f *fetcher) one(ctx context.Context, id string) ([]reconcile.Change, error) {
	pi, err := f.p.getPI(ctx, f.account, id, "latest_charge.refunds", "latest_charge.balance_transaction")
	if se := (*stripego.Error)(nil); errors.As(err, &se) && se.HTTPStatusCode == http.StatusBadRequest {
		// A server that will not expand the balance transaction (an older
		// fake): the payment is read as before, dated and refunded from the
		// charge alone, and not settled by this path.
		f.p.log.Warn("stripe refused to expand the charge's balance transaction; re-reading without it", "provider_id", id, "error", translate(err))
		pi, err = f.p.getPI(ctx, f.account, id, "latest_charge.refunds")
	}
	if err != nil {
		if notFound(err) {
			f.p.log.Warn("payment not found at stripe", "provider_id", id)
			return nil, nil
		}
		return nil, fmt.Errorf("get stripe payment intent %s: %w", id, translate(err))
	}
	if pi.ID != id {
		return nil, fmt.Errorf("get stripe payment intent %s: the answer is for %q", id, pi.ID)
	}
	return f.changes(ctx, pi)
}

// changes maps a PaymentIntent read with its latest charge, the charge's
// refunds and balance transaction (by id, or listed), and reads what else
// the payment needs: its settlement and, when its charge is disputed, its
// newest dispute.
func (f *fetcher) changes(ctx context.Context, pi *stripego.PaymentIntent) ([]reconcile.Change, error) {
	id := pi.ID
	if err := f.completeRefunds(ctx, pi); err != nil { // listing.go
		return nil, err
	}
	raw, err := json.Marshal(pi)
	if err != nil {
		return nil, fmt.Errorf("encode payment intent %s: %w", id, err)
	}
	out := objectChanges(pi, raw, f.until)
	if len(out) == 0 || out[0].Unknown {
		return out, nil
	}
	ch := pi.LatestCharge
	if ch == nil || !ch.Captured {
		return out, nil
	}
	if st := out[0].State; st == models.StateCaptured || st == models.StateRefunded {
		s, err := f.settlement(ctx, pi, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
	}
	if ch.Disputed {
		d, err := f.v.newestDispute(ctx, f.account, id)
		if unsupported(err) {
			f.p.log.Warn("stripe did not list the payment's disputes", "provider_id", id, "error", err)
			d, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
		if c, ok := fetchedDispute(pi, d, raw); ok && f.before(c.At) {
			out = append(out, c)
		}
	}
	return out, nil
}

// settlement finds the settlement of a captured charge, if it has one yet.
func (f *fetcher) settlement(ctx context.Context, pi *stripego.PaymentIntent, raw json.RawMessage) ([]reconcile.Change, error) {
	bt := pi.LatestCharge.BalanceTransaction
	if bt == nil || bt.Status != stripego.BalanceTransactionStatusAvailable || bt.AvailableOn == 0 {
		return nil, nil // funds still pending: nothing can have paid them out
	}
	mk := func(t time.Time, payout string) reconcile.Change {
		c := reconcile.Change{ProviderID: pi.ID, State: models.StateSettled, At: t, PayoutID: payout,
			Amount: pi.Amount, Currency: string(pi.Currency), Inferred: true, Payload: raw}
		c.RawStatus, c.EventType = "available", "reconciler.balance_transaction.available"
		if payout != "" {
			c.RawStatus, c.EventType = "paid_out", "reconciler.payout.paid"
		}
		c.EventID = reconcile.SyntheticEventID(pi.ID, models.StateSettled, t)
		return c
	}
	if f.sched.manual {
		if !f.before(at(bt.AvailableOn)) {
			return nil, nil
		}
		return []reconcile.Change{mk(at(bt.AvailableOn), "")}, nil
	}
	if !f.until.IsZero() {
		return nil, nil // a listing reads the window's payouts instead (listing.go)
	}
	day := bt.AvailableOn - bt.AvailableOn%86400
	ids, err := f.paidPayoutsFrom(ctx, day)
	if err != nil {
		return nil, err
	}
	for i := len(ids) - 1; i >= 0; i-- { // oldest first: the first payout after availability
		pv, err := f.v.payout(ctx, f.account, ids[i])
		if err != nil {
			return nil, err
		}
		if pv.pis[pi.ID] && pv.status == string(stripego.PayoutStatusPaid) {
			return []reconcile.Change{mk(at(pv.arrival), ids[i])}, nil
		}
	}
	return nil, nil
}

// paidPayoutsFrom lists the paid payouts created from day for payoutSearch
// (GET /v1/payouts?status=paid&created[gte]=…), once per day per call.
func (f *fetcher) paidPayoutsFrom(ctx context.Context, day int64) ([]string, error) {
	if ids, ok := f.candidates[day]; ok {
		return ids, nil
	}
	params := &stripego.PayoutListParams{
		ListParams:   listParams(ctx, f.account, 100),
		Status:       stripego.String(string(stripego.PayoutStatusPaid)),
		CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: day, LesserThan: day + int64(payoutSearch/time.Second)},
	}
	it := f.p.api.Payouts.List(params)
	var ids []string
	for it.Next() {
		if po := it.Payout(); po != nil && po.ID != "" && po.Automatic {
			ids = append(ids, po.ID)
		}
	}
	if err := it.Err(); err != nil {
		if !unsupported(err) {
			return nil, fmt.Errorf("list stripe payouts: %w", translate(err))
		}
		f.p.log.Warn("stripe did not list paid payouts; the capture is settled by a later payout.paid", "error", translate(err))
		ids = nil
	}
	f.candidates[day] = ids
	return ids, nil
}

// fetchedDispute maps the newest dispute of a re-fetched payment.
func fetchedDispute(pi *stripego.PaymentIntent, d *stripego.Dispute, raw json.RawMessage) (reconcile.Change, bool) {
	if d == nil {
		return reconcile.Change{}, false
	}
	// A dispute carries no time of closing: the newest provider time its
	// objects show (its creation, a movement of funds for it, a refund of
	// the charge) is the nearest, and is marked inferred. An event that
	// shows the same state dates it instead (reconcile.Decide).
	t := at(d.Created)
	for _, bt := range d.BalanceTransactions {
		if bt != nil && at(bt.Created).After(t) {
			t = at(bt.Created)
		}
	}
	if ch := pi.LatestCharge; ch != nil && ch.Refunds != nil {
		for _, r := range ch.Refunds.Data {
			if r != nil && at(r.Created).After(t) {
				t = at(r.Created)
			}
		}
	}
	ld := leanDispute{ID: d.ID, Status: string(d.Status), Amount: d.Amount, Currency: string(d.Currency), Reason: string(d.Reason), PaymentIntent: expandable(pi.ID)}
	c := disputeChange(reconcile.Change{At: t, Inferred: true, Payload: raw, EventType: "reconciler.dispute." + string(d.Status)}, "", ld, pinnedDate)
	if c.State.Valid() {
		c.EventID = reconcile.SyntheticEventID(pi.ID, c.State, t)
	}
	return c, true
}

// objectChanges maps a PaymentIntent read with its latest charge, the
// charge's refunds and its balance transaction to changes with
// deterministic event ids and the most specific provider time the objects
// carry for each state.
//
// With until zero the objects are read as they are now (the stuck path).
// Otherwise they are read as they stood before until (object listing): a
// state dated at or after until is left out, and the payment shows instead
// the state its objects date before it (authorised at the charge's created
// for a manual capture, else created at the intent's); refunds count only
// those created before until, so the charge's view of refunds is as of
// until, not current.
func objectChanges(pi *stripego.PaymentIntent, raw json.RawMessage, until time.Time) []reconcile.Change {
	capped := !until.IsZero()
	before := func(t time.Time) bool { return !capped || t.Before(until) }
	st, ok := PaymentIntentState(string(pi.Status))
	when := at(pi.Created)
	ch := pi.LatestCharge
	switch {
	case st == models.StateCanceled && pi.CanceledAt > 0:
		when = at(pi.CanceledAt)
	case st == models.StateAuthorised && ch != nil && ch.Created > 0:
		when = at(ch.Created)
	case st == models.StateCaptured && ch != nil:
		// A charge has no captured_at: its balance transaction is created
		// when the money is captured; the charge itself at authorisation.
		if bt := ch.BalanceTransaction; bt != nil && bt.Created > 0 {
			when = at(bt.Created)
		} else if ch.Created > 0 {
			when = at(ch.Created)
		}
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
	if !before(when) {
		if !before(at(pi.Created)) {
			return nil
		}
		// The intent reached its status at or after until. Before it, a
		// manual capture whose charge existed was authorised (the charge
		// is created at confirmation); anything else was still created.
		// Not a snapshot: the objects say nothing else about that time.
		c := mk(models.StateCreated, at(pi.Created))
		if ch != nil && ch.Created > 0 && before(at(ch.Created)) && st != models.StateAuthorised &&
			pi.CaptureMethod == stripego.PaymentIntentCaptureMethodManual {
			c = mk(models.StateAuthorised, at(ch.Created))
		}
		c.Snapshot, c.RawStatus = false, string(pi.Status)+" at or after the window's end"
		return []reconcile.Change{c}
	}
	out := []reconcile.Change{mk(st, when)}
	if st != models.StateCaptured || ch == nil || !ch.Captured {
		return out
	}
	// The charge is the provider's view of refunds: current when the
	// objects are read as they are now; as of until without the refunds
	// created since.
	lc := chargeOf(ch)
	refunded := capturedRefunds(&lc, pinnedDate)
	fully := ch.Refunded
	if later := refundedSince(ch, until); capped && later > 0 {
		refunded = max(refunded-later, 0)
		fully = refunded > 0 && refunded >= lc.captured()
	}
	out[0].View, out[0].ViewCurrent, out[0].Refunded = true, !capped, fully
	out[0].AmountRefunded = refunded
	out[0].AmountCaptured = partialCapture(&lc)
	if refunded > 0 && (fully || refunded >= lc.captured()) {
		rt := when
		if ch.Refunds != nil {
			for _, r := range ch.Refunds.Data {
				if r.Status == stripego.RefundStatusSucceeded && before(at(r.Created)) && at(r.Created).After(rt) {
					rt = at(r.Created)
				}
			}
		}
		c := mk(models.StateRefunded, rt)
		c.AmountRefunded = refunded
		c.View, c.ViewCurrent, c.Refunded = true, !capped, true
		out = append(out, c)
	}
	return out
}

// refundedSince is how much of the charge's amount_refunded the refunds
// created at or after until make up: those not failed or canceled, which
// amount_refunded no longer counts (section 19 of docs/providers/stripe.md).
// 0 for a zero until.
func refundedSince(ch *stripego.Charge, until time.Time) int64 {
	if until.IsZero() || ch.Refunds == nil {
		return 0
	}
	var n int64
	for _, r := range ch.Refunds.Data {
		if r == nil || at(r.Created).Before(until) {
			continue
		}
		switch r.Status {
		case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		default:
			n += r.Amount
		}
	}
	return n
}

// unsupported reports an answer that says the request itself is not served
// (400, 404, 405, 422): an optional look-up is then skipped with a warning.
// Authentication, rate limits and server errors never are.
func unsupported(err error) bool {
	var se *stripego.Error
	if !errors.As(err, &se) {
		var ae *APIError
		if !errors.As(err, &ae) {
			return false
		}
		se = &stripego.Error{HTTPStatusCode: ae.Status}
	}
	switch se.HTTPStatusCode {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// getPI reads one PaymentIntent of account ("" for the platform) with the
// given expansions.
func (p *Provider) getPI(ctx context.Context, account, id string, expand ...string) (*stripego.PaymentIntent, error) {
	params := &stripego.PaymentIntentParams{Params: stripego.Params{Context: ctx}}
	if account != "" {
		params.SetStripeAccount(account)
	}
	for _, e := range expand {
		params.AddExpand(e)
	}
	return p.api.PaymentIntents.Get(id, params)
}
