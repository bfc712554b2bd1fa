// Package reconcile is the engine: it plans a window, streams a provider's
// changes in provider-time order, decides each payment with a pure function
// and writes each batch in one transaction under the guard of DESIGN
// section 2.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// Change is one provider fact about one payment: "at At, the provider showed
// this payment in State". The provider maps its own statuses to states; the
// engine never sees a provider status it has to interpret.
type Change struct {
	ProviderID string       `json:"id,omitempty"` // pi_…, PM…
	State      models.State `json:"s,omitempty"`  // StateNone when the fact moves no state (a partial refund)
	At         time.Time    `json:"at"`           // the provider's own time of the fact
	// Snapshot is true when the fact shows the provider's whole view of the
	// payment at At (a PaymentIntent or charge object), so a local state ahead
	// of it at an earlier time is a conflict. A payout sweeping a charge is
	// not a snapshot: it says nothing about refunds or disputes.
	Snapshot bool `json:"snap,omitempty"`

	Amount         int64  `json:"amt,omitempty"` // minor units; 0 when the fact carries no amount
	Currency       string `json:"cur,omitempty"` // lower-case ISO 4217; "" when unknown
	AmountRefunded int64  `json:"ref,omitempty"` // refunds of captured money; 0 when the fact says nothing
	// AmountCaptured is set when the provider captured less than Amount (a
	// partial capture); 0 otherwise.
	AmountCaptured int64 `json:"capt,omitempty"`
	// PayoutID names the payout of a settlement fact (State settled).
	PayoutID string `json:"po,omitempty"`
	// View is set when the fact carries the provider's view of the
	// payment's refunds (a charge object): Refunded says whether it is fully
	// refunded and AmountRefunded how much captured money was. ViewCurrent
	// says the view is the object as it is now (a charge expanded from a
	// payout's balance transactions, a re-fetch), not at At.
	View        bool `json:"view,omitempty"`
	ViewCurrent bool `json:"viewnow,omitempty"`
	Refunded    bool `json:"refunded,omitempty"`
	// Fallback says the fact establishes its state only when no earlier
	// fact of the window showed it: GoCardless's late_failure_settled
	// (the payout debit) follows the failed event that established the
	// failure, and stands in for it only when that event is outside the
	// window.
	Fallback  bool   `json:"fallback,omitempty"`
	RawStatus string `json:"raw,omitempty"`     // the provider's own word, for reports ("requires_capture", "lost")
	Unknown   bool   `json:"unknown,omitempty"` // RawStatus maps to no state: reported, never guessed
	// Revert, when set, says the provider undid something our state machine
	// cannot undo (dispute won, refund failed): a drift item for a human.
	Revert string `json:"revert,omitempty"`
	// RevertOnlyFrom limits Revert to local rows in these states (a won
	// dispute matters only to a payment recorded as a chargeback).
	RevertOnlyFrom []models.State `json:"revert_from,omitempty"`
	// RevertIfRefunded limits Revert to local rows whose amount_refunded is
	// at least this much: a refund that failed or was canceled matters only
	// to a row that counted it.
	RevertIfRefunded int64 `json:"revert_ref,omitempty"`
	// RefundSince, with RevertIfRefunded, is when the refund that failed
	// was created: the refunds that facts between RefundSince and At show
	// counted it, and are read without it (a refund that failed within the
	// run's facts is never counted).
	RefundSince time.Time `json:"ref_since,omitzero"`
	// Notice, when set with NoticeKind, is a fact for a person that moves no
	// state (an open dispute): reported as an item of that kind. Facts with
	// the same NoticeKind replace each other in provider-time order, and one
	// with NoticeKind set and Notice empty withdraws the notice (the dispute
	// closed). With Unknown set, Notice is the item's explanation.
	Notice     string `json:"notice,omitempty"`
	NoticeKind string `json:"notice_kind,omitempty"`
	// RefundNote says what the provider's amount_refunded counts (GoCardless:
	// refunds from their creation); a refund the run raises says so.
	RefundNote string `json:"refund_note,omitempty"`

	EventID   string `json:"ev,omitempty"` // the event that shows the fact, or a deterministic recon:… id
	EventType string `json:"evt,omitempty"`
	Inferred  bool   `json:"inferred,omitempty"` // the time was inferred from the object, not an event
	// Payload is the object a deterministic (recon:…) event records; events
	// listed by the provider carry theirs in Event.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Event is a provider event as listed, recorded in webhook_events when the
// application lacks it.
type Event struct {
	ID      string
	Type    string
	At      time.Time
	Payload json.RawMessage
	// Unread says the provider could not read the event (a Stripe API
	// version newer than the mapping knows): it counts as read but is never
	// recorded in webhook_events, so that the application's own delivery of
	// it is processed, not dropped as a duplicate of an event no one read.
	Unread bool
}

// Page is one unit of the stream: events in provider-time order and the
// changes they imply, also in provider-time order.
type Page struct {
	Events  []Event
	Changes []Change
	// Cursor and CursorAt name the page's last event: a run that committed
	// this page can be resumed after it.
	Cursor   string
	CursorAt time.Time
	// listed marks a batch read by object listing (path 3): the synthetic
	// events it records are listed facts, not missed webhooks.
	listed bool
}

// nextFrom is an empty page for the reader's next batch, keeping whether p
// was listed. Its slices come from a page the writer is done with (free,
// which may be nil) when each is as large as p's (batches run to about one
// size); a new one has a quarter more room, so that it fits the batches
// after it when it comes back. Slices of Change (a large struct) grown by
// doubling were a sixth of a rerun's allocations, and fresh ones each
// batch a tenth.
func (p Page) nextFrom(free <-chan Page) Page {
	nc, ne := len(p.Changes), len(p.Events)
	var f Page
	select {
	case f = <-free:
	default:
	}
	next := Page{Changes: f.Changes, Events: f.Events, listed: p.listed}
	if cap(next.Changes) < nc {
		next.Changes = make([]Change, 0, nc+nc/4)
	}
	if cap(next.Events) < ne {
		next.Events = make([]Event, 0, ne+ne/4)
	}
	return next
}

// Reuse is an empty page holding p's slices, cleared (so that nothing they
// pointed to is kept alive): a provider's next page, once ListChanges' fn
// returned, or the reader's, once the writer wrote the batch.
func (p Page) Reuse() Page {
	clear(p.Changes)
	clear(p.Events)
	return Page{Changes: p.Changes[:0], Events: p.Events[:0]}
}

// recycle hands p's slices to the reader's next page (free, not waiting
// when it is full). Nothing may hold p's Changes or Events after: a batch
// copies its facts (newBatch) and its events (insertEvents).
func recycle(p Page, free chan<- Page) {
	select {
	case free <- p.Reuse():
	default:
	}
}

// ListParams selects the changes of one account in a window [Since, Until).
type ListParams struct {
	Account string
	Since   time.Time
	Until   time.Time
	// After and AfterAt resume a window after the event a crashed run
	// committed last; empty for a fresh read.
	After   string
	AfterAt time.Time
}

// FetchParams names payments to re-fetch by id (the stuck-payment path).
type FetchParams struct {
	Account     string
	ProviderIDs []string
}

// Provider is what the engine needs from a payment provider. Implementations
// live in providers/…; each asserts it at compile time.
type Provider interface {
	// Name is the provider's name in the database ("stripe").
	Name() string
	// Horizon is the oldest time the provider's event log still holds, as
	// of now; zero when it has none.
	Horizon(now time.Time) time.Time
	// ListChanges calls fn with the window's pages, oldest first. It stops at
	// the first error fn returns and returns it. fn must not keep a page's
	// Changes or Events after it returns (copying them out is fine): the
	// provider may reuse them for the next page.
	ListChanges(ctx context.Context, p ListParams, fn func(Page) error) error
	// Fetch re-reads payments by id and returns one or more changes per
	// payment with deterministic event ids.
	Fetch(ctx context.Context, p FetchParams) ([]Change, error)
	// Requests returns the number of HTTP requests made so far.
	Requests() int64
}

// Sentinel errors.
var (
	// ErrLocked means another run holds the lock for the provider and account.
	ErrLocked = store.ErrLocked
	// ErrBadWindow means the window asked for cannot be read as asked
	// (empty or inverted once clamped, or ending in the future): a usage
	// error, reported before any run is recorded.
	ErrBadWindow = errors.New("bad window")
	// ErrInterrupted means the run was stopped (SIGTERM) before it finished.
	ErrInterrupted = errors.New("run interrupted")
)
