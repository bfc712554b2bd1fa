package models

import (
	"math/rand/v2"
	"testing"
	"time"
)

// allowed is DESIGN section 2's edge table, written out independently of
// the implementation.
var allowed = map[[2]State]bool{}

func init() {
	add := func(from State, tos ...State) {
		for _, to := range tos {
			allowed[[2]State{from, to}] = true
		}
	}
	add(StateCreated, StateAuthorised, StateCaptured, StateSettled, StateRefunded, StateCanceled, StateFailed)
	add(StateAuthorised, StateCaptured, StateSettled, StateRefunded, StateCanceled, StateFailed)
	add(StateCaptured, StateSettled, StateRefunded, StateChargeback, StateFailed)
	add(StateSettled, StateRefunded, StateChargeback, StateFailed) // GoCardless late_failure_settled
	add(StateRefunded, StateChargeback)
}

func TestCanMoveEveryPair(t *testing.T) {
	for _, from := range States {
		for _, to := range States {
			want := allowed[[2]State{from, to}]
			if got := CanMove(from, to); got != want {
				t.Errorf("CanMove(%s, %s) = %v, want %v", from, to, got, want)
			}
			preds := Predecessors(to)
			in := false
			for _, p := range preds {
				in = in || p == from
			}
			if in != want {
				t.Errorf("Predecessors(%s) contains %s = %v, want %v", to, from, in, want)
			}
		}
		if !CanMove(StateNone, from) {
			t.Errorf("a missing row must accept %s", from)
		}
		if CanMove(from, from) {
			t.Errorf("%s → %s is not a transition", from, from)
		}
	}
	for _, s := range []State{StateCanceled, StateFailed, StateChargeback} {
		if !s.Terminal() {
			t.Errorf("%s must be terminal", s)
		}
	}
	if CanMove(StateCreated, "bogus") || State("bogus").Valid() {
		t.Error("unknown states are never valid targets")
	}
}

func TestGuard(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	before, after := t0.Add(-time.Second), t0.Add(time.Second)
	cases := []struct {
		name  string
		cur   State
		curAt *time.Time
		to    State
		at    time.Time
		want  bool
	}{
		{"forward, newer", StateCaptured, &before, StateSettled, t0, true},
		{"forward, same second resolves by rank", StateCaptured, &t0, StateSettled, t0, true},
		{"forward, older fact is stale", StateCaptured, &after, StateSettled, t0, false},
		{"forward, no time yet", StateCreated, nil, StateCaptured, t0, true},
		{"backward never", StateSettled, &before, StateCaptured, t0, false},
		{"from terminal never", StateCanceled, &before, StateCaptured, t0, false},
		{"same state is no move", StateCaptured, &before, StateCaptured, t0, false},
		{"a refund before the payout still refunds", StateSettled, &after, StateRefunded, t0, true},
		{"a dispute lost before the payout still charges back", StateSettled, &after, StateChargeback, t0, true},
		{"the payout's time guards everything else", StateSettled, &after, StateFailed, t0, false},
		{"the exception is settled's alone", StateCaptured, &after, StateRefunded, t0, false},
		{"a late Direct Debit failure after payout", StateSettled, &before, StateFailed, t0, true},
	}
	for _, c := range cases {
		if got := Guard(c.cur, c.curAt, c.to, c.at); got != c.want {
			t.Errorf("%s: Guard = %v, want %v", c.name, got, c.want)
		}
	}
}

// rankOf orders states so that every allowed edge goes up.
func rankOf(s State) int {
	return map[State]int{StateCreated: 1, StateAuthorised: 2, StateCaptured: 3, StateSettled: 4, StateRefunded: 5,
		StateCanceled: 6, StateFailed: 6, StateChargeback: 6}[s]
}

type change struct {
	payment int
	to      State
	at      time.Time
}

func decodeChanges(data []byte) []change {
	var cs []change
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i+2 < len(data); i += 3 {
		cs = append(cs, change{payment: int(data[i] % 4), to: States[int(data[i+1])%len(States)], at: base.Add(time.Duration(data[i+2]%16) * time.Second)})
	}
	return cs
}

