package gocardless

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// Verifier reads payments' current state from GoCardless for `reconciler
// verify`: GET /payments/{id} for each payment and GET /payouts/{id} for
// the payout that paid it out, each payout once per Verifier; for a
// Success+ payment whose status may hide a retry (failed, or
// pending_submission again), its latest failed event and, when GoCardless
// will retry that failure, the payment's events. Its requests
// go through the provider's client (pacing, RateLimit-* headers, retries,
// counting). Use one Verifier for one verification.
type Verifier struct {
	p *Provider

	mu      sync.Mutex
	payouts map[string]*payoutRead
}

// payoutRead is one payout's status, read once for every caller.
type payoutRead struct {
	done   chan struct{} // closed when status and err are set
	status string        // "missing" when 404
	err    error
}

// currentConcurrency is how many payments one Current call reads by id at
// once. The client's pacing still bounds the request rate; this only keeps
// GoCardless's answer time from being the bound.
const currentConcurrency = 4

var _ reconcile.CurrentReader = (*Verifier)(nil)

// Verifier returns a new Verifier over p's client.
func (p *Provider) Verifier() *Verifier {
	return &Verifier{p: p, payouts: map[string]*payoutRead{}}
}

// currentPayment is the part of a payment verify reads.
type currentPayment struct {
	ID             string `json:"id"`
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amount_refunded"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
	// RetryIfPossible: GoCardless may retry a failure itself (Success+).
	RetryIfPossible bool `json:"retry_if_possible"`
	Links           struct {
		Payout string `json:"payout"`
	} `json:"links"`
}

