package reconcile

import "context"

// ObjectLister is a provider that can read a window by listing its payment
// objects (DESIGN section 3, path 3): for a window, or the part of one,
// older than its event log (Provider.Horizon), and on demand (mode
// listing). The engine uses it when the provider implements it; otherwise a
// window older than the horizon is clamped and says so.
type ObjectLister interface {
	// ListObjects calls fn with pages of changes for the window [p.Since,
	// p.Until) of p.Account, as the provider's objects show them now, capped
	// at p.Until:
	//
	//   - the payments created in the window, each with the facts its
	//     objects date (created, authorised, captured, refunded, a dispute,
	//     settled), and the settlements and refunds the window's payouts
	//     and refunds show for payments created before it;
	//   - a fact the objects date at or after p.Until is left out, and
	//     amounts count only what happened before it (refunds created
	//     before p.Until), so that the events after p.Until, read by the
	//     event log, are not applied twice under two ids;
	//   - every change has a deterministic event id (SyntheticEventID),
	//     Inferred set, and Payload the object it was read from; a status
	//     the mapping does not know is Unknown, never guessed.
	//
	// Pages carry no Events and no Cursor (a listing is read again whole,
	// never resumed). Memory stays flat: each page is handed to fn before
	// the next is read (a provider that answers late may list a few
	// stretches of the window at once, each page still handed on before its
	// stretch's next is read, in the order they arrive). p.After and
	// p.AfterAt are ignored. It stops at the first error fn returns and
	// returns it.
	ListObjects(ctx context.Context, p ListParams, fn func(Page) error) error
}

// CurrentLister is a CurrentReader that can also list the current objects
// of the payments created in a window, a page at a time (`reconciler
// verify` over a large window: one request per page of 100 or 500
// payments instead of one per payment).
type CurrentLister interface {
	// ListCurrent calls fn with the Current of each payment of p.Account
	// created in [p.Since, p.Until), as CurrentReader.Current would answer
	// for it without a local payout to check (CurrentParams.Payouts empty),
	// a page at a time. It stops at the first error fn returns.
	ListCurrent(ctx context.Context, p ListParams, fn func([]Current) error) error
}

// Mode names for Options.Mode and the run's notes.
const (
	// ModeAuto reads the event log, and lists objects for the part of the
	// window older than the provider's event log.
	ModeAuto = "auto"
	// ModeListing reads the whole window by listing objects.
	ModeListing = "listing"
	// ModeEvents reads the event log only and clamps a window older than
	// it (the behaviour before object listing).
	ModeEvents = "events"
)