type row struct {
	state State
	at    *time.Time
}

func apply(rows map[int]row, c change) {
	r := rows[c.payment]
	if r.state == StateNone || Guard(r.state, r.at, c.to, c.at) {
		at := c.at
		rows[c.payment] = row{c.to, &at}
	}
}

// FuzzNeverBackwards: whatever sequence of changes arrives, a row only ever
// moves along an allowed edge, so its rank never falls and it never leaves a
// terminal state; its provider time falls only on the exempt edges.
func FuzzNeverBackwards(f *testing.F) {
	f.Add([]byte{0, 4, 3, 0, 2, 5, 0, 1, 1})
	f.Add([]byte{1, 7, 9, 1, 3, 1, 1, 4, 15})
	f.Fuzz(func(t *testing.T, data []byte) {
		rows := map[int]row{}
		for _, c := range decodeChanges(data) {
			prev := rows[c.payment]
			apply(rows, c)
			next := rows[c.payment]
			if prev.state != StateNone && next.state != prev.state {
				if !CanMove(prev.state, next.state) || rankOf(next.state) <= rankOf(prev.state) {
					t.Fatalf("moved %s → %s", prev.state, next.state)
				}
				// Only the guard's one exception (a refund or a lost dispute
				// against a settlement) may take source_updated_at back.
				if next.at.Before(*prev.at) && !TimeExempt(prev.state, next.state) {
					t.Fatalf("moved back in provider time: %s %s → %s %s", prev.state, prev.at, next.state, next.at)
				}
			}
		}
	})
}

// FuzzConvergence: each payment's changes applied in provider-time order
// (DESIGN section 2) end in the same state however payments interleave and
// however often a change repeats.
func FuzzConvergence(f *testing.F) {
	f.Add([]byte{0, 4, 3, 0, 2, 5, 0, 1, 1, 2, 3, 3}, uint64(1))
	f.Add([]byte{1, 7, 9, 1, 3, 1, 1, 4, 15, 3, 5, 2}, uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		cs := decodeChanges(data)
		perPayment := map[int][]change{}
		for _, c := range cs {
			perPayment[c.payment] = append(perPayment[c.payment], c)
		}
		sortChanges := func(list []change) {
			// provider-time order, same-second changes by rank
			for i := 1; i < len(list); i++ {
				for j := i; j > 0 && (list[j].at.Before(list[j-1].at) || (list[j].at.Equal(list[j-1].at) && rankOf(list[j].to) < rankOf(list[j-1].to))); j-- {
					list[j], list[j-1] = list[j-1], list[j]
				}
			}
		}
		reference := map[int]row{}
		for p, list := range perPayment {
			l := append([]change(nil), list...)
			sortChanges(l)
			for _, c := range l {
				apply(reference, change{p, c.to, c.at})
			}
		}
		// Interleave payments at random and repeat changes, keeping each
		// payment's own order.
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		queues := map[int][]change{}
		for p, list := range perPayment {
			l := append([]change(nil), list...)
			sortChanges(l)
			var withRepeats []change
			for _, c := range l {
				withRepeats = append(withRepeats, c)
				for rng.IntN(3) == 0 {
					withRepeats = append(withRepeats, c)
				}
			}
			queues[p] = withRepeats
		}
		got := map[int]row{}
		for len(queues) > 0 {
			keys := make([]int, 0, len(queues))
			for k := range queues {
				keys = append(keys, k)
			}
			for i := 1; i < len(keys); i++ { // deterministic base order before the random pick
				for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
					keys[j], keys[j-1] = keys[j-1], keys[j]
				}
			}
			k := keys[rng.IntN(len(keys))]
			apply(got, queues[k][0])
			queues[k] = queues[k][1:]
			if len(queues[k]) == 0 {
				delete(queues, k)
			}
		}
		for p, want := range reference {
			if got[p].state != want.state || !got[p].at.Equal(*want.at) {
				t.Fatalf("payment %d: got %s@%v, want %s@%v", p, got[p].state, got[p].at, want.state, want.at)
			}
		}
	})
}
