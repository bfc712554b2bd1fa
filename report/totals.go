package report

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
)

// Totals are the money of a run's window per currency: as the rows have
// them, and as the provider has them where that was measured. A run does
// not keep the provider's objects, so the provider's side is never measured
// by a run (Provider is nil and ProviderNote says so); the differences the
// run's own items show are counted instead, and Flagged says whether the
// rows' totals are known to differ from the provider's.
type Totals struct {
	// Rows is one entry per currency (sorted) of the payments rows of the
	// run's provider and account whose source_updated_at or settled_at lies
	// in the window, read when the report was made (RowsReadAt), not when
	// the run ended: later changes to those rows show.
	Rows       []CurrencyTotals `json:"rows"`
	RowsReadAt *time.Time       `json:"rows_read_at"`
	// Provider is the provider's side, per currency, when the run measured
	// it (runs since object listing: their notes carry "totals"); null for
	// an older run, and ProviderNote says so. Difference is provider minus
	// rows, per currency, when Provider is measured.
	Provider     []CurrencyTotals `json:"provider"`
	Difference   []CurrencyTotals `json:"difference"`
	ProviderNote string           `json:"provider_note"`
	// Measured says both sides were measured by the run over the same
	// payments (Scope says which).
	Measured bool   `json:"measured"`
	Scope    string `json:"scope"`
	// DifferingItems counts the run's items saying a row's state or amount
	// differs from the provider's: those needing a human (except open
	// disputes), and in a dry run those it would repair.
	DifferingItems int64 `json:"differing_items"`
	// AmountDifferences is, per currency, the provider's amount minus the
	// row's summed over the run's mismatch items of one currency (minor
	// units): the one difference a run measures in money.
	AmountDifferences []CurrencyAmount `json:"amount_differences"`
	// Flagged says the rows' totals are known to differ from the
	// provider's; Flag says how, in one sentence.
	Flagged bool   `json:"flagged"`
	Flag    string `json:"flag,omitempty"`
}

// CurrencyTotals are one currency's totals, in minor units.
type CurrencyTotals struct {
	Currency string `json:"currency"`
	// Side is "rows", "provider" or "difference" (provider minus rows).
	Side     string `json:"side,omitempty"`
	Payments int64  `json:"payments"`
	// Captured sums amount_captured (else amount) of rows at captured or
	// beyond (captured, settled, refunded, chargeback).
	Captured int64 `json:"captured"`
	// Refunded sums amount_refunded.
	Refunded int64 `json:"refunded"`
	// Disputed sums amount of chargeback rows.
	Disputed int64 `json:"disputed"`
	// Settled sums amount_captured (else amount) of rows whose settled_at
	// lies in the window.
	Settled int64 `json:"settled"`
}

// CurrencyAmount is an amount of one currency, in minor units.
type CurrencyAmount struct {
	Currency string `json:"currency"`
	Amount   int64  `json:"amount"`
	Items    int64  `json:"items"`
}

// ProviderNotMeasured is what the totals say of the provider's side.
const ProviderNotMeasured = "not measured by a run (a run keeps no provider objects); use reconciler verify --all over the window"

// RowsScope says which rows the totals sum.
const RowsScope = "payments rows of the run's provider and account whose source_updated_at or settled_at lies in the window, read when this report was made"

// pastCaptured are the states whose money was captured.
var pastCaptured = map[models.State]bool{models.StateCaptured: true, models.StateSettled: true, models.StateRefunded: true, models.StateChargeback: true}

// AddPayment adds one row to per-currency totals of window [start, end).
func addPayment(acc map[string]*CurrencyTotals, p models.Payment, start, end time.Time) {
	cur := strings.ToLower(p.Currency)
	t := acc[cur]
	if t == nil {
		t = &CurrencyTotals{Currency: cur}
		acc[cur] = t
	}
	t.Payments++
	captured := p.Amount
	if p.AmountCaptured != nil {
		captured = *p.AmountCaptured
	}
	if pastCaptured[p.State] {
		t.Captured += captured
	}
	t.Refunded += p.AmountRefunded
	if p.State == models.StateChargeback {
		t.Disputed += p.Amount
	}
	if p.SettledAt != nil && !p.SettledAt.Before(start) && p.SettledAt.Before(end) {
		t.Settled += captured
	}
}

