package payouts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
)

// Rows reads the local payment rows a payout is checked against. It only
// reads.
type Rows interface {
	// Naming returns the rows of provider whose payout_id is payout.
	Naming(ctx context.Context, provider, payout string) ([]Row, error)
	// ByIDs returns the rows of provider with the given provider ids; an id
	// with no row is absent from the answer.
	ByIDs(ctx context.Context, provider string, ids []string) ([]Row, error)
}

// Options configures Run.
type Options struct {
	Source Source
	Rows   Rows
	// Account, Since and Until select the payouts (Params).
	Account      string
	Since, Until time.Time
}

// Report is one provider account's payouts over a window, reconciled.
type Report struct {
	Provider string    `json:"provider"`
	Account  string    `json:"account"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	// Payouts counts the results, Mismatches those that mismatch,
	// InProgress and Unavailable those that could not be judged.
	Payouts     int `json:"payouts"`
	Mismatches  int `json:"mismatches"`
	InProgress  int `json:"in_progress"`
	Unavailable int `json:"items_unavailable"`
	// Results are in Sort's order: mismatches first.
	Results []Result `json:"results"`
}

// Run reconciles every payout of the window, one payout in memory at a
// time, and returns them sorted. It writes nothing.
func Run(ctx context.Context, o Options) (Report, error) {
	switch {
	case o.Source == nil:
		return Report{}, errors.New("payouts: Options.Source is nil")
	case o.Rows == nil:
		return Report{}, errors.New("payouts: Options.Rows is nil")
	case !o.Since.Before(o.Until):
		return Report{}, fmt.Errorf("payouts: the window [%s, %s) is empty", o.Since.Format(time.RFC3339), o.Until.Format(time.RFC3339))
	}
	provider := o.Source.Name()
	rep := Report{Provider: provider, Account: o.Account, Since: o.Since.UTC(), Until: o.Until.UTC(), Results: []Result{}}
	err := o.Source.ListPayouts(ctx, Params{Account: o.Account, Since: o.Since, Until: o.Until}, func(po Payout) error {
		local, err := loadLocal(ctx, o.Rows, provider, po)
		if err != nil {
			return err
		}
		r := Check(provider, o.Account, po, local)
		rep.Results = append(rep.Results, r)
		switch r.Outcome {
		case OutcomeMismatch:
			rep.Mismatches++
		case OutcomeInProgress:
			rep.InProgress++
		case OutcomeItemsUnavailable:
			rep.Unavailable++
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("list %s payouts: %w", provider, err)
	}
	rep.Payouts = len(rep.Results)
	Sort(rep.Results)
	return rep, nil
}

// idsPerQuery bounds the ids of one ByIDs query (SQLite allows 32766
// variables; PostgreSQL's plans stay small).
const idsPerQuery = 500

// loadLocal reads the rows that name po and those of the payments its lines
// pay out: one query, plus one per idsPerQuery payments.
func loadLocal(ctx context.Context, rows Rows, provider string, po Payout) (Local, error) {
	naming, err := rows.Naming(ctx, provider, po.ID)
	if err != nil {
		return Local{}, fmt.Errorf("read the rows naming payout %s: %w", po.ID, err)
	}
	local := Local{Naming: naming, Paid: map[string]Row{}}
	byID := map[string]Row{}
	for _, r := range naming {
		byID[r.ProviderID] = r
	}
	var ids []string
	seen := map[string]bool{}
	for _, l := range po.Lines {
		if !l.Pays() || seen[l.PaymentID] {
			continue
		}
		seen[l.PaymentID] = true
		if r, ok := byID[l.PaymentID]; ok {
			local.Paid[l.PaymentID] = r // already read: it names the payout
			continue
		}
		ids = append(ids, l.PaymentID)
	}
	for len(ids) > 0 {
		n := min(len(ids), idsPerQuery)
		got, err := rows.ByIDs(ctx, provider, ids[:n])
		if err != nil {
			return Local{}, fmt.Errorf("read the rows of payout %s's payments: %w", po.ID, err)
		}
		for _, r := range got {
			local.Paid[r.ProviderID] = r
		}
		ids = ids[n:]
	}
	return local, nil
}

// GormRows reads the rows through gorm, on either store.
type GormRows struct{ DB *gorm.DB }

var _ Rows = GormRows{}

// Naming implements Rows. payments has no index on payout_id, so on a large
// table each call scans it (docs/payouts.md).
func (g GormRows) Naming(ctx context.Context, provider, payout string) ([]Row, error) {
	m := models.AppSchemaOf(g.DB)
	if !m.Has("payout_id") {
		return nil, nil // the application's table records no payout
	}
	var ps []models.Payment
	err := g.DB.WithContext(ctx).Table(m.SQL("{payments} AS p")).Select(m.SQL(rowColumns)).
		Where(m.SQL("{p.provider} = ? AND {p.payout_id} = ?"), provider, payout).Order(m.SQL("{p.provider_id}")).Find(&ps).Error
	return rowsOf(ps), err
}

// rowColumns selects a Row's columns of the application's payments table
// (models.AppSchema: the application's names).
const rowColumns = `{p.provider_id} AS provider_id, {p.amount} AS amount, {p.amount_captured|NULL} AS amount_captured,
	{p.currency} AS currency, {p.payout_id|NULL} AS payout_id`

// ByIDs implements Rows.
func (g GormRows) ByIDs(ctx context.Context, provider string, ids []string) ([]Row, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	m := models.AppSchemaOf(g.DB)
	var ps []models.Payment
	err := g.DB.WithContext(ctx).Table(m.SQL("{payments} AS p")).Select(m.SQL(rowColumns)).
		Where(m.SQL("{p.provider} = ? AND {p.provider_id} IN ?"), provider, ids).Find(&ps).Error
	return rowsOf(ps), err
}

func rowsOf(ps []models.Payment) []Row {
	out := make([]Row, len(ps))
	for i, p := range ps {
		out[i] = Row{ProviderID: p.ProviderID, Amount: p.Amount, Currency: p.Currency}
		if p.AmountCaptured != nil && *p.AmountCaptured != p.Amount {
			out[i].AmountCaptured = *p.AmountCaptured
		}
		if p.PayoutID != nil {
			out[i].PayoutID = *p.PayoutID
		}
	}
	return out
}
