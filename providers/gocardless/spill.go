package gocardless

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/reconciler/reconciler/internal/tmpfile"
)

// DefaultSpillMax bounds the bytes a window's spill keeps on disk (with
// the slices listed ahead, aheadMax each, within the 64 MiB emptyDir the
// Kubernetes manifests mount at /tmp): two to four slices given up, at
// about 0.7 KiB an event on the project's fake (more with GoCardless's
// fuller objects).
const DefaultSpillMax = 32 << 20

// ProcessSpillMax bounds the bytes every window of the process keeps on
// disk together: runs at once (--concurrency, a provider's run beside
// another's) each read a window, and a pod whose emptyDir passes its
// sizeLimit is evicted. A page past it is not kept (its slice is read
// again from GoCardless, as without a spill).
const ProcessSpillMax = 48 << 20

// processSpills is the process's budget (ProcessSpillMax).
var processSpills = tmpfile.NewBudget(ProcessSpillMax)

// spill keeps on disk the payment events' pages of the slice being read,
// as GoCardless answered them. When the slice is given up (it holds more
// than the hold), its pages become the spill of the stretch of time they
// were found to cover whole (learn's known stretch), and the shorter
// slices through that stretch read their events from there instead of
// asking GoCardless again (listType). A slice that fits the hold lets its
// pages go. The file is unlinked as soon as it is created, so nothing is
// left behind, whatever ends the process.
type spill struct {
	f       *os.File
	max     int64
	budget  *tmpfile.Budget // shared with the process's other spills
	size    int64
	regions []*spillRegion // kept, in the file's order
	buf     []byte
}

// spillRegion is the pages of one slice, in the order they were listed
// (newest first).
type spillRegion struct {
	start, end int64
	pages      []spillPage
	// full: a page did not fit the spill's bound; the region is not
	// whole and cannot be read from.
	full bool
	dead bool
}

// spillPage is one page in the file: where, when it was read, and the
// times of its events in the stretch it was asked for.
type spillPage struct {
	off    int64
	n      int
	read   time.Time
	lo, hi time.Time
}

// openSpill creates the spill's file in dir (os.TempDir when empty). It
// returns nil, with the reason, when the file cannot be created: the
// window is then read as before, every slice from GoCardless.
func openSpill(dir string, most int64, budget *tmpfile.Budget) (*spill, error) {
	f, err := tmpfile.Unlinked(dir, "reconciler-gocardless-*.spill")
	if err != nil {
		return nil, err
	}
	return &spill{f: f, max: most, budget: budget}, nil
}

func (s *spill) close() {
	if s != nil {
		s.resize(0)
		s.f.Close()
	}
}

// resize sets the bytes the spill holds, giving the process's budget back
// what it no longer holds (it took each page's as the page was added).
func (s *spill) resize(n int64) {
	if n < s.size {
		s.budget.Give(s.size - n)
	}
	s.size = n
}

// begin opens a region at the file's end for the pages of the slice about
// to be read.
func (s *spill) begin() *spillRegion {
	if s == nil {
		return nil
	}
	return &spillRegion{start: s.size, end: s.size}
}

// add appends a page to the open region r. A page past the spill's bound,
// or one the file refuses, marks r full: it is then let go (drop).
func (s *spill) add(r *spillRegion, body []byte, read, lo, hi time.Time) {
	if r == nil || r.full {
		return
	}
	need := int64(len(body)) + 4
	if s.size+need > s.max || !s.budget.Take(need) {
		r.full = true
		return
	}
	s.buf = binary.LittleEndian.AppendUint32(s.buf[:0], uint32(len(body)))
	s.buf = append(s.buf, body...)
	if _, err := s.f.WriteAt(s.buf, s.size); err != nil {
		s.budget.Give(need)
		r.full = true
		return
	}
	r.pages = append(r.pages, spillPage{off: s.size + 4, n: len(body), read: read, lo: lo, hi: hi})
	s.size += need
	r.end = s.size
}

// keep makes the open region r last: it is read from until released.
// It reports false (and lets r go) when r is not whole.
func (s *spill) keep(r *spillRegion) bool {
	if r == nil {
		return false
	}
	if r.full || len(r.pages) == 0 {
		s.drop(r)
		return false
	}
	s.regions = append(s.regions, r)
	return true
}

// drop lets the open region r go: the file is cut back to where it began.
func (s *spill) drop(r *spillRegion) {
	if r == nil {
		return
	}
	s.resize(r.start)
	s.trim()
}

// release lets a kept region go. The file is cut back past every region
// released at its end (a window's regions are mostly released last first:
// the stretches given up later are older, delivered sooner).
func (s *spill) release(r *spillRegion) {
	if s == nil || r == nil || r.dead {
		return
	}
	r.dead = true
	for len(s.regions) > 0 && s.regions[len(s.regions)-1].dead {
		s.resize(s.regions[len(s.regions)-1].start)
		s.regions = s.regions[:len(s.regions)-1]
	}
	s.trim()
}

// trim gives the file's space past its regions back.
func (s *spill) trim() {
	// A failed truncation leaves bytes the next pages overwrite.
	_ = s.f.Truncate(s.size)
}

// pages reads r's pages overlapping [from, end) in the order they were
// listed, each decoded as eachPage decodes GoCardless's answer (its body
// is the spill's buffer, good until fn returns).
func (s *spill) pages(r *spillRegion, from, end time.Time, fn func(*eventsPage) error) error {
	for _, sp := range r.pages {
		if sp.hi.Before(from) || !sp.lo.Before(end) {
			continue
		}
		if cap(s.buf) < sp.n {
			s.buf = make([]byte, sp.n)
		}
		body := s.buf[:sp.n]
		if _, err := s.f.ReadAt(body, sp.off); err != nil {
			return fmt.Errorf("gocardless: read a page back from the spill: %w", err)
		}
		var pg eventsPage
		if err := json.Unmarshal(body, &pg); err != nil {
			return fmt.Errorf("gocardless: decode a page from the spill: %w", err)
		}
		pg.body, pg.read = body, sp.read
		if err := fn(&pg); err != nil {
			return err
		}
	}
	return nil
}
