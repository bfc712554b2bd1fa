package stripe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/form"

	"github.com/reconciler/reconciler/payouts"
)

// Payout reconciliation for finance (docs/payouts.md,
// docs/providers/stripe.md section 21): the window's payouts from
// GET /v1/payouts?created[gte]&created[lt], 100 a page, and each
// automatic payout's balance transactions from
// GET /v1/balance_transactions?payout=po_…&expand[]=data.source, 100 a
// page, the request the settlement path makes (payoutChangesEach). A payout
// costs ceil(transactions / 100) requests, at least one; a manual payout
// none (Stripe cannot list it).

var _ payouts.Source = (*Provider)(nil)

// finPayout is what payout reconciliation reads of a payout.
type finPayout struct {
	ID                 string     `json:"id"`
	Amount             int64      `json:"amount"`
	Currency           string     `json:"currency"`
	Status             string     `json:"status"`
	Created            int64      `json:"created"`
	ArrivalDate        int64      `json:"arrival_date"`
	Automatic          *bool      `json:"automatic"`
	Reconciliation     string     `json:"reconciliation_status"`
	BalanceTransaction expandable `json:"balance_transaction"`
}

type finPayoutList struct {
	stripego.APIResource
	stripego.ListMeta
	Data []*finPayout `json:"data"`
}

// finBT is a balance transaction of a payout with its source expanded:
// its amounts, and the payment its source names.
type finBT struct {
	ID                string    `json:"id"`
	Type              string    `json:"type"`
	ReportingCategory string    `json:"reporting_category"`
	Amount            int64     `json:"amount"`
	Fee               int64     `json:"fee"`
	Net               int64     `json:"net"`
	Source            finSource `json:"source"`
}

type finBTList struct {
	stripego.APIResource
	stripego.ListMeta
	Data []*finBT `json:"data"`
}

// finSource is a balance transaction's source: an id, or (expanded) the
// object with the fields read here. A charge, refund and dispute each name
// their PaymentIntent.
type finSource struct {
	Object         string     `json:"object"`
	ID             string     `json:"id"`
	PaymentIntent  expandable `json:"payment_intent"`
	Amount         int64      `json:"amount"`
	AmountCaptured int64      `json:"amount_captured"`
	Captured       bool       `json:"captured"`
}

func (s *finSource) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || b[0] == 'n':
		*s = finSource{}
		return nil
	case b[0] == '"':
		*s = finSource{}
		return json.Unmarshal(b, &s.ID)
	}
	type plain finSource
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = finSource(p)
	return nil
}

// ListPayouts implements payouts.Source: every payout of p.Account created
// in [p.Since, p.Until) (whole seconds, as Stripe filters), whatever its
// status, each with its balance transactions but the payout's own.
func (p *Provider) ListPayouts(ctx context.Context, pp payouts.Params, fn func(payouts.Payout) error) error {
	since, until := pp.Since.Unix(), pp.Until.Unix()
	if pp.Since.Nanosecond() != 0 {
		since++ // [since, until) in whole seconds
	}
	if pp.Until.Nanosecond() != 0 {
		until++
	}
	params := &stripego.PayoutListParams{
		ListParams:   listParams(ctx, pp.Account, 100),
		CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: since, LesserThan: until},
	}
	it := stripego.GetIter(params, func(sp *stripego.Params, b *form.Values) ([]interface{}, stripego.ListContainer, error) {
		list := &finPayoutList{}
		err := p.api.Payouts.B.CallRaw(http.MethodGet, "/v1/payouts", p.api.Payouts.Key, b, sp, list)
		out := make([]interface{}, len(list.Data))
		for i, v := range list.Data {
			out[i] = v
		}
		return out, list, err
	})
	for it.Next() {
		po, err := p.finStripeLines(ctx, pp.Account, it.Current().(*finPayout))
		if err != nil {
			return err
		}
		if err := fn(po); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list stripe payouts: %w", translate(err))
	}
	return nil
}

