package store

import (
	"context"
	"time"
)

// Notifications is the record of what was sent about a run
// (sent_notifications, one row per run and channel), by which a run's
// summary is delivered at most once however often the job is retried or
// rerun.
type Notifications interface {
	// ClaimNotification holds the row of (runID, channel), creating it
	// pending when there is none, while fn runs: a concurrent claim of the
	// same row waits until this one has recorded its outcome, and then sees
	// it. fn gets the row as it stands and returns the update to record
	// (nil: none), or an error, which records nothing (a row the claim
	// created is not kept) and is returned as it is.
	//
	// What fn returns is recorded even when ctx ends while fn runs (fn may
	// have posted something that must not be posted again), within
	// NotificationRecordTimeout. The claim is never retried: fn runs at most
	// once. A run that does not exist is an error, and fn is not called.
	ClaimNotification(ctx context.Context, runID int64, channel string,
		fn func(ctx context.Context, n Notification) (*NotificationUpdate, error)) error
}

// NotificationRecordTimeout bounds the recording of a claim's outcome once
// fn has returned, whatever the caller's context.
const NotificationRecordTimeout = 10 * time.Second

// Statuses of a sent_notifications row.
const (
	NotificationPending = "pending"
	NotificationSent    = "sent"
	NotificationFailed  = "failed"
)

// Notification is a sent_notifications row as a claim sees it.
type Notification struct {
	Status    string // NotificationPending, NotificationSent or NotificationFailed
	Attempts  int
	LastError *string
}

// NotificationUpdate is what a claim records.
type NotificationUpdate struct {
	Status string
	// Attempts is added to the row's attempts.
	Attempts int
	// LastError replaces last_error; nil clears it.
	LastError *string
	// Sent stamps sent_at with the store's clock.
	Sent bool
}
