// Package store declares what reconciler needs of its database: the
// engine's batched and guarded statements, the run lock, the run record and
// the few reads around them. Each SQL dialect implements it in a package of
// its own (store/pgstore for PostgreSQL, store/sqlitestore for the embedded
// file), translates its driver's errors into the sentinels below at that
// boundary, and passes the one shared suite in store/storetest. Nothing
// above this package knows which dialect it talks to.
//
// Every batch statement takes a slice and costs one round trip whatever its
// length. Every statement that moves a payment applies the guard of DESIGN
// section 2 in SQL, so a statement retried, repeated or raced by the live
// webhook worker never moves a row backwards.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/reconciler/reconciler/models"
)

// Sentinel errors, the same whatever the dialect.
var (
	// ErrLocked means another run holds the lock asked for.
	ErrLocked = errors.New("another run holds the lock for this provider and account")
	// ErrNotFound means the row asked for by id does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means the database aborted a transaction for a deadlock
	// or a serialization failure; InTx retries it, and it reaches a caller
	// only when every retry failed too.
	ErrConflict = errors.New("transaction aborted by a concurrent one")
	// ErrLockLost means a run lock taken earlier is no longer held: its
	// PostgreSQL session ended (the backend was terminated, the connection
	// broke), or the embedded store's lock row names another holder.
	// Another run may hold the lock now.
	ErrLockLost = errors.New("the run lock is no longer held")
)

// Store is one database holding reconciler's schema.
type Store interface {
	// Dialect names the SQL dialect: "postgres" or "sqlite".
	Dialect() string
	// RoundTrips counts the statements sent through InTx so far, BEGIN and
	// COMMIT included.
	RoundTrips() int64
	// InTx runs fn in one transaction, committed when fn returns nil. A
	// transaction aborted by a concurrent one is retried from the start
	// (fn must be safe to run again), sleeping on the store's clock.
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
	// TryLock takes the run lock named key, or returns ErrLocked at once.
	// The lock outlives no process: PostgreSQL releases a dead session's
	// advisory lock; the embedded store takes over a dead local holder's.
	// A held lock costs no connection of the store's pool: on PostgreSQL it
	// lives on a connection of its own, outside the pool's budget, so N
	// concurrent runs never starve their own transactions of connections.
	TryLock(ctx context.Context, key string) (Lock, error)

	RunRecord
	Reads
	Notifications
}

// Lock is a held run lock.
type Lock interface {
	// Release gives the lock up; it is safe to call once.
	Release(ctx context.Context) error
	// Held returns nil while the lock is still this holder's, and an error
	// wrapping ErrLockLost once it is not (another run may have taken it).
	// It is one cheap round trip; the engine asks before every commit, so
	// that no batch commits after the lock was lost. Other errors (ctx
	// ended) mean it could not tell.
	Held(ctx context.Context) error
}

// RunRecord is the one owner of reconciliation_runs and of the run's carry
// rows; every reader of runs goes through it (or the helpers in runs.go).
type RunRecord interface {
	// CreateRun inserts r (ID is set).
	CreateRun(ctx context.Context, r *models.Run) error
	// InterruptOthers marks every other running run of (provider, account)
	// interrupted at at with msg: the caller holds the lock, so they died.
	// It returns how many it marked.
	InterruptOthers(ctx context.Context, provider, account string, runID int64, at time.Time, msg string) (int64, error)
	// FinishRun records how run r ended: status, finished_at, error,
	// api_requests and, when set, notes (the batch counters are written by
	// Tx.AddCounts). It
	// changes only a run still recorded running: a run that another one has
	// already marked interrupted (InterruptOthers) keeps that record. It
	// reports whether it changed the row; false with a nil error means the
	// record says otherwise (GetRun tells what).
	FinishRun(ctx context.Context, r models.Run) (bool, error)
	// GetRun reads one run; ErrNotFound when there is none.
	GetRun(ctx context.Context, id int64) (models.Run, error)
	// FindRuns lists runs matching q, newest first unless q says otherwise.
	FindRuns(ctx context.Context, q RunQuery) ([]models.Run, error)
	// DriftCounts counts a run's drift items by kind and action.
	DriftCounts(ctx context.Context, runID int64) ([]DriftCount, error)
	// ForgetCarry deletes what run runID carried between batches.
	ForgetCarry(ctx context.Context, runID int64) error
	// ForgetDeadCarry deletes what ended runs of (provider, account) other
	// than runID still carry.
	ForgetDeadCarry(ctx context.Context, provider, account string, runID int64) error
}