// finStripeLines reads lp's balance transactions into a payouts.Payout.
func (p *Provider) finStripeLines(ctx context.Context, account string, lp *finPayout) (payouts.Payout, error) {
	po := payouts.Payout{ID: lp.ID, Status: lp.Status, Amount: lp.Amount, Currency: lp.Currency, Created: at(lp.Created),
		Paid: lp.Status == string(stripego.PayoutStatusPaid), Scale: 1, Listing: payouts.ListingComplete}
	if lp.ArrivalDate > 0 {
		po.ArrivalDate = at(lp.ArrivalDate).Truncate(24 * time.Hour)
	}
	manual := (lp.Automatic != nil && !*lp.Automatic) || lp.Reconciliation == string(stripego.PayoutReconciliationStatusNotApplicable)
	if manual {
		po.Listing, po.Note = payouts.ListingUnavailable, finManualNote
		return po, nil
	}
	if lp.Reconciliation == string(stripego.PayoutReconciliationStatusInProgress) {
		po.Listing = payouts.ListingInProgress
		po.Note = "Stripe is still assigning balance transactions to it (reconciliation_status in_progress)"
	}
	params := &stripego.BalanceTransactionListParams{
		ListParams: listParams(ctx, account, 100),
		Payout:     stripego.String(lp.ID),
	}
	params.AddExpand("data.source")
	it := stripego.GetIter(params, func(sp *stripego.Params, b *form.Values) ([]interface{}, stripego.ListContainer, error) {
		list := &finBTList{}
		err := p.api.BalanceTransactions.B.CallRaw(http.MethodGet, "/v1/balance_transactions", p.api.BalanceTransactions.Key, b, sp, list)
		out := make([]interface{}, len(list.Data))
		for i, v := range list.Data {
			out[i] = v
		}
		return out, list, err
	})
	for it.Next() {
		bt := it.Current().(*finBT)
		if lp.BalanceTransaction != "" && bt.ID == string(lp.BalanceTransaction) || bt.Type == string(stripego.BalanceTransactionTypePayout) && bt.Source.ID == lp.ID {
			continue // the payout's own transaction: -amount, the other side of the sum
		}
		po.Lines = append(po.Lines, finLine(bt))
	}
	if err := it.Err(); err != nil {
		if isManualPayoutRefusal(err) {
			po.Listing, po.Note, po.Lines = payouts.ListingUnavailable, finManualNote, nil
			return po, nil
		}
		return po, fmt.Errorf("list balance transactions of payout %s: %w", lp.ID, translate(err))
	}
	return po, nil
}

// finManualNote says why a manual payout has no lines.
const finManualNote = "Stripe lists no balance transactions for a payout made by hand (automatic: false), so it cannot say what it paid out"

// finLine maps one balance transaction: its kind for the breakdown and,
// for a charge, refund or dispute, the PaymentIntent its source names.
func finLine(bt *finBT) payouts.Line {
	l := payouts.Line{ID: bt.ID, Type: bt.Type, Amount: bt.Amount, Fee: bt.Fee, Net: bt.Net, Kind: payouts.KindOther}
	src := bt.Source
	switch bt.Type {
	case "charge", "payment":
		l.Kind = payouts.KindCharge
		if src.Object == "charge" {
			l.PaymentID = string(src.PaymentIntent)
			l.PaymentAmount = src.AmountCaptured
			if l.PaymentAmount == 0 {
				l.PaymentAmount = src.Amount
			}
		}
	case "refund", "payment_refund", "refund_failure", "payment_failure_refund":
		l.Kind = payouts.KindRefund
	case "stripe_fee", "stripe_fx_fee", "tax_fee":
		l.Kind = payouts.KindFee
	default:
		switch {
		case src.Object == "dispute", bt.ReportingCategory == "dispute", bt.ReportingCategory == "dispute_reversal":
			l.Kind = payouts.KindDispute
		case bt.ReportingCategory == "fee":
			l.Kind = payouts.KindFee
		}
	}
	if l.PaymentID == "" && (src.Object == "refund" || src.Object == "dispute") {
		l.PaymentID = string(src.PaymentIntent)
	}
	return l
}
