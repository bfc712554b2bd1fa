package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	stripego "github.com/stripe/stripe-go/v76"
	"golang.org/x/sync/errgroup"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// verifyConcurrency is how many payments one Current call reads at once.
// The transport's pacing still bounds the request rate; this only keeps
// the round-trip latency of real Stripe from being the bound.
const verifyConcurrency = 8

// Verifier reads payments' current state from Stripe for `reconciler
// verify`: each PaymentIntent with its latest charge, the disputes of a
// disputed charge, and the payouts the local rows name. Each payout is read
// once per Verifier (its status and its balance transactions), so use one
// Verifier for one verification. It is safe for concurrent use.
type Verifier struct {
	p *Provider

	mu      sync.Mutex
	payouts map[payoutKey]*payoutView
}

var _ reconcile.CurrentReader = (*Verifier)(nil)

type payoutKey struct{ account, id string }

// payoutView is what verify needs of one payout: its status and the
// PaymentIntents whose charges it paid out.
type payoutView struct {
	done   chan struct{} // closed when the fields below are set
	err    error
	found  bool
	status string
	// reconciled is false while Stripe still assigns balance transactions
	// to the payout (reconciliation_status in_progress): a payment missing
	// from its list may still be in it.
	reconciled bool
	pis        map[string]bool
	arrival    int64 // arrival_date
}

// Verifier returns a new Verifier over p's client and transport, so that
// its requests are paced, retried and counted like the run's.
func (p *Provider) Verifier() *Verifier {
	return &Verifier{p: p, payouts: map[payoutKey]*payoutView{}}
}

// Current implements reconcile.CurrentReader. A payment ListCurrent already
// read (cp.Listed) is not read again: only the local payout named for it is
// checked.
func (v *Verifier) Current(ctx context.Context, cp reconcile.CurrentParams) ([]reconcile.Current, error) {
	out := make([]reconcile.Current, len(cp.IDs))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, verifyConcurrency)
	for i, id := range cp.IDs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := v.one(ctx, cp.Account, id, cp.Payouts[id], cp.Listed)
			if err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
				cancel()
				return
			}
			out[i] = c
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// one reads one PaymentIntent, its disputes when its charge is disputed,
// and the local payout when one is named. A payment ListCurrent already read
// (listed) is only completed with that payout.
func (v *Verifier) one(ctx context.Context, account, id, payout string, listed map[string]reconcile.Current) (reconcile.Current, error) {
	c, ok := listed[id]
	if !ok {
		var err error
		if c, err = v.read(ctx, account, id); err != nil || !c.Found {
			return c, err
		}
	}
	if payout != "" {
		pv, err := v.payout(ctx, account, payout)
		if err != nil {
			return reconcile.Current{}, err
		}
		applyPayout(&c, payout, pv)
	}
	return c, nil
}

// read reads one PaymentIntent by id and maps it (current).
func (v *Verifier) read(ctx context.Context, account, id string) (reconcile.Current, error) {
	sched, err := v.p.payoutSchedule(ctx, account)
	if err != nil {
		return reconcile.Current{}, err
	}
	pi, err := v.p.getPI(ctx, account, id, currentExpansions(sched)...)
	if err != nil {
		if notFound(err) {
			return reconcile.Current{ProviderID: id}, nil
		}
		return reconcile.Current{}, fmt.Errorf("get stripe payment intent %s: %w", id, translate(err))
	}
	if pi.ID != id {
		return reconcile.Current{}, fmt.Errorf("get stripe payment intent %s: the answer is for %q", id, pi.ID)
	}
	return v.current(ctx, account, sched, pi)
}

// currentExpansions are what verify expands of a PaymentIntent: its latest
// charge, and on a manual-payout account the charge's balance transaction,
// whose availability settles it there (DESIGN section 3).
func currentExpansions(sched schedule) []string {
	if sched.manual {
		return []string{"latest_charge", "latest_charge.balance_transaction"}
	}
	return []string{"latest_charge"}
}

