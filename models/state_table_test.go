package models

import (
	"slices"
	"testing"
)

// TestTablesAgreeWithEdges holds CanMove and CanReach, read from tables by
// index, to the edges map and its closure they are built from, for every
// pair of states, StateNone and a state that does not exist included.
func TestTablesAgreeWithEdges(t *testing.T) {
	all := append([]State{StateNone, State("paid")}, States...)
	for _, from := range all {
		for _, to := range all {
			move := to.Valid() && (from == StateNone || slices.Contains(edges[from], to))
			if got := CanMove(from, to); got != move {
				t.Errorf("CanMove(%q, %q) = %v, edges say %v", from, to, got, move)
			}
			r := from == to || reach[from][to]
			if got := CanReach(from, to); got != r {
				t.Errorf("CanReach(%q, %q) = %v, the closure says %v", from, to, got, r)
			}
		}
	}
}
