package reconcile

import (
	"encoding/base64"
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

// spillJSON is a carried payment as the carry table stores it: its packed
// form (pack) as a JSON string of base64. Only the run that packed it reads
// it back (the table is a run's scratch space, migration 0009), so the
// run's string table decodes it. It was the payment's JSON, encoded from
// the packed form for each spill and decoded again for each load: on an
// empty schema's month, whose payments are all carried and outgrow the
// memory budget halfway, that was 10 ms of PostgreSQL's time a batch
// (parsing the JSON into jsonb) and as much of the job's (issue 16).
func spillJSON(packed []byte) json.RawMessage {
	b := make([]byte, 0, base64.StdEncoding.EncodedLen(len(packed))+2)
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, packed)
	return append(b, '"')
}

// unspill reads a carried payment spillJSON stored, packed with tab.
func unspill(r store.Carry, tab *strtab) (*carried, error) {
	s := r.State
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return nil, fmt.Errorf("carried payment %s: not a packed state: %.40q", r.ProviderID, s)
	}
	b, err := base64.StdEncoding.AppendDecode(nil, s[1:len(s)-1])
	if err != nil {
		return nil, fmt.Errorf("carried payment %s: %w", r.ProviderID, err)
	}
	return unpackCarried(r.ProviderID, b, tab)
}

// carriedBit marks, in the seen set, a payment the run carries.
const carriedBit = 1 << 15

// counts are a batch's additions to the run's counters, except Examined
// and InSync, which are the run's totals so far (distinct payments).
type counts = store.Counts