// current maps a PaymentIntent read with its latest charge expanded (and
// the charge's balance transaction on an account that pays out by hand):
// CurrentOf, the settlement a manual-payout account's available balance
// transaction makes, and the newest dispute of a disputed charge.
func (v *Verifier) current(ctx context.Context, account string, sched schedule, pi *stripego.PaymentIntent) (reconcile.Current, error) {
	c := CurrentOf(pi)
	if ch := pi.LatestCharge; sched.manual && ch != nil && ch.Captured {
		c.SettlementKnown = true
		if bt := ch.BalanceTransaction; bt != nil && bt.Status == stripego.BalanceTransactionStatusAvailable && c.State == models.StateCaptured {
			c.State, c.PayoutStatus = models.StateSettled, "available"
		}
	}
	if ch := pi.LatestCharge; ch != nil && ch.Disputed {
		d, err := v.newestDispute(ctx, account, pi.ID)
		if err != nil {
			return reconcile.Current{}, err
		}
		applyDispute(&c, d)
	}
	return c, nil
}

func notFound(err error) bool {
	var se *stripego.Error
	return errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound
}

// CurrentOf maps a PaymentIntent with its latest charge expanded to what
// it establishes (DESIGN section 4), before disputes and payouts: the
// intent's status gives the state; a captured charge gives the captured
// amount and the refunds of captured money, and makes a fully refunded
// payment refunded. An uncaptured charge "refunded" by canceling the
// authorisation refunds nothing, and the released remainder of a partial
// capture, which Stripe counts in the charge's amount_refunded, is not a
// refund either.
func CurrentOf(pi *stripego.PaymentIntent) reconcile.Current {
	c := reconcile.Current{ProviderID: pi.ID, Found: true, Amount: pi.Amount,
		Currency: strings.ToLower(string(pi.Currency)), RawStatus: string(pi.Status)}
	st, ok := PaymentIntentState(string(pi.Status))
	c.State, c.Unknown = st, !ok
	ch := pi.LatestCharge
	if ch == nil || !ch.Captured {
		return c
	}
	c.AmountCaptured = ch.AmountCaptured
	if c.AmountCaptured == 0 {
		c.AmountCaptured = ch.Amount // a captured charge rendered without amount_captured
	}
	released := int64(0)
	if c.AmountCaptured < ch.Amount {
		released = ch.Amount - c.AmountCaptured
	}
	c.AmountRefunded = max(ch.AmountRefunded-released, 0)
	if st == models.StateCaptured && (ch.Refunded || c.AmountRefunded >= c.AmountCaptured) {
		c.State, c.RawStatus = models.StateRefunded, string(pi.Status)+", charge refunded"
	}
	return c
}

