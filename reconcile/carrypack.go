package reconcile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/reconciler/reconciler/models"
)

// pack is carried in the compact binary form the run keeps it in memory
// (carryMem): varints, length-prefixed strings, times as Unix nanoseconds.
// It is about a fifth of the JSON form's size and a tenth of its encoding
// cost, and a []byte holds no pointer for the collector to scan. A fact's
// provider id is the payment's own id (newBatch groups facts by it), so it
// is written only when it differs. TestCarryPackRoundTrip fills every field
// of every type packed here and fails when one is added without being
// packed.
func (c *carried) pack(id string, b []byte, tab *strtab) []byte {
	w := packer{b: b, tab: tab}
	w.local(c.before)
	w.uint(uint64(len(c.facts)))
	for i := range c.facts {
		w.change(id, &c.facts[i])
	}
	w.uint(uint64(len(c.applied)))
	for _, s := range c.applied {
		w.step(s, c.facts)
	}
	w.bools(c.inserted, c.pending, c.drifted)
	for _, n := range [...]int64{c.items.Examined, c.items.InSync, c.items.Repaired, c.items.Refused, c.items.Reported,
		c.items.Synthetic, c.items.Events, c.items.Settlements, c.items.Delivered} {
		w.int(n)
	}
	w.uint(uint64(len(c.tried)))
	for _, t := range c.tried {
		w.sym(string(t.To))
		w.time(t.At)
	}
	return w.b
}

// unpackCarried reads what pack wrote for payment id.
func unpackCarried(id string, b []byte, tab *strtab) (*carried, error) {
	r := unpacker{b: b, tab: tab}
	c := &carried{before: r.local()}
	if n := r.len(); n > 0 {
		c.facts = make([]Change, n)
		for i := range c.facts {
			r.change(id, &c.facts[i])
		}
	}
	if n := r.len(); n > 0 {
		c.applied = make([]Step, n)
		for i := range c.applied {
			c.applied[i] = r.step(c.facts)
		}
	}
	c.inserted, c.pending, c.drifted = r.bools3()
	for _, p := range [...]*int64{&c.items.Examined, &c.items.InSync, &c.items.Repaired, &c.items.Refused, &c.items.Reported,
		&c.items.Synthetic, &c.items.Events, &c.items.Settlements, &c.items.Delivered} {
		*p = r.int()
	}
	if n := r.len(); n > 0 {
		c.tried = make([]tried, n)
		for i := range c.tried {
			c.tried[i] = tried{To: models.State(r.sym()), At: r.time()}
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	if r.err != nil {
		return nil, fmt.Errorf("unpack carried payment %s: %w", id, r.err)
	}
	return c, nil
}

type packer struct {
	b   []byte
	tab *strtab
}

// strtab numbers the few distinct strings that most facts repeat (states,
// event types, currencies, the provider's own words), so that a packed
// fact holds a small number for each. It only grows, up to strtabMax
// strings; a string beyond it is written whole.
type strtab struct {
	ids  map[string]uint64
	strs []string
}

const strtabMax = 4096

func newStrtab() *strtab { return &strtab{ids: map[string]uint64{}} }

// sym writes a string of few distinct values: 0 and the string, or its
// number in the table plus one.
func (w *packer) sym(s string) {
	if w.tab != nil {
		id, ok := w.tab.ids[s]
		if !ok && len(w.tab.strs) < strtabMax {
			id = uint64(len(w.tab.strs))
			w.tab.ids[s] = id
			w.tab.strs = append(w.tab.strs, s)
			ok = true
		}
		if ok {
			w.uint(id + 1)
			return
		}
	}
	w.uint(0)
	w.str(s)
}

func (w *packer) uint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *packer) int(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *packer) str(s string)  { w.uint(uint64(len(s))); w.b = append(w.b, s...) }

func (w *packer) bools(bs ...bool) {
	var v uint64
	for i, b := range bs {
		if b {
			v |= 1 << i
		}
	}
	w.uint(v)
}

// time writes 0 for the zero time, else 1 and the Unix nanoseconds. Times
// come back in UTC, as the JSON form's did not guarantee either way; the
// engine compares instants, never zones.
func (w *packer) time(t time.Time) {
	if t.IsZero() {
		w.uint(0)
		return
	}
	w.uint(1)
	w.int(t.UnixNano())
}

func (w *packer) ptime(t *time.Time) {
	if t == nil {
		w.uint(2)
		return
	}
	w.time(*t)
}

func (w *packer) local(l Local) {
	w.bools(l.Exists)
	w.sym(string(l.State))
	w.ptime(l.At)
	w.int(l.Amount)
	w.sym(l.Currency)
	w.int(l.AmountRefunded)
	w.ptime(l.SettledAt)
	w.str(l.PayoutID)
	w.int(l.AmountCaptured)
}

// step writes a step; its event id, most often a fact's, as that fact's
// index plus one (0 and the id otherwise).
func (w *packer) step(s Step, facts []Change) {
	w.sym(string(s.To))
	w.time(s.At)
	w.int(s.AmountRefunded)
	ref := 0
	for i := range facts {
		if facts[i].EventID == s.EventID {
			ref = i + 1
			break
		}
	}
	w.uint(uint64(ref))
	if ref == 0 {
		w.str(s.EventID)
	}
	w.bools(s.Inferred)
}

func (w *packer) change(id string, c *Change) {
	pid := c.ProviderID
	w.bools(pid == id, c.Snapshot, c.View, c.ViewCurrent, c.Refunded, c.Fallback, c.Unknown, c.Inferred, c.Payload != nil)
	if pid != id {
		w.str(pid)
	}
	w.sym(string(c.State))
	w.time(c.At)
	w.int(c.Amount)
	w.sym(c.Currency)
	w.int(c.AmountRefunded)
	w.int(c.AmountCaptured)
	w.str(c.PayoutID)
	w.sym(c.RawStatus)
	w.sym(c.Revert)
	w.uint(uint64(len(c.RevertOnlyFrom)))
	for _, s := range c.RevertOnlyFrom {
		w.sym(string(s))
	}
	w.int(c.RevertIfRefunded)
	w.time(c.RefundSince)
	w.str(c.Notice)
	w.sym(c.NoticeKind)
	w.sym(c.RefundNote)
	w.str(c.EventID)
	w.sym(c.EventType)
	if c.Payload != nil {
		w.str(string(c.Payload))
	}
}

type unpacker struct {
	b   []byte
	tab *strtab
	err error
}

func (r *unpacker) sym() string {
	id := r.uint()
	if id == 0 {
		return r.str()
	}
	if r.tab == nil || id > uint64(len(r.tab.strs)) {
		r.fail("string number")
		return ""
	}
	return r.tab.strs[id-1]
}

func (r *unpacker) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated %s", what)
	}
	r.b = nil
}

