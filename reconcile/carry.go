package reconcile

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// carried is what a run keeps about a payment whose facts may continue in a
// later batch and whose outcome so far is not "in sync, nothing done": the
// row as the run first saw it, every fact so far, what the run applied and
// the items it wrote. A later batch decides the payment again from all of
// its facts and rewrites its items, so rows, events and items do not depend
// on where batches begin and end (DESIGN section 2).
type carried struct {
	before   Local
	facts    []Change
	applied  []Step
	inserted bool
	// pending: unknown locally and not creatable from the facts so far; it
	// is fetched by id once the window has been read.
	pending bool
	items   counts  // the items written for it so far, by action
	drifted bool    // it has items
	tried   []tried // the steps sent for it so far
}

// tried is a step the run has sent (or, for a created row, made).
type tried struct {
	To models.State `json:"to"`
	At time.Time    `json:"at"`
}

func triedOf(s Step) tried { return tried{To: s.To, At: s.At} }

// sent says whether the run has sent step s.
func (c *carried) sent(s Step) bool {
	for _, t := range c.tried {
		if t.To == s.To && t.At.Equal(s.At) {
			return true
		}
	}
	return false
}

// carriedJSON is carried as the carry table stores it.
type carriedJSON struct {
	Before   Local    `json:"before"`
	Facts    []Change `json:"facts"`
	Applied  []Step   `json:"applied"`
	Inserted bool     `json:"inserted,omitempty"`
	Pending  bool     `json:"pending,omitempty"`
	Items    counts   `json:"items"`
	Drifted  bool     `json:"drifted,omitempty"`
	Tried    []tried  `json:"tried"`
}

func (c *carried) encode(id string) (store.Carry, error) {
	b, err := json.Marshal(carriedJSON{Before: c.before, Facts: c.facts, Applied: c.applied, Inserted: c.inserted, Pending: c.pending,
		Items: c.items, Drifted: c.drifted, Tried: c.tried})
	return store.Carry{ProviderID: id, State: b}, err
}

func decodeCarried(r store.Carry) (*carried, error) {
	var j carriedJSON
	if err := json.Unmarshal(r.State, &j); err != nil {
		return nil, fmt.Errorf("decode carried payment %s: %w", r.ProviderID, err)
	}
	return &carried{before: j.Before, facts: j.Facts, applied: j.Applied, inserted: j.Inserted, pending: j.Pending,
		items: j.Items, drifted: j.Drifted, tried: j.Tried}, nil
}

// carriedBit marks, in the seen set, a payment the run carries.
const carriedBit = 1 << 15

// counts are a batch's additions to the run's counters, except Examined
// and InSync, which are the run's totals so far (distinct payments).
type counts = store.Counts
