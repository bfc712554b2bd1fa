package fakekit

import (
	"fmt"

	"github.com/reconciler/reconciler/models"
)

// StateCode packs a state into a byte for the fakes' compact fact records:
// 0 for no state, else its index in models.States plus one. It panics on a
// state models does not know.
func StateCode(s models.State) uint8 {
	if s == models.StateNone {
		return 0
	}
	for i, v := range models.States {
		if v == s {
			return uint8(i + 1)
		}
	}
	panic(fmt.Sprintf("fakekit: unknown state %q", s))
}

// StateOf unpacks a StateCode.
func StateOf(c uint8) models.State {
	if c == 0 {
		return models.StateNone
	}
	return models.States[c-1]
}
