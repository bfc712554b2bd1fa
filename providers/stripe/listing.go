package stripe

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	stripego "github.com/stripe/stripe-go/v76"
	"golang.org/x/sync/errgroup"

	"github.com/reconciler/reconciler/internal/fanin"
	"github.com/reconciler/reconciler/reconcile"
)

// Object listing (DESIGN section 3, path 3; docs/providers/stripe.md,
// section 20): a window older than the event log, or one read on demand, is
// read from the objects themselves, as they stood before the window's end.

var (
	_ reconcile.ObjectLister  = (*Provider)(nil)
	_ reconcile.CurrentLister = (*Verifier)(nil)
)

// listPage is how many objects one list request asks for: Stripe's most.
const listPage = 100

// refetchChunk is how many payments created before a window the listing
// collects from the window's refunds and disputes before it re-reads them;
// duplicates are dropped within a chunk only, so memory stays flat.
const refetchChunk = 100

// span is a window [Since, Until) in the whole seconds Stripe's created
// filters take: created[gte]=since, created[lt]=until (rounded up, so that
// a sub-second end covers its second).
type span struct{ since, until int64 }

func spanOf(lp reconcile.ListParams) span {
	until := lp.Until.Unix()
	if lp.Until.Nanosecond() != 0 {
		until++
	}
	return span{since: lp.Since.Unix(), until: until}
}

func (s span) has(t int64) bool { return t >= s.since && t < s.until }

// split cuts s into at most k consecutive spans of about equal length, in
// whole seconds, newest first (Stripe's order); a span shorter than k
// seconds gives fewer.
func (s span) split(k int) []span {
	n := s.until - s.since
	k = int(min(int64(k), max(n, 1)))
	out := make([]span, 0, k)
	hi := s.until
	for i := k - 1; i >= 0; i-- {
		lo := s.since + n*int64(i)/int64(k)
		out = append(out, span{since: lo, until: hi})
		hi = lo
	}
	return out
}

func (s span) query() *stripego.RangeQueryParams {
	return &stripego.RangeQueryParams{GreaterThanOrEqual: s.since, LesserThan: s.until}
}

// ListObjects implements reconcile.ObjectLister. For the window [Since,
// Until) of the account it lists, each capped at Until (a fact dated at or
// after it is left out; refunds count only those created before it):
//
//   - the PaymentIntents created in the window, 100 a page, with their
//     latest charge's balance transaction and refunds expanded, each mapped
//     as the stuck path maps a re-fetched one (objectChanges) plus its
//     newest dispute when the charge is disputed (one more request); on a
//     manual-payout account a charge available before Until is settled at
//     available_on;
//   - on an automatic account, the payouts arriving in the window
//     (arrival_date, the time a settlement found without an event carries),
//     each read as its payout.paid (or payout.failed, payout.canceled)
//     event would be: its balance transactions, 100 a page, settle every
//     charge they name at its arrival_date, also payments created before
//     the window; on a manual-payout account, the balance transactions
//     that became available in the window instead (settleAvailable);
//   - the refunds and disputes created in the window whose PaymentIntent
//     was created before it: those payments are re-read by id, capped the
//     same way, 100 at a time.
//
// Every change that moves a state has a deterministic event id, every
// change is Inferred, and its Payload is the object it was read from.
// Nothing of a payment's settlement is searched for per payment (the stuck
// path's payout search): the window's payouts say it.
func (p *Provider) ListObjects(ctx context.Context, lp reconcile.ListParams, fn func(reconcile.Page) error) error {
	if !lp.Until.After(lp.Since) {
		return nil
	}
	sched, err := p.payoutSchedule(ctx, lp.Account)
	if err != nil {
		return err
	}
	f := &fetcher{p: p, v: p.Verifier(), account: lp.Account, sched: sched, candidates: map[int64][]string{}, until: lp.Until}
	w := spanOf(lp)
	if !sched.manual && p.latencyBound() {
		// The intents' stretches, the payouts' lists and the older
		// payments' at once: a payment's changes resolve along the state
		// machine, never by the order they come in (docs/model.md), so
		// none need wait for the intents.
		parts := append(p.intentParts(f, w), p.payoutParts(f, w, p.aheadDepth())...)
		parts = append(parts, p.olderPart(f, w))
		return fanin.Run(ctx, parts, runPart, handPage(fn))
	}
	if err := p.listIntents(ctx, f, w, fn); err != nil {
		return err
	}
	if sched.manual {
		// No payout of such an account can be listed: a charge is settled
		// when its funds became available.
		err = p.settleAvailable(ctx, lp.Account, lp.Since, lp.Until, sched.delayDays, func(cs []reconcile.Change) error {
			for i := range cs {
				asOfUntil(&cs[i])
			}
			return fn(reconcile.Page{Changes: cs})
		})
	} else {
		err = p.listArrivedPayouts(ctx, f, w, fn)
	}
	if err != nil {
		return err
	}
	return p.listOlder(ctx, f, w, fn)
}