func sortedTotals(acc map[string]*CurrencyTotals) []CurrencyTotals {
	out := make([]CurrencyTotals, 0, len(acc))
	for _, t := range acc {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Currency < out[j].Currency })
	return out
}

// differs reports whether an item says the row's state or amount differs
// from the provider's after the run.
func differs(kind, action string, dry bool) bool {
	switch {
	case kind == models.KindDispute:
		return false // an open dispute is no chargeback yet, on either side
	case action == models.ActionRepaired:
		return dry // a real run moved the row to the provider's
	case action == models.ActionDelivered:
		return true // the row moves when the application's worker processes it
	}
	return action == models.ActionRefused || action == models.ActionReported
}

// mismatchDiffers reports whether a mismatch item leaves the row's money
// different from the provider's: a partial capture a real run recorded
// (amount_captured, no provider amount) does not.
func mismatchDiffers(action string, d map[string]any, dry bool) bool {
	_, captured := d["amount_captured"]
	_, provider := d["provider_amount"]
	if captured && !provider && !dry {
		return false
	}
	return differs(models.KindMismatch, action, dry)
}

// mismatchDiff is a mismatch item's provider minus local amount, when both
// are numbers of one currency.
func mismatchDiff(d map[string]any) (string, int64, bool) {
	lc, _ := d["local_currency"].(string)
	pc, _ := d["provider_currency"].(string)
	la, lok := d["local_amount"].(float64)
	pa, pok := d["provider_amount"].(float64)
	if !lok || !pok || lc == "" || !strings.EqualFold(lc, pc) {
		return "", 0, false
	}
	return strings.ToLower(lc), int64(pa) - int64(la), true
}

