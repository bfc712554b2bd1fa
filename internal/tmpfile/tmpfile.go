// Package tmpfile is the providers' scratch files on disk: unlinked as
// soon as they are made, so that nothing is left behind whatever ends the
// process, and bounded together by a budget of bytes, so that runs at once
// stay within a pod's /tmp (an emptyDir past its sizeLimit is evicted).
package tmpfile

import (
	"os"
	"sync/atomic"
)

// Budget is what a set of scratch files may still write.
type Budget struct {
	left atomic.Int64
	max  int64
}

// NewBudget returns a budget of n bytes.
func NewBudget(n int64) *Budget {
	b := &Budget{max: n}
	b.left.Store(n)
	return b
}

// Max is the budget's bytes, taken or not.
func (b *Budget) Max() int64 { return b.max }

// Take reserves n bytes, reporting false (and reserving none) when fewer
// are left.
func (b *Budget) Take(n int64) bool {
	if b.left.Add(-n) < 0 {
		b.left.Add(n)
		return false
	}
	return true
}

// Give gives back n bytes taken.
func (b *Budget) Give(n int64) { b.left.Add(n) }

// Left is what may still be taken.
func (b *Budget) Left() int64 { return b.left.Load() }

// Unlinked creates a file in dir (os.TempDir when empty), named after
// pattern as os.CreateTemp names it, and removes its name: the file lives
// as long as it is open.
func Unlinked(dir, pattern string) (*os.File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
