// Package payouts reconciles a provider's payouts for finance: each payout's
// amount against the sum of its lines (Stripe's balance transactions,
// GoCardless's payout items), broken down into charges, refunds, fees,
// dispute adjustments and other, and against the local payment rows that
// name it (payments.payout_id). It reads the provider through the small
// Source interface it declares (each provider asserts it) and the rows
// through gorm, on PostgreSQL and the embedded SQLite alike; it writes
// nothing anywhere.
//
// The deciding part, Check, is a pure function of one payout and its rows;
// Run streams the window's payouts through it one at a time, so memory holds
// one payout's lines, never the window's.
package payouts

import (
	"context"
	"time"
)

// Params selects the payouts of one account created in [Since, Until).
type Params struct {
	// Account is the Stripe connected account ("" for the platform; always
	// "" for GoCardless).
	Account string
	// Since and Until bound the payouts' creation time, Until excluded.
	Since, Until time.Time
}

// Source lists a provider's payouts with their lines. Both providers
// implement it (providers/stripe, providers/gocardless).
type Source interface {
	// Name is the provider's name in payments.provider.
	Name() string
	// ListPayouts calls fn once for every payout of p.Account created in
	// [p.Since, p.Until), each with all of its lines (or with a Listing
	// saying why they are not all there), in any order. A provider that no
	// longer serves a payout's lines (GoCardless after six months, a
	// Stripe payout made by hand) reports the payout with ListingUnavailable
	// rather than failing. An error from fn stops the listing and is
	// returned as it is.
	ListPayouts(ctx context.Context, p Params, fn func(Payout) error) error
}

// Listing says how complete a payout's lines are.
type Listing string

// The listings.
const (
	// ListingComplete: the lines are every line of the payout.
	ListingComplete Listing = "complete"
	// ListingInProgress: the provider is still assigning lines to the
	// payout (Stripe's reconciliation_status in_progress), so the lines
	// may be short and nothing is judged yet.
	ListingInProgress Listing = "in_progress"
	// ListingUnavailable: the provider serves no lines for this payout
	// (GoCardless answers 410 Gone for payouts older than six months;
	// Stripe cannot list a manual payout's transactions).
	ListingUnavailable Listing = "unavailable"
)

// Payout is one payout and its lines, as the provider reports them.
type Payout struct {
	ID       string
	Status   string // the provider's own status (paid, pending, failed, bounced, …)
	Amount   int64  // minor units
	Currency string // lower-case ISO 4217
	Created  time.Time
	// ArrivalDate is the day the payout is due in the bank (UTC midnight);
	// zero when the provider does not say yet.
	ArrivalDate time.Time
	// Paid says the provider reports the payout as paid (or as having been
	// paid: a GoCardless payout that bounced). Only then are its payments'
	// rows expected to name it: the run records a payment's payout when the
	// payout is paid, so before that a row naming no payout is no mismatch.
	Paid bool
	// Scale is how many line units make one minor unit: 1 for Stripe, 10
	// for GoCardless, whose payout items are "to one decimal place" of a
	// minor unit. 0 is read as 1.
	Scale int64
	// Listing says whether Lines are all of the payout's lines, and Note
	// why not (one clause for finance, e.g. "GoCardless serves payout items
	// only for payouts created in the last six months").
	Listing Listing
	Note    string
	Lines   []Line
}

// Kind is the finance breakdown a line counts towards.
type Kind string

// The kinds.
const (
	KindCharge  Kind = "charge"  // a payment collected (Stripe charge or payment; GoCardless payment_paid_out)
	KindRefund  Kind = "refund"  // a refund, a failed refund's return, refunded funds returned
	KindFee     Kind = "fee"     // a fee line of its own (Stripe stripe_fee, GoCardless gocardless_fee, app_fee, …)
	KindDispute Kind = "dispute" // dispute funds withdrawn or reinstated, a chargeback
	KindOther   Kind = "other"   // anything else (a late failure's debit, a transfer, a reserve, …)
)

// Line is one line of a payout. Amounts are in line units (Payout.Scale of
// them make a minor unit), signed as the provider signs them: credits to
// the merchant positive.
type Line struct {
	ID   string // the provider's id of the line (txn_…); "" when it has none (GoCardless)
	Type string // the provider's own type (charge, refund, stripe_fee, payment_paid_out, …)
	Kind Kind
	// Amount is the gross amount, Fee the fee deducted from it (Stripe's
	// balance transaction fee; 0 for GoCardless, whose fees are lines of
	// their own) and Net what the line adds to the payout: Amount - Fee.
	Amount, Fee, Net int64
	// PaymentID is the payment the line is about (pi_…, PM…), when the
	// provider names one: the charge's, refund's or dispute's PaymentIntent
	// for Stripe, links.payment for GoCardless.
	PaymentID string
	// PaymentAmount, on a charge line, is what the provider says the
	// payment collected (Stripe: the charge's amount_captured; GoCardless:
	// the payment_paid_out item), in line units: the local row's amount is
	// compared with it.
	PaymentAmount int64
}

// Pays reports whether the line pays a payment out: a charge line naming a
// payment. Only those payments' rows are expected to name the payout; a
// refund or a dispute of a payment paid out earlier sits in a later payout
// while the row still (rightly) names the first.
func (l Line) Pays() bool { return l.Kind == KindCharge && l.PaymentID != "" }

// Row is a local payment row as the check reads it.
type Row struct {
	ProviderID string
	Amount     int64
	// AmountCaptured is the captured amount when it differs from Amount (a
	// partial capture); 0 when it does not.
	AmountCaptured int64
	Currency       string
	PayoutID       string // "" when the row names no payout
}

// Collected is what the row says the payment collected: the captured
// amount of a partial capture, else the amount.
func (r Row) Collected() int64 {
	if r.AmountCaptured > 0 {
		return r.AmountCaptured
	}
	return r.Amount
}

// Local is what the database holds about one payout: the rows that name it,
// and the rows of the payments its lines pay out (by provider id; a payment
// with no row is absent).
type Local struct {
	Naming []Row
	Paid   map[string]Row
}
