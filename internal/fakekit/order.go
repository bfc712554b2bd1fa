package fakekit

import (
	"math/bits"
	"slices"
)

// Order keeps the indices of one collection of a fake sorted by (created,
// index), the order Stripe and GoCardless list objects in, sorting lazily:
// only after an out-of-order Add and only when Fix is called.
type Order struct {
	// Idx are the indices, in (created, index) order unless Dirty.
	Idx []int32
	// Dirty is set by an out-of-order Add until Fix sorts.
	Dirty bool
}

// Add appends index i, created at created; createdOf gives any index's
// creation time.
func (o *Order) Add(i int32, created int64, createdOf func(int32) int64) {
	if !o.Dirty && len(o.Idx) > 0 && createdOf(o.Idx[len(o.Idx)-1]) > created {
		o.Dirty = true
	}
	o.Idx = append(o.Idx, i)
}

// Fix sorts the indices when needed: keys (created - min, index) packed
// into one uint64 when they fit (a plain integer sort, fast at millions),
// else a comparison sort. Both give the one (created, index) order.
func (o *Order) Fix(createdOf func(int32) int64) {
	if !o.Dirty {
		return
	}
	o.Dirty = false
	lo, hi := createdOf(o.Idx[0]), createdOf(o.Idx[0])
	var maxIdx int32
	for _, i := range o.Idx {
		c := createdOf(i)
		lo, hi = min(lo, c), max(hi, c)
		maxIdx = max(maxIdx, i)
	}
	idxBits := bits.Len32(uint32(maxIdx))
	if hi-lo >= 0 && bits.Len64(uint64(hi-lo))+idxBits <= 64 {
		keys := make([]uint64, len(o.Idx))
		for k, i := range o.Idx {
			keys[k] = uint64(createdOf(i)-lo)<<idxBits | uint64(i)
		}
		slices.Sort(keys)
		mask := uint64(1)<<idxBits - 1
		for k, key := range keys {
			o.Idx[k] = int32(key & mask)
		}
		return
	}
	Ascending(o.Idx, createdOf)
}

// Ascending sorts indices by (created, index).
func Ascending(idx []int32, createdOf func(int32) int64) {
	slices.SortFunc(idx, func(x, y int32) int {
		cx, cy := createdOf(x), createdOf(y)
		switch {
		case cx < cy:
			return -1
		case cx > cy:
			return 1
		}
		return int(x) - int(y)
	})
}
