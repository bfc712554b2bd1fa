package reconcile

import (
	"fmt"
	"time"

	"github.com/reconciler/reconciler/models"
)

// The optional interfaces below are what the engine and the run service use
// of a provider when it offers them; each provider asserts the ones it
// implements at compile time, so a renamed method fails the build rather
// than silently dropping a column or a metric.

// ModeReporter is a provider that knows whether its credentials are for
// test or live data; the run records it (reconciliation_runs.mode).
type ModeReporter interface {
	// Mode is "test" or "live"; "" when unknown.
	Mode() string
}

// StatusCounter is a provider that counts its HTTP responses by status
// code (0 for transport errors), for the metrics.
type StatusCounter interface {
	// RequestsByStatus returns a copy of the counts so far.
	RequestsByStatus() map[int]int64
}

// SyntheticEventID is the deterministic id of the webhook_events row that
// records a fact found without an event (a re-fetch, an object read at the
// window's end): the same payment, state and provider time always give the
// same id, so a rerun or a concurrent run records it once (DESIGN section 3).
func SyntheticEventID(providerID string, s models.State, at time.Time) string {
	return fmt.Sprintf("recon:%s:%s:%d", providerID, s, at.Unix())
}