// Current implements reconcile.CurrentReader. GoCardless has no connected
// accounts: cp.Account is ignored. The payment's own status tells paid out
// from not, so cp.Payouts is not needed; the payment's payout is read for
// its status (a payout that bounced after it was paid). A payment
// ListCurrent already read (cp.Listed) is complete as listed (its payout's
// status included) and is not read again.
func (v *Verifier) Current(ctx context.Context, cp reconcile.CurrentParams) ([]reconcile.Current, error) {
	out := make([]reconcile.Current, len(cp.IDs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(currentConcurrency)
	for i, id := range cp.IDs {
		if c, ok := cp.Listed[id]; ok {
			out[i] = c
			continue
		}
		g.Go(func() error {
			c, err := v.read(gctx, id)
			out[i] = c
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// read reads one payment by id and maps it (current); a payment GoCardless
// does not know is not found.
func (v *Verifier) read(ctx context.Context, id string) (reconcile.Current, error) {
	var r struct {
		Payments json.RawMessage `json:"payments"`
	}
	if err := v.p.get(ctx, "/payments/"+url.PathEscape(id), nil, &r); err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return reconcile.Current{ProviderID: id}, nil
		}
		return reconcile.Current{}, fmt.Errorf("get gocardless payment %s: %w", id, err)
	}
	var pm currentPayment
	if err := json.Unmarshal(r.Payments, &pm); err != nil {
		return reconcile.Current{}, fmt.Errorf("decode gocardless payment %s: %w", id, err)
	}
	if pm.ID != id {
		return reconcile.Current{}, fmt.Errorf("get gocardless payment %s: the answer is for %q", id, pm.ID)
	}
	return v.current(ctx, pm)
}

// current is the Current of a payment read from GoCardless: its status
// mapped (currentOf), corrected for a failure GoCardless will retry, and
// its payout's status.
func (v *Verifier) current(ctx context.Context, pm currentPayment) (reconcile.Current, error) {
	c := currentOf(pm)
	if err := v.retrying(ctx, pm, &c); err != nil {
		return reconcile.Current{}, err
	}
	if c.PayoutID != "" {
		st, err := v.payoutStatus(ctx, c.PayoutID)
		if err != nil {
			return reconcile.Current{}, err
		}
		c.PayoutStatus = st
	}
	return c, nil
}

// currentOf maps a payment as GoCardless shows it now (DESIGN section 4):
// its status gives the state, a collected payment refunded in full is
// refunded, and the payment links the payout that paid it out.
func currentOf(pm currentPayment) reconcile.Current {
	c := reconcile.Current{ProviderID: pm.ID, Found: true, Amount: pm.Amount, Currency: strings.ToLower(pm.Currency),
		AmountRefunded: pm.AmountRefunded, RawStatus: pm.Status, PayoutID: pm.Links.Payout}
	st, ok := StatusState(pm.Status)
	if !ok {
		c.Unknown = true
		return c
	}
	c.State, c.SettlementKnown = st, true
	switch st {
	case models.StateCaptured, models.StateSettled, models.StateChargeback:
		c.AmountCaptured = pm.Amount // Direct Debit collects the whole amount or nothing
	}
	if pm.Amount > 0 && pm.AmountRefunded >= pm.Amount && (st == models.StateSettled || st == models.StateCaptured) {
		c.State = models.StateRefunded
		c.AmountCaptured = pm.Amount
	}
	return c
}

// retrying corrects c for a failure GoCardless will retry. A Success+
// payment (retry_if_possible) keeps status failed until GoCardless
// resubmits it, then shows pending_submission until the retry is
// submitted: neither status is what GoCardless's own records establish
// while its latest failure says will_attempt_retry true. Such a failure is
// not final (docs/providers/gocardless.md): the engine applies no state for
// it, its resubmission or its late_failure_settled, and keeps the row where
// the payment's chain had put it (authorised after submitted, captured
// after a late failure of a confirmed payment). The state is then that
// chain's, read from the payment's own events and mapped exactly as the
// event path maps them (paymentEventChanges, retryFacts); nothing was
// collected, so no captured amount is checked. The failure is read as the
// stuck path reads it (lastFailed), and only for the statuses that can hide
// a retry of a payment GoCardless may retry. A final failure, a failure
// with no failed event left in the log and a payment without
// retry_if_possible keep their status's state.
func (v *Verifier) retrying(ctx context.Context, pm currentPayment, c *reconcile.Current) error {
	if !pm.RetryIfPossible || pm.Status != "failed" && pm.Status != "pending_submission" {
		return nil
	}
	last, err := v.p.lastFailed(ctx, pm.ID)
	if err != nil {
		return err
	}
	if last == nil || !last.Details.willRetry() {
		return nil
	}
	st, err := v.p.chainState(ctx, pm.ID)
	if err != nil {
		return err
	}
	if st == models.StateNone {
		return nil
	}
	c.State, c.AmountCaptured = st, 0
	return nil
}

// chainState returns the state the payment's events establish along the
// state machine, each event mapped as ListChanges maps it (a failure
// GoCardless retries, the resubmission after it and the settlement of such
// a late failure move no state): every stateful fact that is an allowed
// edge from the state before it is a step. StateNone when no event has a
// state.
func (p *Provider) chainState(ctx context.Context, id string) (models.State, error) {
	q := url.Values{}
	q.Set("payment", id)
	q.Set("limit", "500")
	var items []item
	flagged := map[string]bool{}
	for {
		var pg struct {
			Events []Event  `json:"events"`
			Meta   listMeta `json:"meta"`
		}
		if err := p.get(ctx, "/events", q, &pg); err != nil {
			return models.StateNone, fmt.Errorf("list gocardless events of %s: %w", id, err)
		}
		for _, ev := range pg.Events {
			// The payment filter may also return the payment's refund events.
			if ev.ResourceType != "payments" || ev.Links.Payment != id {
				continue
			}
			it := item{ev: reconcile.Event{ID: ev.ID, At: ev.CreatedAt.UTC()}}
			it.changes = paymentEventChanges(ev, Payment{}, false, flagged)
			items = append(items, it)
		}
		after := pg.Meta.next(len(pg.Events))
		if after == "" {
			break
		}
		q.Set("after", after)
	}
	sortItems(items)
	retryFacts(items)
	st := models.StateNone
	for _, it := range items {
		for _, c := range it.changes {
			if c.Unknown || c.State == models.StateNone {
				continue
			}
			if models.CanMove(st, c.State) {
				st = c.State
			}
		}
	}
	return st, nil
}

// payoutStatus reads a payout's status once per Verifier: concurrent
// callers for one payout wait for one read, and a failed read is not kept
// (a later call reads it again).
func (v *Verifier) payoutStatus(ctx context.Context, id string) (string, error) {
	v.mu.Lock()
	pr, ok := v.payouts[id]
	if !ok {
		pr = &payoutRead{done: make(chan struct{})}
		v.payouts[id] = pr
	}
	v.mu.Unlock()
	if ok {
		select {
		case <-pr.done:
			return pr.status, pr.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	pr.status, pr.err = v.readPayout(ctx, id)
	if pr.err != nil {
		v.mu.Lock()
		delete(v.payouts, id)
		v.mu.Unlock()
	}
	close(pr.done)
	return pr.status, pr.err
}

// readPayout reads a payout's status: "missing" when GoCardless does not
// know it.
func (v *Verifier) readPayout(ctx context.Context, id string) (string, error) {
	var r struct {
		Payouts struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"payouts"`
	}
	if err := v.p.get(ctx, "/payouts/"+url.PathEscape(id), nil, &r); err != nil {
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			return "", fmt.Errorf("get gocardless payout %s: %w", id, err)
		}
		return "missing", nil
	}
	if r.Payouts.ID != id {
		return "", fmt.Errorf("get gocardless payout %s: the answer is for %q", id, r.Payouts.ID)
	}
	return r.Payouts.Status, nil
}