// LoadTotals computes run r's totals: the window's rows through the store,
// and the differences its drift items show. Memory is flat: rows and
// mismatch items are read a page at a time.
func LoadTotals(ctx context.Context, db *gorm.DB, r models.Run) (*Totals, error) {
	st := dbopen.Store(db, nil)
	if t, ok := measuredTotals(r); ok {
		if err := t.countItems(ctx, db, st, r); err != nil {
			return nil, err
		}
		t.finish()
		return t, nil
	}
	start, end := r.WindowStart.UTC(), r.WindowEnd.UTC()
	acc := map[string]*CurrencyTotals{}
	q := store.PaymentQuery{Provider: r.Provider, Account: r.Account, Since: start, Until: end, Limit: 5000}
	for {
		page, err := st.PaymentsInWindow(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, p := range page {
			addPayment(acc, p, start, end)
		}
		if len(page) < q.Limit {
			break
		}
		q.AfterID = page[len(page)-1].ID
	}
	now := time.Now().UTC()
	t := &Totals{Rows: sortedTotals(acc), RowsReadAt: &now, ProviderNote: ProviderNotMeasured, Scope: RowsScope}
	if err := t.countItems(ctx, db, st, r); err != nil {
		return nil, err
	}
	t.finish()
	return t, nil
}

// measuredTotals reads the totals a run measured (its notes' "totals").
func measuredTotals(r models.Run) (*Totals, bool) {
	var notes struct {
		Totals *struct {
			Scope      string                     `json:"scope"`
			Currencies []reconcile.CurrencyTotals `json:"currencies"`
		} `json:"totals"`
	}
	if json.Unmarshal(r.Notes, &notes) != nil || notes.Totals == nil {
		return nil, false
	}
	t := &Totals{Measured: true, Scope: notes.Totals.Scope, Rows: []CurrencyTotals{}, Provider: []CurrencyTotals{}, Difference: []CurrencyTotals{},
		ProviderNote: "measured by the run from the provider's facts of the window"}
	if r.FinishedAt != nil {
		at := r.FinishedAt.UTC()
		t.RowsReadAt = &at
	}
	side := func(c reconcile.CurrencyTotals, name string, m reconcile.Money) CurrencyTotals {
		return CurrencyTotals{Currency: c.Currency, Side: name, Payments: c.Payments, Captured: m.Captured, Refunded: m.Refunded, Disputed: m.Disputed, Settled: m.Settled}
	}
	for _, c := range notes.Totals.Currencies {
		t.Rows = append(t.Rows, side(c, "rows", c.Rows))
		t.Provider = append(t.Provider, side(c, "provider", c.Provider))
		d := reconcile.Money{Captured: c.Provider.Captured - c.Rows.Captured, Refunded: c.Provider.Refunded - c.Rows.Refunded,
			Disputed: c.Provider.Disputed - c.Rows.Disputed, Settled: c.Provider.Settled - c.Rows.Settled}
		t.Difference = append(t.Difference, side(c, "difference", d))
	}
	return t, true
}

// format is how a totals line's amounts are written: a difference signed.
func (c CurrencyTotals) format() func(int64, string) string {
	if c.Side == "difference" {
		return signedMoney
	}
	return money
}

// Lines are the totals as displayed: per currency the provider's side, the
// rows' and the difference when measured, else the rows' alone.
func (t *Totals) Lines() []CurrencyTotals {
	if !t.Measured {
		return t.Rows
	}
	var out []CurrencyTotals
	for i := range t.Rows {
		out = append(out, t.Provider[i], t.Rows[i], t.Difference[i])
	}
	return out
}

// countItems counts the run's items that show a row differing from the
// provider, and the mismatch items' amount differences.
func (t *Totals) countItems(ctx context.Context, db *gorm.DB, st store.Store, r models.Run) error {
	counts, ok := noteCounts(r)
	if !ok {
		var err error
		if counts, err = st.DriftCounts(ctx, r.ID); err != nil {
			return err
		}
	}
	mismatches := false
	for _, c := range counts {
		if c.Kind == models.KindMismatch {
			mismatches = mismatches || c.N > 0
		} else if differs(c.Kind, c.Action, r.DryRun) {
			t.DifferingItems += c.N // mismatch items are counted one by one below
		}
	}
	diffs := map[string]*CurrencyAmount{}
	if mismatches {
		if err := t.readMismatches(ctx, db, r, diffs); err != nil {
			return err
		}
	}
	t.AmountDifferences = sortedDiffs(diffs)
	return nil
}

// readMismatches counts the run's mismatch items that show a row differing
// from the provider, and adds their amount differences to diffs.
func (t *Totals) readMismatches(ctx context.Context, db *gorm.DB, r models.Run, diffs map[string]*CurrencyAmount) error {
	var last int64
	for {
		var batch []models.DriftItem
		if err := db.WithContext(ctx).Where("run_id = ? AND kind = ? AND id > ?", r.ID, models.KindMismatch, last).
			Order("id").Limit(5000).Find(&batch).Error; err != nil {
			return fmt.Errorf("read mismatch items of run %d: %w", r.ID, err)
		}
		for _, it := range batch {
			d := map[string]any{}
			_ = json.Unmarshal(it.Detail, &d)
			if mismatchDiffers(it.Action, d, r.DryRun) {
				t.DifferingItems++
			}
			addDiff(diffs, d)
		}
		if len(batch) < 5000 {
			break
		}
		last = batch[len(batch)-1].ID
	}
	return nil
}

// noteCounts is a finished run's items counted by kind and action, as
// the run recorded them when it ended (reconcile.DriftCountsNote): its
// items never change afterwards. A run without them (still running, ended
// by another run, or recorded before they were) is counted from its items.
func noteCounts(r models.Run) ([]store.DriftCount, bool) {
	if r.Status == models.RunRunning {
		return nil, false
	}
	var notes map[string]json.RawMessage
	if json.Unmarshal(r.Notes, &notes) != nil {
		return nil, false
	}
	raw, ok := notes[reconcile.DriftCountsNote]
	if !ok {
		return nil, false
	}
	var counts []store.DriftCount
	if json.Unmarshal(raw, &counts) != nil {
		return nil, false
	}
	return counts, true
}

func addDiff(diffs map[string]*CurrencyAmount, d map[string]any) {
	cur, n, ok := mismatchDiff(d)
	if !ok || n == 0 {
		return
	}
	a := diffs[cur]
	if a == nil {
		a = &CurrencyAmount{Currency: cur}
		diffs[cur] = a
	}
	a.Amount += n
	a.Items++
}

func sortedDiffs(diffs map[string]*CurrencyAmount) []CurrencyAmount {
	out := make([]CurrencyAmount, 0, len(diffs))
	for _, a := range diffs {
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Currency < out[j].Currency })
	return out
}