// Reads are the engine's and the verifier's reads outside a batch.
type Reads interface {
	// WindowStates pages (by provider_id, after q.After) through the rows of
	// (provider, account) whose state is not created and whose
	// source_updated_at lies in [q.Since, q.Until).
	WindowStates(ctx context.Context, q WindowQuery) ([]PaymentState, error)
	// StuckPayments lists up to q.Limit rows in q.States whose
	// source_updated_at is before q.Before: those never re-fetched first,
	// then those MarkChecked longest ago, each oldest source_updated_at
	// first. A payment that cannot move yet therefore waits its turn
	// instead of holding a slot every run.
	StuckPayments(ctx context.Context, q StuckQuery) ([]string, error)
	// MarkChecked records that the stuck-payment path re-fetched ids at at
	// (reconciler_checks); the one write outside a batch, one statement.
	MarkChecked(ctx context.Context, provider, account string, ids []string, at time.Time) error
	// PaymentsInWindow pages (by id, after q.AfterID) through the rows of
	// (provider, account) whose source_updated_at or settled_at lies in
	// [q.Since, q.Until).
	PaymentsInWindow(ctx context.Context, q PaymentQuery) ([]models.Payment, error)
	// CountInWindow counts the rows PaymentsInWindow pages through
	// (q.AfterID and q.Limit are ignored).
	CountInWindow(ctx context.Context, q PaymentQuery) (int, error)
	// PayoutsInWindow lists the payout ids those rows name, each once (q.AfterID
	// and q.Limit are ignored).
	PayoutsInWindow(ctx context.Context, q PaymentQuery) ([]string, error)
}

