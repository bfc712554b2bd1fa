package models

import (
	"database/sql/driver"
	"fmt"
	"time"
)

// JSON is a JSON document in a jsonb (PostgreSQL) or text (SQLite) column.
type JSON []byte

// Scan implements sql.Scanner for both stores.
func (j *JSON) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*j = nil
	case []byte:
		*j = append(JSON(nil), x...)
	case string:
		*j = JSON(x)
	default:
		return fmt.Errorf("models.JSON: cannot scan %T", v)
	}
	return nil
}

// Value implements driver.Valuer.
func (j JSON) Value() (driver.Value, error) {
	if j == nil {
		return nil, nil
	}
	return string(j), nil
}

// MarshalJSON writes the document as it is.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}

// UnmarshalJSON keeps the document as it is.
func (j *JSON) UnmarshalJSON(b []byte) error {
	*j = append(JSON(nil), b...)
	return nil
}

// Payment is a row of payments: the local state machine of one payment.
type Payment struct {
	ID              int64 `gorm:"primaryKey"`
	Provider        string
	Account         string
	ProviderID      string
	State           State
	Amount          int64
	Currency        string
	AmountRefunded  int64
	SourceUpdatedAt *time.Time
	// SettledAt and PayoutID record the payout that paid the payment out,
	// whatever its state (DESIGN section 2: settlement is a fact of its own).
	SettledAt *time.Time
	PayoutID  *string
	// AmountCaptured is set when the captured amount differs from Amount.
	AmountCaptured *int64
	CreatedAt      time.Time `gorm:"<-:false"`
	UpdatedAt      time.Time `gorm:"<-:false"`
}

// TableName pins the contract's table name.
func (Payment) TableName() string { return "payments" }

// WebhookEvent is a row of webhook_events, unique on (source, event_id).
type WebhookEvent struct {
	ID          int64 `gorm:"primaryKey"`
	Source      string
	EventID     string
	EventType   string
	Payload     JSON      `gorm:"type:jsonb"`
	ReceivedAt  time.Time `gorm:"<-:false"`
	ClaimedAt   *time.Time
	ProcessedAt *time.Time
	Attempts    int
	LastError   *string
	Synthetic   bool
	RunID       *int64
}

// TableName pins the contract's table name.
func (WebhookEvent) TableName() string { return "webhook_events" }

// Run statuses.
const (
	RunRunning     = "running"
	RunSucceeded   = "succeeded"
	RunFailed      = "failed"
	RunInterrupted = "interrupted"
)

// Run triggers.
const (
	TriggerSchedule = "schedule"
	TriggerManual   = "manual"
	TriggerAPI      = "api"
)

// Run is a row of reconciliation_runs. WindowStart and WindowEnd hold the
// window actually read, overlap included.
type Run struct {
	ID          int64 `gorm:"primaryKey"`
	Provider    string
	Account     string
	WindowStart time.Time
	WindowEnd   time.Time
	StartedAt   time.Time
	FinishedAt  *time.Time
	Status      string
	Trigger     string
	TriggeredBy string
	DryRun      bool
	Mode        string // "test" or "live": the provider key's mode
	Examined    int64
	InSync      int64
	Repaired    int64
	Refused     int64
	Reported    int64
	// Delivered counts the items of a repair: deliver run whose missed
	// events were handed, unprocessed, to the application's worker instead
	// of applied (ActionDelivered); they are not Repaired.
	Delivered       int64
	SyntheticEvents int64
	// SettlementsRecorded counts settled_at/payout_id filled in that the
	// live worker left empty: bookkeeping, not drift.
	SettlementsRecorded int64
	APIRequests         int64
	EventsRead          int64
	Error               *string
	Notes               JSON `gorm:"type:jsonb"`
	// ProgressCursor and ProgressAt name the last event of the last
	// committed batch: a rerun resumes after it.
	ProgressCursor *string
	ProgressAt     *time.Time
}

// TableName pins the contract's table name.
func (Run) TableName() string { return "reconciliation_runs" }

// Drift kinds (DESIGN section 6).
const (
	KindMissingLocal  = "missing_local"
	KindBehind        = "behind"
	KindConflict      = "conflict"
	KindStale         = "stale"
	KindMismatch      = "mismatch"
	KindUnknownStatus = "unknown_status"
	// KindDispute is an open dispute (funds withdrawn, evidence due):
	// reported for support, no state change; a dispute closed as lost is
	// the chargeback transition.
	KindDispute = "dispute"
)

// Drift actions.
const (
	ActionRepaired = "repaired"
	ActionRefused  = "refused"
	ActionReported = "reported"
	// ActionDelivered: the missed event was handed to the application's own
	// worker (repair: deliver) instead of being applied by the job.
	ActionDelivered = "delivered"
)

// DriftItem is a row of drift_items: one thing a run repaired, refused or
// reported about one payment.
type DriftItem struct {
	ID            int64 `gorm:"primaryKey"`
	RunID         int64
	Provider      string
	ProviderID    string
	Kind          string
	Action        string
	LocalState    *string
	ProviderState *string
	Detail        JSON      `gorm:"type:jsonb"`
	CreatedAt     time.Time `gorm:"<-:false"`
}

// TableName pins the contract's table name.
func (DriftItem) TableName() string { return "drift_items" }