func (r *unpacker) uint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("unsigned varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *unpacker) int() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// len reads a count, refusing one longer than the bytes left could hold.
func (r *unpacker) len() int {
	n := r.uint()
	if n > uint64(len(r.b)) {
		r.fail("count")
		return 0
	}
	return int(n)
}

func (r *unpacker) str() string {
	n := r.len()
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *unpacker) bits() uint64 { return r.uint() }

func (r *unpacker) bools3() (bool, bool, bool) {
	v := r.bits()
	return v&1 != 0, v&2 != 0, v&4 != 0
}

func (r *unpacker) time() time.Time {
	switch r.uint() {
	case 0:
		return time.Time{}
	default:
		return time.Unix(0, r.int()).UTC()
	}
}

func (r *unpacker) ptime() *time.Time {
	switch r.uint() {
	case 2:
		return nil
	case 0:
		return &time.Time{}
	default:
		t := time.Unix(0, r.int()).UTC()
		return &t
	}
}

func (r *unpacker) local() Local {
	l := Local{Exists: r.bits()&1 != 0}
	l.State = models.State(r.sym())
	l.At = r.ptime()
	l.Amount = r.int()
	l.Currency = r.sym()
	l.AmountRefunded = r.int()
	l.SettledAt = r.ptime()
	l.PayoutID = r.str()
	l.AmountCaptured = r.int()
	return l
}

func (r *unpacker) step(facts []Change) Step {
	s := Step{To: models.State(r.sym()), At: r.time(), AmountRefunded: r.int()}
	switch ref := r.uint(); {
	case ref == 0:
		s.EventID = r.str()
	case ref <= uint64(len(facts)):
		s.EventID = facts[ref-1].EventID
	default:
		r.fail("fact number")
	}
	s.Inferred = r.bits()&1 != 0
	return s
}

func (r *unpacker) change(id string, c *Change) {
	f := r.bits()
	c.Snapshot, c.View, c.ViewCurrent, c.Refunded = f&2 != 0, f&4 != 0, f&8 != 0, f&16 != 0
	c.Fallback, c.Unknown, c.Inferred = f&32 != 0, f&64 != 0, f&128 != 0
	c.ProviderID = id
	if f&1 == 0 {
		c.ProviderID = r.str()
	}
	c.State = models.State(r.sym())
	c.At = r.time()
	c.Amount = r.int()
	c.Currency = r.sym()
	c.AmountRefunded = r.int()
	c.AmountCaptured = r.int()
	c.PayoutID = r.str()
	c.RawStatus = r.sym()
	c.Revert = r.sym()
	if n := r.len(); n > 0 {
		c.RevertOnlyFrom = make([]models.State, n)
		for i := range c.RevertOnlyFrom {
			c.RevertOnlyFrom[i] = models.State(r.sym())
		}
	}
	c.RevertIfRefunded = r.int()
	c.RefundSince = r.time()
	c.Notice = r.str()
	c.NoticeKind = r.sym()
	c.RefundNote = r.sym()
	c.EventID = r.str()
	c.EventType = r.sym()
	if f&256 != 0 {
		c.Payload = []byte(r.str())
	}
}
