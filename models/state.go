// Package models holds the payment state machine, the database rows and the
// migrations. It is a leaf: it imports nothing else of this module.
package models

import (
	"fmt"
	"time"
)

// State is a payment's state in the local state machine (DESIGN section 2).
type State string

// The states. The main chain is created → authorised → captured → settled →
// refunded; canceled, failed and chargeback are terminal side exits.
const (
	StateNone       State = "" // no local row yet
	StateCreated    State = "created"
	StateAuthorised State = "authorised"
	StateCaptured   State = "captured"
	StateSettled    State = "settled"
	StateRefunded   State = "refunded"
	StateCanceled   State = "canceled"
	StateFailed     State = "failed"
	StateChargeback State = "chargeback"
)

// States lists every real state, main chain first.
var States = []State{
	StateCreated, StateAuthorised, StateCaptured, StateSettled, StateRefunded,
	StateCanceled, StateFailed, StateChargeback,
}

// edges holds the allowed forward transitions. A transition may skip states
// when webhooks were missed, so the table is already transitively closed
// where the design allows it.
var edges = map[State][]State{
	StateCreated:    {StateAuthorised, StateCaptured, StateSettled, StateRefunded, StateCanceled, StateFailed},
	StateAuthorised: {StateCaptured, StateSettled, StateRefunded, StateCanceled, StateFailed},
	StateCaptured:   {StateSettled, StateRefunded, StateChargeback, StateFailed},
	// A Direct Debit can fail after it was paid out (GoCardless
	// late_failure_settled).
	StateSettled:  {StateRefunded, StateChargeback, StateFailed},
	StateRefunded: {StateChargeback},
}

var predecessors = func() map[State][]State {
	p := make(map[State][]State)
	for _, from := range States {
		for _, to := range edges[from] {
			p[to] = append(p[to], from)
		}
	}
	return p
}()

// Valid reports whether s is one of the states above (StateNone is not).
func (s State) Valid() bool { return index(s) >= 0 }

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool { return s.Valid() && len(edges[s]) == 0 }

// ParseState returns the state named by s, or an error naming the valid ones.
func ParseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return StateNone, fmt.Errorf("unknown state %q (want one of %v)", s, States)
	}
	return st, nil
}

// CanMove reports whether from → to is an allowed edge. Every state may be
// entered from StateNone (a payment we did not know about).
func CanMove(from, to State) bool {
	t := index(to)
	if t < 0 {
		return false
	}
	if from == StateNone {
		return true
	}
	f := index(from)
	return f >= 0 && edgeTable[f][t]
}

// index is s's position in States, or -1. A switch, not a map: the engine
// asks CanMove and CanReach for every step of every payment of a batch,
// and the maps' lookups by string were a fiftieth of a rerun's job CPU
// (issue 16).
func index(s State) int {
	switch s {
	case StateCreated:
		return 0
	case StateAuthorised:
		return 1
	case StateCaptured:
		return 2
	case StateSettled:
		return 3
	case StateRefunded:
		return 4
	case StateCanceled:
		return 5
	case StateFailed:
		return 6
	case StateChargeback:
		return 7
	}
	return -1
}

// edgeTable and reachTable are edges and its transitive closure by index.
var edgeTable, reachTable = func() (e, r [8][8]bool) {
	for i, from := range States {
		if index(from) != i {
			panic("models: index disagrees with States")
		}
		for _, to := range edges[from] {
			e[i][index(to)] = true
		}
		for to := range reach[from] {
			r[i][index(to)] = true
		}
	}
	return e, r
}()

// CanReach reports whether to is reachable from from through zero or more
// allowed edges: from is "behind or equal to" to.
func CanReach(from, to State) bool {
	if from == to {
		return true
	}
	f, t := index(from), index(to)
	return f >= 0 && t >= 0 && reachTable[f][t]
}

var reach = func() map[State]map[State]bool {
	r := make(map[State]map[State]bool)
	for _, from := range States {
		seen := map[State]bool{}
		stack := append([]State(nil), edges[from]...)
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if !seen[s] {
				seen[s] = true
				stack = append(stack, edges[s]...)
			}
		}
		r[from] = seen
	}
	return r
}()

// Predecessors returns the states from which to may be entered, the
// allowed_predecessors of the guard. The slice must not be modified.
func Predecessors(to State) []State { return predecessors[to] }

// Guard is the in-memory twin of the SQL guard of DESIGN section 2: a row in
// state cur whose current state was established at curAt may move to `to`,
// established at at, only along an allowed edge and never back in provider
// time. Equal times are allowed, so same-second facts resolve by rank.
//
// The one exception (TimeExempt): a refund or a lost dispute is never stale
// against a settlement, because a payout undoes neither; a refund made
// before the payout that swept the charge still refunds it.
func Guard(cur State, curAt *time.Time, to State, at time.Time) bool {
	if cur == StateNone || !CanMove(cur, to) {
		return false
	}
	return curAt == nil || !curAt.After(at) || TimeExempt(cur, to)
}

// TimeExempt reports whether the edge cur → to passes the guard whatever the
// times: settled → refunded and settled → chargeback. On these edges alone
// source_updated_at may move back in time (to the refund's or dispute's).
func TimeExempt(cur, to State) bool {
	return cur == StateSettled && (to == StateRefunded || to == StateChargeback)
}
