package gocardless

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/reconciler/reconciler/payouts"
)

// Payout reconciliation for finance (docs/payouts.md,
// docs/providers/gocardless.md "Payout reconciliation"): the window's
// payouts from GET /payouts?created_at[gte]&created_at[lt], 500 a page, and
// each payout's items from GET /payout_items?payout=PO…, 500 a page. A
// payout costs ceil(items / 500) requests, at least one. GoCardless serves
// payout items only for payouts created in the last six months ("Requests
// for older payouts will return an HTTP status 410 Gone"): such a payout is
// reported with its items unavailable, not as a failure.

var _ payouts.Source = (*Provider)(nil)

// finPayout is what payout reconciliation reads of a payout.
type finPayout struct {
	ID          string    `json:"id"`
	Amount      int64     `json:"amount"`
	Currency    string    `json:"currency"`
	Status      string    `json:"status"`
	ArrivalDate *string   `json:"arrival_date"`
	CreatedAt   time.Time `json:"created_at"`
}

// finItem is one credit or debit of a payout. Amount is a string in
// minor units "to one decimal place".
type finItem struct {
	Type   string `json:"type"`
	Amount string `json:"amount"`
	Links  struct {
		Payment string `json:"payment"`
	} `json:"links"`
}

// finItemsGone says why a payout older than six months has no lines.
const finItemsGone = "GoCardless serves payout items only for payouts created in the last six months (410 Gone)"

// ListPayouts implements payouts.Source: every payout created in
// [p.Since, p.Until) (milliseconds, as GoCardless filters), whatever its
// status, each with its payout items. GoCardless has no connected
// accounts: p.Account must be "".
func (p *Provider) ListPayouts(ctx context.Context, pp payouts.Params, fn func(payouts.Payout) error) error {
	if pp.Account != "" {
		return fmt.Errorf("gocardless has no connected accounts (asked for %q)", pp.Account)
	}
	q := url.Values{}
	q.Set("created_at[gte]", msCeil(pp.Since))
	q.Set("created_at[lt]", msCeil(pp.Until))
	q.Set("limit", "500")
	for {
		var pg struct {
			Payouts []finPayout `json:"payouts"`
			Meta    listMeta    `json:"meta"`
		}
		if err := p.get(ctx, "/payouts", q, &pg); err != nil {
			return fmt.Errorf("list gocardless payouts: %w", err)
		}
		for _, lp := range pg.Payouts {
			po, err := p.finItems(ctx, lp)
			if err != nil {
				return err
			}
			if err := fn(po); err != nil {
				return err
			}
		}
		after := pg.Meta.next(len(pg.Payouts))
		if after == "" {
			return nil
		}
		q.Set("after", after)
	}
}

// finItems reads lp's items into a payouts.Payout (amounts in
// tenths of a minor unit: Scale 10).
func (p *Provider) finItems(ctx context.Context, lp finPayout) (payouts.Payout, error) {
	po := payouts.Payout{ID: lp.ID, Status: lp.Status, Amount: lp.Amount, Currency: strings.ToLower(lp.Currency),
		Created: lp.CreatedAt.UTC(), Paid: lp.Status == "paid" || lp.Status == "bounced", Scale: 10, Listing: payouts.ListingComplete}
	if lp.ArrivalDate != nil && *lp.ArrivalDate != "" {
		d, err := time.Parse(time.DateOnly, *lp.ArrivalDate)
		if err != nil {
			return po, fmt.Errorf("gocardless payout %s: arrival_date %q is not a date", lp.ID, *lp.ArrivalDate)
		}
		po.ArrivalDate = d
	}
	q := url.Values{}
	q.Set("payout", lp.ID)
	q.Set("limit", "500")
	for {
		var pg struct {
			Items []finItem `json:"payout_items"`
			Meta  listMeta  `json:"meta"`
		}
		if err := p.get(ctx, "/payout_items", q, &pg); err != nil {
			var ae *APIError
			if errors.As(err, &ae) && ae.Status == http.StatusGone {
				po.Listing, po.Note, po.Lines = payouts.ListingUnavailable, finItemsGone, nil
				return po, nil
			}
			return po, fmt.Errorf("list gocardless payout items of %s: %w", lp.ID, err)
		}
		for _, it := range pg.Items {
			l, err := finItemLine(it)
			if err != nil {
				return po, fmt.Errorf("gocardless payout %s: %w", lp.ID, err)
			}
			po.Lines = append(po.Lines, l)
		}
		after := pg.Meta.next(len(pg.Items))
		if after == "" {
			return po, nil
		}
		q.Set("after", after)
	}
}

// finItemLine maps one payout item: its kind for the breakdown (GoCardless's
// fees are items of their own, so no line carries a fee) and the payment
// it links.
func finItemLine(it finItem) (payouts.Line, error) {
	tenths, err := finTenths(it.Amount)
	if err != nil {
		return payouts.Line{}, fmt.Errorf("payout item %s: %w", it.Type, err)
	}
	l := payouts.Line{Type: it.Type, Amount: tenths, Net: tenths, PaymentID: it.Links.Payment, Kind: payouts.KindOther}
	switch it.Type {
	case "payment_paid_out":
		l.Kind, l.PaymentAmount = payouts.KindCharge, tenths
	case "payment_refunded", "refund", "refund_funds_returned":
		l.Kind = payouts.KindRefund
	case "payment_charged_back":
		l.Kind = payouts.KindDispute
	case "gocardless_fee", "app_fee", "revenue_share", "surcharge_fee":
		l.Kind = payouts.KindFee
	}
	return l, nil
}

// finTenths reads an item amount ("1000.0", "-12.5", "300") as tenths of
// a minor unit. More than one decimal place, or anything that is not a
// decimal number, is an error: never a silent zero.
func finTenths(s string) (int64, error) {
	whole, frac, dot := strings.Cut(strings.TrimSpace(s), ".")
	if dot && (len(frac) != 1 || frac[0] < '0' || frac[0] > '9') {
		return 0, fmt.Errorf("amount %q is not in minor units to one decimal place", s)
	}
	neg := strings.HasPrefix(whole, "-")
	digits := strings.TrimPrefix(whole, "-")
	if digits == "" || strings.ContainsFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, fmt.Errorf("amount %q is not a decimal number", s)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > (1<<62)/10 {
		return 0, fmt.Errorf("amount %q is out of range", s)
	}
	n *= 10
	if dot {
		n += int64(frac[0] - '0')
	}
	if neg {
		n = -n
	}
	return n, nil
}