// newestDispute returns the payment's most recently created dispute, or
// nil when Stripe lists none.
func (v *Verifier) newestDispute(ctx context.Context, account, pi string) (*stripego.Dispute, error) {
	params := &stripego.DisputeListParams{ListParams: listParams(ctx, account, 100), PaymentIntent: stripego.String(pi)}
	it := v.p.api.Disputes.List(params)
	var newest *stripego.Dispute
	for it.Next() {
		d := it.Dispute()
		if newest == nil || d.Created > newest.Created {
			newest = d // lists come newest first: ties keep the first listed
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list stripe disputes of %s: %w", pi, translate(err))
	}
	return newest, nil
}

// applyDispute makes a payment whose newest dispute was lost a chargeback.
// Any other dispute status leaves the state as the charge shows it.
func applyDispute(c *reconcile.Current, d *stripego.Dispute) {
	if d == nil {
		return
	}
	if d.Status == stripego.DisputeStatusLost {
		c.State = models.StateChargeback
		c.RawStatus += ", dispute " + string(d.Status)
	}
}

// applyPayout records what the payout the local row names says about the
// payment: a paid payout that paid it out settles a captured payment; a
// payout that does not contain it, or is not paid, contradicts a local
// settlement. While Stripe is still reconciling the payout, a payment
// absent from its list may yet be in it: settlement stays unknown.
func applyPayout(c *reconcile.Current, id string, pv *payoutView) {
	switch {
	case !pv.found:
		c.SettlementKnown, c.PayoutStatus = true, "missing"
	case pv.pis[c.ProviderID]:
		c.SettlementKnown, c.PayoutID, c.PayoutStatus = true, id, pv.status
		if pv.status == string(stripego.PayoutStatusPaid) && c.State == models.StateCaptured {
			c.State = models.StateSettled
		}
	case pv.reconciled:
		c.SettlementKnown, c.PayoutStatus = true, pv.status
	default:
		c.PayoutStatus = pv.status
	}
}

// warmPayouts is how many payouts WarmPayouts reads at once.
const warmPayouts = 4

// WarmPayouts reads the payouts ids of the account into the cache, a few
// at once, and returns when they are read or ctx ends. verify --all calls
// it with the payouts its window's rows name, beside its listing: a
// payout's balance transactions are one list read through its cursor, one
// request an answer's time, and a page that names a payout would
// otherwise wait for that whole list. A failed read is not cached, so the
// payout's first use reads it again and reports the error.
func (v *Verifier) WarmPayouts(ctx context.Context, account string, ids []string) {
	var g errgroup.Group
	g.SetLimit(warmPayouts)
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			_, _ = v.payout(ctx, account, id)
			return nil
		})
	}
	_ = g.Wait()
}

// payout returns the payout's view, reading it on first use: GET
// /v1/payouts/{id}, then its balance transactions with their sources, 100
// a page. Concurrent callers for one payout wait for one read.
func (v *Verifier) payout(ctx context.Context, account, id string) (*payoutView, error) {
	k := payoutKey{account, id}
	v.mu.Lock()
	pv, ok := v.payouts[k]
	if !ok {
		pv = &payoutView{done: make(chan struct{})}
		v.payouts[k] = pv
	}
	v.mu.Unlock()
	if ok {
		select {
		case <-pv.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return pv, pv.err
	}
	pv.err = v.readPayout(ctx, account, id, pv)
	if pv.err != nil {
		// A failed read is not cached: a later call may succeed.
		v.mu.Lock()
		delete(v.payouts, k)
		v.mu.Unlock()
	}
	close(pv.done)
	return pv, pv.err
}

func (v *Verifier) readPayout(ctx context.Context, account, id string, pv *payoutView) error {
	params := &stripego.PayoutParams{Params: stripego.Params{Context: ctx}}
	if account != "" {
		params.SetStripeAccount(account)
	}
	po, err := v.p.api.Payouts.Get(id, params)
	if err != nil {
		if notFound(err) {
			return nil // found stays false
		}
		return fmt.Errorf("get stripe payout %s: %w", id, translate(err))
	}
	if po.ID != id {
		return fmt.Errorf("get stripe payout %s: the answer is for %q", id, po.ID)
	}
	pv.found, pv.status, pv.arrival = true, string(po.Status), po.ArrivalDate
	// While Stripe is still assigning transactions (in_progress), or for a
	// manual payout it cannot list at all (not_applicable), a payment
	// missing from the list may still be in the payout.
	pv.reconciled = po.ReconciliationStatus != stripego.PayoutReconciliationStatusInProgress &&
		po.ReconciliationStatus != stripego.PayoutReconciliationStatusNotApplicable && po.Automatic
	pv.pis = map[string]bool{}
	lp := &stripego.BalanceTransactionListParams{ListParams: listParams(ctx, account, 100), Payout: stripego.String(id)}
	lp.AddExpand("data.source")
	it := v.p.btIter(lp)
	for it.Next() {
		bt := it.Current().(*leanBT)
		if bt.Source.Object == "charge" && bt.Source.PaymentIntent != "" {
			pv.pis[string(bt.Source.PaymentIntent)] = true
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list balance transactions of payout %s: %w", id, translate(err))
	}
	return nil
}
