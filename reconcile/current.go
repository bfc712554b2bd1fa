package reconcile

import (
	"context"

	"github.com/reconciler/reconciler/models"
)

// Current is what a provider's own current objects say about one payment,
// read by id. It is the oracle of `reconciler verify` (DESIGN section 9):
// the provider's objects as they are now, never a fake's idea of the truth.
type Current struct {
	ProviderID string
	// Found is false when the provider does not know the id (404).
	Found bool
	// State is the state the provider's objects establish (DESIGN section 4):
	// StateNone with Unknown set when RawStatus maps to no state.
	State models.State
	// SettlementKnown says the objects can tell paid out from not: a
	// GoCardless payment always can (paid_out); a Stripe payment only
	// through a payout it was asked about (CurrentParams.Payouts). When it
	// is false, State is never settled and a local settled row is not
	// contradicted by a captured one.
	SettlementKnown bool
	// PayoutID is the payout that paid the payment out, as far as the
	// objects read show ("" for none); PayoutStatus is that payout's status
	// (Stripe: pending, in_transit, paid, failed, canceled; GoCardless:
	// pending, paid, bounced), or, when PayoutID is "" but a local payout
	// was checked, the checked payout's status ("missing" when the provider
	// does not know it).
	PayoutID     string
	PayoutStatus string
	// Amount and Currency (lower-case ISO 4217) of the payment.
	Amount   int64
	Currency string
	// AmountRefunded counts refunds of captured money only: 0 for a
	// canceled authorisation, and without the released remainder of a
	// partial capture.
	AmountRefunded int64
	// AmountCaptured is the captured amount; 0 when nothing was captured.
	AmountCaptured int64
	// RawStatus is the provider's own word ("succeeded", "paid_out").
	RawStatus string
	// Unknown is set when RawStatus maps to no state: never guessed.
	Unknown bool
}

// CurrentParams names the payments to read.
type CurrentParams struct {
	Account string
	IDs     []string
	// Payouts maps provider_id to the payout_id the local row records, so
	// that a provider that can check a payout does (Stripe: is the payout
	// paid, and did it pay this payment?).
	Payouts map[string]string
	// Listed holds payments already read by CurrentLister.ListCurrent: a
	// reader completes them (the local payout's check) without reading the
	// payment again.
	Listed map[string]Current
}

// CurrentReader reads payments' current state from a provider by id. It is
// implemented beside each provider (providers/stripe, providers/gocardless).
type CurrentReader interface {
	// Current returns one Current per id of p.IDs, in that order; an id the
	// provider does not know is Found=false, never an error. An error means
	// the provider could not be read (unreachable, 5xx after retries, an
	// answer for another object).
	Current(ctx context.Context, p CurrentParams) ([]Current, error)
}