// Tx is one transaction's batch statements.
type Tx interface {
	// LoadPayments reads the rows of ids, ordered by provider_id.
	LoadPayments(ctx context.Context, provider string, ids []string) ([]Payment, error)
	// InsertPayments creates rows for payments not known locally; a row
	// that exists already wins (it is not changed). It returns the rows it
	// created, as LoadPayments reads them (the engine need not read them
	// again).
	InsertPayments(ctx context.Context, provider, account string, rows []NewPayment) ([]Payment, error)
	// ApplySteps moves each payment one step under the guard: only from an
	// allowed predecessor of the step's state (models.Predecessors), and
	// never to an earlier provider time except settled → refunded or
	// chargeback (models.TimeExempt). It returns the rows that moved, as
	// they are after the statement (what LoadPayments reads then). A step
	// with a settlement records it with the move (Step.Settled): one new row
	// version instead of two.
	ApplySteps(ctx context.Context, provider string, steps []Step) ([]Payment, error)
	// RaiseRefunds raises amount_refunded, never lowering it and never on a
	// canceled row. It returns the rows it raised, as they are after.
	RaiseRefunds(ctx context.Context, provider string, rows []Refund) ([]Payment, error)
	// RecordSettlements records the payout that paid each payment out,
	// whatever its state: settled_at when empty, and a payout id the row
	// lacks or a later payout's. It returns the rows it filled in, as they
	// are after.
	RecordSettlements(ctx context.Context, provider string, rows []Settlement) ([]Payment, error)
	// RecordCaptured records partial captures' captured amounts. It returns
	// the rows it changed, as they are after.
	//
	// A row these four statements changed stays locked by the transaction
	// until it ends, so the last of them to return it returns the row as
	// the transaction leaves it: the engine reads again only the rows it
	// sent a statement that changed nothing.
	RecordCaptured(ctx context.Context, provider string, rows []Capture) ([]Payment, error)
	// LoadCarry reads what run runID carries about ids.
	LoadCarry(ctx context.Context, runID int64, ids []string) ([]Carry, error)
	// SaveCarry upserts rows and deletes drop.
	SaveCarry(ctx context.Context, runID int64, rows []Carry, drop []string) error
	// DeleteItems removes run runID's drift items of ids.
	DeleteItems(ctx context.Context, runID int64, provider string, ids []string) error
	// InsertItems adds drift items to run runID.
	InsertItems(ctx context.Context, runID int64, provider string, rows []Item) error
	// ReplaceItems rewrites in place the one drift item run runID holds
	// for each row's payment (a payment decided again by a later batch),
	// keeping its id: on PostgreSQL a heap-only update beside the old
	// version (migration 0012), where DeleteItems and InsertItems cost a
	// delete, an insert into each index and a foreign-key check (issue
	// 16). The caller makes sure each payment has exactly one item of the
	// run; a payment without one gets none.
	ReplaceItems(ctx context.Context, runID int64, provider string, rows []Item) error
	// InsertEvents records the events webhook_events lacks as synthetic
	// rows of run runID and returns how many were new: processed (now),
	// or unprocessed when the event says Deliver.
	InsertEvents(ctx context.Context, runID int64, source string, rows []Event) (int64, error)
	// InsertEventsDirect is InsertEvents without first asking which events
	// are recorded: every payload is sent and the insert's ON CONFLICT
	// discards the recorded ones. Cheaper when none is recorded (a first
	// run, an empty schema); dearer when most are (a night whose webhooks
	// came), so the caller picks by what the last batch found.
	InsertEventsDirect(ctx context.Context, runID int64, source string, rows []Event) (int64, error)
	// MissingEvents counts the ids webhook_events lacks (dry runs).
	MissingEvents(ctx context.Context, source string, ids []string) (int64, error)
	// AddCounts adds a batch's counters to run runID and moves its resume
	// cursor (kept when p.Cursor is empty).
	AddCounts(ctx context.Context, runID int64, p Progress) error
}

// Payment is a payment row as the engine reads it.
type Payment struct {
	ProviderID     string
	State          models.State
	At             *time.Time // source_updated_at
	Amount         int64
	Currency       string
	AmountRefunded int64
	SettledAt      *time.Time
	PayoutID       string // "" for none
	AmountCaptured int64  // 0 for none
}

// PaymentState is a payment's id and state.
type PaymentState struct {
	ProviderID string
	State      models.State
}

// NewPayment is a row to create.
type NewPayment struct {
	ProviderID     string       `json:"provider_id"`
	State          models.State `json:"state"`
	At             time.Time    `json:"at"`
	Amount         int64        `json:"amount"`
	Currency       string       `json:"currency"`
	AmountRefunded int64        `json:"amount_refunded"`
	SettledAt      *time.Time   `json:"settled_at"`
	PayoutID       string       `json:"payout_id"`
	AmountCaptured *int64       `json:"amount_captured"`
}

// Step moves one payment to To at the provider's time At, raising
// amount_refunded to Refund.
type Step struct {
	ProviderID string
	To         models.State
	At         time.Time
	Refund     int64
	// Settled, when set, is the payout that paid the payment out (its
	// ProviderID is not read): the statement that moves the row records it
	// too, under RecordSettlements' guard. A move the guard refuses records
	// nothing (the caller then sends RecordSettlements); a store whose
	// schema has no settlement columns ignores it.
	Settled *Settlement
}

// Refund raises one payment's amount_refunded to Amount.
type Refund struct {
	ProviderID string `json:"provider_id"`
	Amount     int64  `json:"refund"`
}

