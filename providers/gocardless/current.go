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

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// Verifier reads payments' current state from GoCardless for `reconciler
// verify`: GET /payments/{id} for each payment and GET /payouts/{id} for
// the payout that paid it out, each payout once per Verifier. Its requests
// go through the provider's client (pacing, RateLimit-* headers, retries,
// counting). Use one Verifier for one verification.
type Verifier struct {
	p *Provider

	mu      sync.Mutex
	payouts map[string]string // payout id → status ("missing" when 404)
}

var _ reconcile.CurrentReader = (*Verifier)(nil)

// Verifier returns a new Verifier over p's client.
func (p *Provider) Verifier() *Verifier {
	return &Verifier{p: p, payouts: map[string]string{}}
}

// currentPayment is the part of a payment verify reads.
type currentPayment struct {
	ID             string `json:"id"`
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amount_refunded"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
	Links          struct {
		Payout string `json:"payout"`
	} `json:"links"`
}

// Current implements reconcile.CurrentReader. GoCardless has no connected
// accounts: cp.Account is ignored. The payment's own status tells paid out
// from not, so cp.Payouts is not needed; the payment's payout is read for
// its status (a payout that bounced after it was paid).
func (v *Verifier) Current(ctx context.Context, cp reconcile.CurrentParams) ([]reconcile.Current, error) {
	out := make([]reconcile.Current, 0, len(cp.IDs))
	for _, id := range cp.IDs {
		var r struct {
			Payments json.RawMessage `json:"payments"`
		}
		if err := v.p.get(ctx, "/payments/"+url.PathEscape(id), nil, &r); err != nil {
			var ae *APIError
			if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
				out = append(out, reconcile.Current{ProviderID: id})
				continue
			}
			return nil, fmt.Errorf("get gocardless payment %s: %w", id, err)
		}
		var pm currentPayment
		if err := json.Unmarshal(r.Payments, &pm); err != nil {
			return nil, fmt.Errorf("decode gocardless payment %s: %w", id, err)
		}
		if pm.ID != id {
			return nil, fmt.Errorf("get gocardless payment %s: the answer is for %q", id, pm.ID)
		}
		c := currentOf(pm)
		if c.PayoutID != "" {
			st, err := v.payoutStatus(ctx, c.PayoutID)
			if err != nil {
				return nil, err
			}
			c.PayoutStatus = st
		}
		out = append(out, c)
	}
	return out, nil
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

// payoutStatus reads a payout's status once per Verifier.
func (v *Verifier) payoutStatus(ctx context.Context, id string) (string, error) {
	v.mu.Lock()
	st, ok := v.payouts[id]
	v.mu.Unlock()
	if ok {
		return st, nil
	}
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
		st = "missing"
	} else {
		if r.Payouts.ID != id {
			return "", fmt.Errorf("get gocardless payout %s: the answer is for %q", id, r.Payouts.ID)
		}
		st = r.Payouts.Status
	}
	v.mu.Lock()
	v.payouts[id] = st
	v.mu.Unlock()
	return st, nil
}
