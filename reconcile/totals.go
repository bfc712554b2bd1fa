package reconcile

import (
	"slices"
	"strings"
	"time"

	"github.com/reconciler/reconciler/models"
)

// Money is one side's money for a set of payments, in minor units of one
// currency.
type Money struct {
	// Captured sums the captured amount (amount_captured, else amount) of
	// payments at captured or beyond (captured, settled, refunded,
	// chargeback).
	Captured int64 `json:"captured"`
	// Refunded sums amount_refunded (refunds of captured money).
	Refunded int64 `json:"refunded"`
	// Disputed sums the amount of payments lost to a chargeback.
	Disputed int64 `json:"disputed"`
	// Settled sums the captured amount of payments paid out (settled_at)
	// inside the window.
	Settled int64 `json:"settled"`
}

// CurrencyTotals are the window's money of one currency as the provider
// has it and as the rows have it, over the same payments.
type CurrencyTotals struct {
	Currency string `json:"currency"`
	Payments int64  `json:"payments"`
	Provider Money  `json:"provider"`
	Rows     Money  `json:"rows"`
}

// Differs reports whether the two sides disagree.
func (t CurrencyTotals) Differs() bool { return t.Provider != t.Rows }

// TotalsScope says which payments a run's totals sum.
const TotalsScope = "the payments the run examined (every payment a fact of the window named); provider: as the provider's facts of the window show each one, its row's values where they show nothing; rows: the rows as they were when the run ended"

// pastCapture are the states whose money was captured.
var pastCapture = map[models.State]bool{models.StateCaptured: true, models.StateSettled: true, models.StateRefunded: true, models.StateChargeback: true}

// totals accumulates a run's money per currency, both sides, over the
// payments it examined: a payment decided again in a later batch replaces
// its earlier contribution. Memory is per currency, not per payment.
type totals struct {
	since, until time.Time
	by           map[string]*CurrencyTotals
}

func newTotals(since, until time.Time) *totals {
	return &totals{since: since, until: until, by: map[string]*CurrencyTotals{}}
}

// money is one payment's contribution.
func (t *totals) money(l Local) Money {
	var m Money
	if !l.Exists && l.Amount == 0 {
		return m
	}
	captured := l.Amount
	if l.AmountCaptured > 0 {
		captured = l.AmountCaptured
	}
	if pastCapture[l.State] {
		m.Captured = captured
	}
	m.Refunded = l.AmountRefunded
	if l.State == models.StateChargeback {
		m.Disputed = l.Amount
	}
	if s := l.SettledAt; s != nil && !s.Before(t.since) && s.Before(t.until) {
		m.Settled = captured
	}
	return m
}

func (t *totals) of(cur string) *CurrencyTotals {
	cur = strings.ToLower(cur)
	ct := t.by[cur]
	if ct == nil {
		ct = &CurrencyTotals{Currency: cur}
		t.by[cur] = ct
	}
	return ct
}

func add(a *Money, b Money, sign int64) {
	a.Captured += sign * b.Captured
	a.Refunded += sign * b.Refunded
	a.Disputed += sign * b.Disputed
	a.Settled += sign * b.Settled
}

// change adds a payment's sides (sign 1) or takes an earlier contribution
// back (sign -1); first counts the payment.
func (t *totals) change(provider, row Local, sign int64, first bool) {
	cur := provider.Currency
	if cur == "" {
		cur = row.Currency
	}
	if cur == "" {
		return // nothing is known of its money on either side
	}
	ct := t.of(cur)
	if first {
		ct.Payments++
	}
	add(&ct.Provider, t.money(provider), sign)
	if row.Currency != "" && !strings.EqualFold(row.Currency, cur) {
		add(&t.of(row.Currency).Rows, t.money(row), sign)
		return
	}
	add(&ct.Rows, t.money(row), sign)
}

// Sorted returns the totals by currency.
func (t *totals) Sorted() []CurrencyTotals {
	out := make([]CurrencyTotals, 0, len(t.by))
	for _, ct := range t.by {
		out = append(out, *ct)
	}
	slices.SortFunc(out, func(a, b CurrencyTotals) int { return strings.Compare(a.Currency, b.Currency) })
	return out
}

// providerView is the payment as the provider's facts show it: the
// provider's latest state, amount, captured amount, refunds and payout
// where the facts carry them, the row's values where they say nothing.
func providerView(p Plan, row Local) Local {
	v := row
	v.Exists = true
	if p.Latest != nil {
		v.State = p.Latest.To
	}
	if p.Amount > 0 && p.Currency != "" {
		v.Amount, v.Currency = p.Amount, p.Currency
	}
	if p.AmountCaptured > 0 {
		v.AmountCaptured = p.AmountCaptured
	}
	switch {
	case p.View != nil:
		v.AmountRefunded = p.View.AmountRefunded
	case p.RefundTo > 0:
		v.AmountRefunded = max(v.AmountRefunded, p.RefundTo)
	}
	if p.Latest != nil && p.Latest.To == models.StateCanceled {
		v.AmountRefunded = 0
	}
	if s := p.Settlement; s != nil {
		at := s.At
		v.SettledAt, v.PayoutID = &at, s.PayoutID
	}
	if !row.Exists && v.Amount == 0 {
		return Local{}
	}
	return v
}

// count adds a committed batch to the run's totals (engine.committed,
// before the batch's payments are marked seen).
func (e *engine) count(b *batch) {
	if e.tot == nil {
		return
	}
	for i, id := range b.order {
		o := b.out[i]
		// The rows side is the row as it is: after the batch in a real
		// run, unchanged in a dry run or one that delivers.
		row := o.after
		if !e.ap.writes() {
			row = b.befores[i]
		}
		h, seen := b.hashes[i], b.wasSeen[i]
		if seen {
			// Decided before: its earlier contribution is taken back. The
			// provider's side was the row's unless it differed (kept in
			// e.totDiff: a row ahead of the log read so far, a repair a dry
			// run only simulated, a refusal).
			prevRow := b.rows[id]
			if !e.ap.writes() {
				prevRow = b.befores[i]
			}
			prevProv, ok := e.totDiff[h]
			if !ok {
				prevProv = prevRow
			}
			e.tot.change(prevProv, prevRow, -1, false)
		}
		pv := providerView(b.planBuf[i], row)
		if e.tot.money(pv) != e.tot.money(row) || !strings.EqualFold(pv.Currency, row.Currency) {
			e.totDiff[h] = pv
		} else {
			delete(e.totDiff, h)
		}
		e.tot.change(pv, row, 1, !seen)
	}
}