// listIntents lists the PaymentIntents created in the window and hands fn
// the changes of each page, before the next page is requested. When Stripe
// answers slower than the pacing allows (latencyBound), the window is
// listed as stretches of its time at once instead (intentStretches, or
// aheadDepth when the latency asks for more in flight; a list
// read through its cursor makes one request an answer's time): each
// stretch's next page is then requested while its pages wait to be mapped
// and handed on here, one at a time, in the order they arrive. A payment is
// in one stretch and its changes in one page, so the listing's changes are
// the same, in another order of pages.
//
// Each stretch's pages are mapped by its own goroutine (a disputed charge's
// newest dispute, a charge's refunds past its embedded page: a request
// each), so that one stretch's requests do not hold up the others' while
// they wait to be handed on. The fetcher is safe for that: capped at the
// window's end (f.until), its mapping reads no state of its own.
func (p *Provider) listIntents(ctx context.Context, f *fetcher, w span, fn func(reconcile.Page) error) error {
	if !p.latencyBound() {
		return p.intentPages(ctx, f.account, w, w, func(pis []*stripego.PaymentIntent) error {
			cs, err := f.changesOf(ctx, pis)
			if err != nil || len(cs) == 0 {
				return err
			}
			return fn(reconcile.Page{Changes: cs})
		})
	}
	return fanin.Run(ctx, p.intentParts(f, w), runPart, handPage(fn))
}

// listPart is one of the lists the object listing reads at once (fanin):
// it sends the changes of each page it reads.
type listPart func(ctx context.Context, send func([]reconcile.Change) error) error

func runPart(ctx context.Context, part listPart, send func([]reconcile.Change) error) error {
	return part(ctx, send)
}

// handPage hands a part's changes to fn as a page, when there are some.
func handPage(fn func(reconcile.Page) error) func(context.Context, []reconcile.Change) error {
	return func(_ context.Context, cs []reconcile.Change) error {
		if len(cs) == 0 {
			return nil
		}
		return fn(reconcile.Page{Changes: cs})
	}
}

// intentParts are the stretches of the window listIntents lists at once,
// each mapping its own pages.
func (p *Provider) intentParts(f *fetcher, w span) []listPart {
	var parts []listPart
	for _, part := range w.split(max(intentStretches, p.aheadDepth())) {
		parts = append(parts, func(ctx context.Context, send func([]reconcile.Change) error) error {
			return p.intentPages(ctx, f.account, w, part, func(pis []*stripego.PaymentIntent) error {
				cs, err := f.changesOf(ctx, pis)
				if err != nil {
					return err
				}
				return send(cs)
			})
		})
	}
	return parts
}