// Settlement is one payment paid out by a payout at At.
type Settlement struct {
	ProviderID string    `json:"provider_id"`
	At         time.Time `json:"at"`
	PayoutID   string    `json:"payout_id"`
}

// Capture is one payment's captured amount.
type Capture struct {
	ProviderID string `json:"provider_id"`
	Amount     int64  `json:"amount_captured"`
}

// Carry is what a run keeps about one payment between batches: JSON the
// engine owns.
type Carry struct {
	ProviderID string
	State      json.RawMessage
}

// Event is a provider event to record.
type Event struct {
	EventID   string
	EventType string
	Payload   json.RawMessage
	// Deliver records the event unprocessed (processed_at NULL), for the
	// application's own webhook worker to claim and process as a late
	// webhook (repair: deliver); otherwise it is recorded processed, the
	// run having applied what it shows.
	Deliver bool
}

// Item is one drift item.
type Item struct {
	ProviderID    string         `json:"provider_id"`
	Kind          string         `json:"kind"`
	Action        string         `json:"action"`
	LocalState    *string        `json:"local_state"`
	ProviderState *string        `json:"provider_state"`
	Detail        map[string]any `json:"detail"`
}

// Counts are a batch's additions to its run's counters, except Examined and
// InSync, which replace them (they are totals of distinct payments).
type Counts struct {
	Examined, InSync, Repaired, Refused, Reported, Synthetic, Events, Settlements int64
	// Delivered counts the items whose missed events a repair: deliver
	// run handed to the application's worker (models.ActionDelivered).
	Delivered int64
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Examined += o.Examined
	c.InSync += o.InSync
	c.Repaired += o.Repaired
	c.Refused += o.Refused
	c.Reported += o.Reported
	c.Synthetic += o.Synthetic
	c.Events += o.Events
	c.Settlements += o.Settlements
	c.Delivered += o.Delivered
}

// Progress is what one committed batch adds to its run.
type Progress struct {
	Counts
	APIRequests int64 // the run's total so far
	// Cursor and CursorAt name the batch's last event; "" keeps the
	// previous cursor.
	Cursor   string
	CursorAt time.Time
}

// DriftCount is the number of a run's items of one kind and action.
type DriftCount struct {
	Kind   string `json:"kind"`
	Action string `json:"action"`
	N      int64  `json:"n"`
}

// RunQuery selects runs.
type RunQuery struct {
	// Provider, when set, selects one provider; Account then selects its
	// account ("" is the platform) unless AnyAccount is set.
	Provider   string
	Account    string
	AnyAccount bool
	// Status selects one status; NotStatus excludes one.
	Status, NotStatus string
	// Trigger and TriggeredBy select by what started the run.
	Trigger, TriggeredBy string
	// NotDryRun drops dry runs.
	NotDryRun bool
	// WindowRead drops runs whose window ends after they finished: such a
	// run could not have read its whole window (the provider's log has
	// nothing from the future), so it vouches for no window end.
	WindowRead bool
	// Order is the column runs are sorted by, descending: OrderID (the
	// default), OrderFinished or OrderWindowEnd; Ascending reverses it.
	// Runs not finished sort last in either direction; ties go by id.
	Order     string
	Ascending bool
	// Limit caps the result; 0 means no cap.
	Limit int
}

// RunQuery orders.
const (
	OrderID        = "id"
	OrderFinished  = "finished_at"
	OrderWindowEnd = "window_end"
)

// WindowQuery selects a window's rows (Reads.WindowStates).
type WindowQuery struct {
	Provider, Account string
	Since, Until      time.Time
	After             string // provider_id to page after
	Limit             int
}

// StuckQuery selects stuck rows (Reads.StuckPayments).
type StuckQuery struct {
	Provider, Account string
	States            []models.State
	Before            time.Time
	Limit             int
}

// PaymentQuery selects a window's rows (Reads.PaymentsInWindow).
type PaymentQuery struct {
	Provider, Account string
	Since, Until      time.Time
	AfterID           int64
	Limit             int
}