// TotalsFromItems fills totals' differences from a hand-built run's items
// (rows totals as given), for rendering a report not read from a database.
func TotalsFromItems(r RunReport, rows []CurrencyTotals) *Totals {
	t := &Totals{Rows: rows, ProviderNote: ProviderNotMeasured, Scope: RowsScope}
	if t.Rows == nil {
		t.Rows = []CurrencyTotals{}
	}
	diffs := map[string]*CurrencyAmount{}
	for _, it := range r.Items {
		switch {
		case it.Kind == models.KindMismatch:
			if mismatchDiffers(it.Action, it.Detail, r.DryRun) {
				t.DifferingItems++
			}
			addDiff(diffs, it.Detail)
		case differs(it.Kind, it.Action, r.DryRun):
			t.DifferingItems++
		}
	}
	t.AmountDifferences = sortedDiffs(diffs)
	t.finish()
	return t
}

// finish sets the flag from the differences.
func (t *Totals) finish() {
	t.Flagged = t.DifferingItems > 0 || len(t.AmountDifferences) > 0
	t.Flag = ""
	if t.Measured {
		var parts []string
		for _, d := range t.Difference {
			for _, f := range []struct {
				name string
				n    int64
			}{{"captured", d.Captured}, {"refunded", d.Refunded}, {"disputed", d.Disputed}, {"settled", d.Settled}} {
				if f.n != 0 {
					parts = append(parts, fmt.Sprintf("%s %s %s", strings.ToUpper(d.Currency), f.name, signedMoney(f.n, d.Currency)))
				}
			}
		}
		t.Flagged = len(parts) > 0
		if t.Flagged {
			t.Flag = "The window's totals differ from the provider's (the provider's minus the rows'): " + strings.Join(parts, ", ") +
				fmt.Sprintf("; %d %s of this run %s a row that differs.", t.DifferingItems, plural(int(t.DifferingItems), "item", "items"),
					plural(int(t.DifferingItems), "shows", "show"))
		}
		return
	}
	if !t.Flagged {
		return
	}
	var parts []string
	if t.DifferingItems > 0 {
		parts = append(parts, fmt.Sprintf("%d %s of this run %s a row whose state or amount differs from the provider's",
			t.DifferingItems, plural(int(t.DifferingItems), "item", "items"), plural(int(t.DifferingItems), "shows", "show")))
	}
	for _, a := range t.AmountDifferences {
		parts = append(parts, fmt.Sprintf("the provider's amounts minus the rows' are %s over %d mismatched %s",
			signedMoney(a.Amount, a.Currency), a.Items, plural(int(a.Items), "payment", "payments")))
	}
	t.Flag = "The window's totals differ from the provider's: " + strings.Join(parts, "; ") +
		". The provider's totals were not measured by the run; reconciler verify --all measures them."
}

// signedMoney is "+1.20 EUR" or "-3 JPY".
func signedMoney(minor int64, currency string) string {
	if minor >= 0 {
		return "+" + money(minor, currency)
	}
	return money(minor, currency)
}