// changesOf maps a page of PaymentIntents (changes).
func (f *fetcher) changesOf(ctx context.Context, pis []*stripego.PaymentIntent) ([]reconcile.Change, error) {
	var out []reconcile.Change
	for _, pi := range pis {
		cs, err := f.changes(ctx, pi)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// intentStretches is how many stretches of its window the object listing
// lists at once when Stripe answers late.
const intentStretches = 4

// intentPages lists the PaymentIntents created in part, a stretch of the
// window w, with what the mapping expands, and calls emit with each page
// of them (those the stretch holds) before it requests the next.
func (p *Provider) intentPages(ctx context.Context, account string, w, part span, emit func([]*stripego.PaymentIntent) error) error {
	params := &stripego.PaymentIntentListParams{ListParams: listParams(ctx, account, listPage), CreatedRange: part.query()}
	params.AddExpand("data.latest_charge.balance_transaction")
	params.AddExpand("data.latest_charge.refunds")
	it := p.api.PaymentIntents.List(params)
	var page []*stripego.PaymentIntent
	n := 0
	for it.Next() {
		n++
		pi := it.PaymentIntent()
		switch {
		case pi == nil || pi.ID == "":
			p.log.Warn("stripe listed a payment intent without an id; skipped")
		case !part.has(pi.Created):
			// Stripe filters by created; an object outside the filter
			// (stripe-mock lists its fixtures whatever is asked) is not
			// the stretch's.
			if !w.has(pi.Created) || part == w {
				p.log.Warn("stripe listed a payment intent the request excluded; skipped", "provider_id", pi.ID, "created", pi.Created)
			}
		default:
			page = append(page, pi)
		}
		if n%listPage == 0 && len(page) > 0 {
			// A page read: handed on before the next is requested.
			if err := emit(page); err != nil {
				return err
			}
			page = nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list stripe payment intents: %w", translate(err))
	}
	if len(page) > 0 {
		return emit(page)
	}
	return nil
}

// listArrivedPayouts reads the automatic payouts arriving in the window as
// their events would be read (payoutEvent), dated at arrival_date.
//
// Each payout's balance transactions are one list read through its cursor,
// one request an answer's time. When Stripe answers slower than the pacing
// allows (latencyBound), aheadDepth payouts are read at once, each by a
// reader of its own taking the next payout listed, their changes handed on
// in pages of at most maxChangesPerPage as they come (a payout's changes
// may then share a page with another's): the same changes, in another
// order of pages, as the listing of intents in stretches. Otherwise one
// reader reads one payout after another, as listed.
func (p *Provider) listArrivedPayouts(ctx context.Context, f *fetcher, w span, fn func(reconcile.Page) error) error {
	readers := 1
	if p.latencyBound() {
		readers = p.aheadDepth()
	}
	return fanin.Run(ctx, p.payoutParts(f, w, readers), runPart, handPage(fn))
}

// payoutParts are the lists listArrivedPayouts reads at once: the window's
// payouts, and readers, each reading the balance transactions of the next
// payout listed, its changes sent in pages of at most maxChangesPerPage.
func (p *Provider) payoutParts(f *fetcher, w span, readers int) []listPart {
	listed := make(chan *stripego.Payout)
	parts := []listPart{func(ctx context.Context, _ func([]reconcile.Change) error) error {
		defer close(listed)
		return p.arrivedPayouts(ctx, f, w, func(po *stripego.Payout) error {
			select {
			case listed <- po:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}}
	for range readers {
		parts = append(parts, func(ctx context.Context, send func([]reconcile.Change) error) error {
			var out []reconcile.Change
			for po := range listed {
				err := p.arrivedPayout(ctx, f.account, po, func(c reconcile.Change) error {
					if out = append(out, c); len(out) >= maxChangesPerPage {
						page := out
						out = nil
						return send(page)
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return send(out)
		})
	}
	return parts
}

// arrivedPayouts lists the payouts arriving in the window and calls each
// with those it holds, in the order Stripe lists them.
func (p *Provider) arrivedPayouts(ctx context.Context, f *fetcher, w span, each func(*stripego.Payout) error) error {
	params := &stripego.PayoutListParams{ListParams: listParams(ctx, f.account, listPage), ArrivalDateRange: w.query()}
	it := p.api.Payouts.List(params)
	for it.Next() {
		po := it.Payout()
		if po == nil || po.ID == "" {
			continue
		}
		if !w.has(po.ArrivalDate) || !f.before(at(po.ArrivalDate)) {
			p.log.Warn("stripe listed a payout the request excluded; skipped", "payout_id", po.ID, "arrival_date", po.ArrivalDate)
			continue
		}
		if err := each(po); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list stripe payouts: %w", translate(err))
	}
	return nil
}

// arrivedPayout reads one listed payout as payoutEvent reads its event:
// paid settles the charges of its balance transactions; failed or canceled
// makes each a conflict naming it. A payout not yet paid (pending,
// in_transit) settles nothing yet; a status the mapping does not know is
// logged, never guessed.
func (p *Provider) arrivedPayout(ctx context.Context, account string, po *stripego.Payout, emit func(reconcile.Change) error) error {
	var typ string
	switch po.Status {
	case stripego.PayoutStatusPaid:
		typ = "payout.paid"
	case stripego.PayoutStatusFailed:
		typ = "payout.failed"
	case stripego.PayoutStatusCanceled:
		typ = "payout.canceled"
	case stripego.PayoutStatusPending, stripego.PayoutStatusInTransit:
		return nil
	default:
		p.log.Warn("stripe listed a payout in a status the mapping does not know; it settles nothing", "payout_id", po.ID, "status", po.Status)
		return nil
	}
	raw, err := json.Marshal(po)
	if err != nil {
		return fmt.Errorf("encode payout %s: %w", po.ID, err)
	}
	lean := leanPayout{ID: po.ID, Reconciliation: string(po.ReconciliationStatus), Status: string(po.Status), ArrivalDate: po.ArrivalDate,
		Manual: !po.Automatic || po.ReconciliationStatus == stripego.PayoutReconciliationStatusNotApplicable}
	base := reconcile.Change{At: at(po.ArrivalDate), EventType: "reconciler." + typ, Inferred: true}
	return p.payoutEventEach(ctx, account, base, typ, lean, nil, func(c reconcile.Change) error {
		c.Inferred, c.Payload = true, raw
		if c.State.Valid() {
			c.EventID = reconcile.SyntheticEventID(c.ProviderID, c.State, c.At)
		}
		asOfUntil(&c)
		return emit(c)
	})
}

// asOfUntil drops the refund view of a change read from a charge as it is
// now (the source a balance transaction expands), unless it shows no refund
// at all: its refunds may have been made after the window's end, which a
// listing capped there must not count. The payment's own listing or re-read
// counts its refunds as of the end.
func asOfUntil(c *reconcile.Change) {
	if c.AmountRefunded > 0 || c.Refunded {
		c.View, c.ViewCurrent, c.Refunded, c.AmountRefunded = false, false, false, 0
	}
}

// listOlder finds the payments created before the window that its refunds
// and disputes name (GET /v1/refunds and /v1/disputes by created, with
// data.payment_intent expanded to tell their creation), and re-reads them by
// id, capped at the window's end, a chunk at a time.
func (p *Provider) listOlder(ctx context.Context, f *fetcher, w span, fn func(reconcile.Page) error) error {
	return p.olderPart(f, w)(ctx, func(cs []reconcile.Change) error { return handPage(fn)(ctx, cs) })
}

// olderPart is listOlder as a part of the object listing's fan-in: it sends
// each chunk's changes. When Stripe answers late (latencyBound), a chunk's
// payments are re-read aheadDepth at once (each is a request or two); the
// chunk's changes are sent in the order of its ids either way.
func (p *Provider) olderPart(f *fetcher, w span) listPart {
	return func(ctx context.Context, send func([]reconcile.Change) error) error {
		var ids []string
		seen := map[string]bool{}
		flush := func() error {
			outs := make([][]reconcile.Change, len(ids))
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(1)
			if p.latencyBound() {
				g.SetLimit(p.aheadDepth())
			}
			for i, id := range ids {
				g.Go(func() error {
					cs, err := f.one(gctx, id)
					outs[i] = cs
					return err
				})
			}
			if err := g.Wait(); err != nil {
				return err
			}
			ids, seen = ids[:0], map[string]bool{}
			return send(slices.Concat(outs...))
		}
		add := func(pi *stripego.PaymentIntent) error {
			// An intent the answer did not expand (Created 0) is re-read
			// too: if it is the window's, its changes repeat the listing's
			// under the same ids.
			if pi == nil || pi.ID == "" || pi.Created >= w.since || seen[pi.ID] {
				return nil
			}
			seen[pi.ID] = true
			ids = append(ids, pi.ID)
			if len(ids) >= refetchChunk {
				return flush()
			}
			return nil
		}

		rp := &stripego.RefundListParams{ListParams: listParams(ctx, f.account, listPage), CreatedRange: w.query()}
		rp.AddExpand("data.payment_intent")
		rit := p.api.Refunds.List(rp)
		for rit.Next() {
			if r := rit.Refund(); r != nil && w.has(r.Created) {
				if err := add(r.PaymentIntent); err != nil {
					return err
				}
			}
		}
		if err := rit.Err(); err != nil {
			return fmt.Errorf("list stripe refunds: %w", translate(err))
		}

		dp := &stripego.DisputeListParams{ListParams: listParams(ctx, f.account, listPage), CreatedRange: w.query()}
		dp.AddExpand("data.payment_intent")
		dit := p.api.Disputes.List(dp)
		for dit.Next() {
			if d := dit.Dispute(); d != nil && w.has(d.Created) {
				if err := add(d.PaymentIntent); err != nil {
					return err
				}
			}
		}
		if err := dit.Err(); err != nil {
			return fmt.Errorf("list stripe disputes: %w", translate(err))
		}
		return flush()
	}
}

// completeRefunds completes, for a capped read, a charge's embedded refunds
// when the cap needs the ones Stripe left out: the embedded list is one page,
// newest first (has_more), so when even its oldest refund is at or after the
// cap more may be. It reads them all (GET /v1/refunds?charge=…). Uncapped,
// or when the page reaches back before the cap, it does nothing.
func (f *fetcher) completeRefunds(ctx context.Context, pi *stripego.PaymentIntent) error {
	ch := pi.LatestCharge
	if f.until.IsZero() || ch == nil || ch.ID == "" || ch.Refunds == nil || !ch.Refunds.HasMore {
		return nil
	}
	for _, r := range ch.Refunds.Data {
		if r != nil && at(r.Created).Before(f.until) {
			return nil
		}
	}
	params := &stripego.RefundListParams{ListParams: listParams(ctx, f.account, listPage), Charge: stripego.String(ch.ID)}
	it := f.p.api.Refunds.List(params)
	var all []*stripego.Refund
	for it.Next() {
		all = append(all, it.Refund())
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list stripe refunds of charge %s: %w", ch.ID, translate(err))
	}
	ch.Refunds.Data, ch.Refunds.HasMore = all, false
	return nil
}

// ListStretches tells verify how many stretches of the account's window to
// list at once: when Stripe answers slower than the pacing allows
// (latencyBound, known once the account's payout schedule, which
// ListCurrent reads first, was read), twice as many as the pacing
// intervals an answer takes (verifyStretchesMax at most), four at least:
// the stretches do not end together (their payments are not spread
// evenly), and twice as many keep the pacing used while the last ones
// finish (at 100 ms an answer and 20 requests/s, six stretches took verify
// --all to 0.95 of what its requests allow where four gave 0.90); else 0,
// as the rows ask.
func (v *Verifier) ListStretches(ctx context.Context, account string) int {
	if _, err := v.p.payoutSchedule(ctx, account); err != nil || !v.p.latencyBound() {
		return 0 // a failure comes again, from ListCurrent's own request
	}
	iv, l := v.p.tr.Interval(), v.p.tr.Latency()
	if iv <= 0 {
		return max(intentStretches, v.p.aheadDepth())
	}
	return min(max(intentStretches, 2*int((l+iv-1)/iv)), verifyStretchesMax)
}

// verifyStretchesMax bounds the stretches ListStretches asks for: each is a
// list in flight, holding a page.
const verifyStretchesMax = 16

// ListCurrent implements reconcile.CurrentLister: the PaymentIntents
// created in the window, 100 a page with their latest charge expanded (and
// its balance transaction on a manual-payout account), each mapped as
// Current maps it without a local payout (CurrentOf, the newest dispute of a
// disputed charge, a manual account's settlement); fn gets one page at a
// time.
func (v *Verifier) ListCurrent(ctx context.Context, lp reconcile.ListParams, fn func([]reconcile.Current) error) error {
	if !lp.Until.After(lp.Since) {
		return nil
	}
	sched, err := v.p.payoutSchedule(ctx, lp.Account)
	if err != nil {
		return err
	}
	w := spanOf(lp)
	params := &stripego.PaymentIntentListParams{ListParams: listParams(ctx, lp.Account, listPage), CreatedRange: w.query()}
	for _, e := range currentExpansions(sched) {
		params.AddExpand("data." + e)
	}
	it := v.p.api.PaymentIntents.List(params)
	var page []reconcile.Current
	n := 0
	for it.Next() {
		n++
		pi := it.PaymentIntent()
		switch {
		case pi == nil || pi.ID == "":
			v.p.log.Warn("stripe listed a payment intent without an id; skipped")
		case !w.has(pi.Created):
			v.p.log.Warn("stripe listed a payment intent the request excluded; skipped", "provider_id", pi.ID, "created", pi.Created)
		default:
			c, err := v.current(ctx, lp.Account, sched, pi)
			if err != nil {
				return err
			}
			page = append(page, c)
		}
		if n%listPage == 0 && len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
			page = nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list stripe payment intents: %w", translate(err))
	}
	if len(page) > 0 {
		return fn(page)
	}
	return nil
}
