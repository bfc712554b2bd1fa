package reconcile

import (
	"maps"
	"math"
	"slices"

	"github.com/reconciler/reconciler/internal/memlimit"
)

// DefaultCarryMemory is how many bytes of packed carried state a run keeps
// in memory before it spills the oldest to the carry table: a ninth of the
// soft memory limit's share of one run (memlimit.RunShare: the binary sets
// 56 MiB a run unless GOMEMLIMIT says otherwise: 6.2 MiB, about 12,000
// payments; a million events then peaked at 100 MiB with 8 MiB), between 1
// and 256 MiB, or 16 MiB with no limit.
func DefaultCarryMemory() int {
	limit := memlimit.RunShare()
	if limit == math.MaxInt64 {
		return 16 << 20
	}
	return int(min(max(limit/9, 1<<20), 256<<20))
}

// carryEntryOverhead is what an entry costs beyond its packed bytes and
// its id, counted against the budget: its map slot and growth, its place
// in the queue (up to two), and the allocator's rounding of both strings.
const carryEntryOverhead = 224

// carryMem is what a writing run carries, kept in memory packed (pack) up
// to a budget, the oldest spilled to the carry table beyond it. Before it,
// every carried payment was encoded as JSON, upserted and read back in
// each batch its facts spanned: on the empty schema that was a quarter of
// the job's CPU and a fifth of the database's time.
//
// It changes only when a batch committed (commit): a batch's transaction
// may be retried, and a rolled-back batch must find the carry as it was.
// A payment the run carries is either here or in the table; a table row
// for a payment that is here, or no longer carried, is stale and never
// read (get looks here first; the engine asks only for carried payments),
// and is deleted with the rest at the run's end.
type carryMem struct {
	budget int
	size   int
	m      map[string]carryEntry
	queue  []carryRef // in the order entries were put; stale refs skipped
	seq    uint64
	tab    *strtab // the strings packed entries number
}

type carryEntry struct {
	b   []byte
	seq uint64
}

type carryRef struct {
	id  string
	seq uint64
}

func newCarryMem(budget int) *carryMem {
	if budget == 0 {
		budget = DefaultCarryMemory()
	}
	return &carryMem{budget: max(budget, 0), m: map[string]carryEntry{}, tab: newStrtab()}
}

// spillChunk is about how many bytes of carried state, as JSON, one
// statement spills: 256 KiB, or a quarter of a smaller budget (one payment
// a statement when nothing is kept in memory), so that what a spill holds
// while it is sent stays small beside what the budget keeps.
func (c *carryMem) spillChunk() int { return min(256<<10, c.budget/4) }

func entrySize(id string, b []byte) int { return len(id) + cap(b) + carryEntryOverhead }

// get returns the packed state of id, if it is here.
func (c *carryMem) get(id string) ([]byte, bool) {
	e, ok := c.m[id]
	return e.b, ok
}

// carryChange is what one batch does to the carry once it committed.
type carryChange struct {
	put   map[string][]byte // packed; nil: forget
	evict []string          // spilled to the table in the batch's transaction
}

// plan returns which entries, oldest first and none of those the batch
// puts, must be spilled for the batch's puts to fit the budget.
func (c *carryMem) plan(put map[string][]byte) []string {
	size := c.size
	for id, b := range put {
		if e, ok := c.m[id]; ok {
			size -= entrySize(id, e.b)
		}
		if b != nil {
			size += entrySize(id, b)
		}
	}
	var evict []string
	for _, r := range c.queue {
		if size <= c.budget {
			break
		}
		e, ok := c.m[r.id]
		if !ok || e.seq != r.seq {
			continue // replaced or forgotten since
		}
		if _, mine := put[r.id]; mine {
			continue
		}
		evict = append(evict, r.id)
		size -= entrySize(r.id, e.b)
	}
	// What still does not fit (a batch larger than the budget) is spilled
	// too, in a fixed order.
	if size > c.budget {
		for _, id := range slices.Sorted(maps.Keys(put)) {
			if size <= c.budget {
				break
			}
			if b := put[id]; b != nil {
				evict = append(evict, id)
				size -= entrySize(id, b)
			}
		}
	}
	return evict
}

// commit applies a committed batch's change.
func (c *carryMem) commit(ch carryChange) {
	for id, b := range ch.put {
		if e, ok := c.m[id]; ok {
			c.size -= entrySize(id, e.b)
			delete(c.m, id)
		}
		if b != nil {
			c.seq++
			c.m[id] = carryEntry{b: b, seq: c.seq}
			c.queue = append(c.queue, carryRef{id, c.seq})
			c.size += entrySize(id, b)
		}
	}
	for _, id := range ch.evict {
		if e, ok := c.m[id]; ok {
			c.size -= entrySize(id, e.b)
			delete(c.m, id)
		}
	}
	// Drop the queue's stale head, and compact it when stale refs are most
	// of it, so that it stays proportional to the entries.
	i := 0
	for i < len(c.queue) {
		if e, ok := c.m[c.queue[i].id]; ok && e.seq == c.queue[i].seq {
			break
		}
		i++
	}
	c.queue = c.queue[i:]
	if len(c.queue) > 2*len(c.m)+1024 {
		live := make([]carryRef, 0, len(c.m))
		for _, r := range c.queue {
			if e, ok := c.m[r.id]; ok && e.seq == r.seq {
				live = append(live, r)
			}
		}
		c.queue = live
	}
}
