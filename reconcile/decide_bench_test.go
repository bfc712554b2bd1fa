package reconcile

import (
	"fmt"
	"testing"

	"github.com/reconciler/reconciler/models"
)

// decideBatch is a rerun's batch as decideInto sees it: 1,000 payments,
// each created, then captured or failed, half of them settled.
func decideBatch() [][]Change {
	out := make([][]Change, 1000)
	for i := range out {
		id := fmt.Sprintf("pi_%04d", i)
		cs := []Change{ch(models.StateCreated, i), ch(models.StateCaptured, i+60)}
		if i%7 == 0 {
			cs[1] = ch(models.StateFailed, i+60)
		} else if i%2 == 0 {
			cs = append(cs, ch(models.StateSettled, i+86400))
		}
		for j := range cs {
			cs[j].ProviderID, cs[j].EventID = id, fmt.Sprintf("evt_%04d_%d", i, j)
		}
		out[i] = cs
	}
	return out
}

// BenchmarkDecideBatch decides a batch of 1,000 payments.
func BenchmarkDecideBatch(b *testing.B) {
	batch := decideBatch()
	n := 0
	for _, cs := range batch {
		n += len(cs)
	}
	var d decider
	b.ReportAllocs()
	for b.Loop() {
		d.newArrays(n + n/4)
		for _, cs := range batch {
			_ = decideInto(Local{}, nil, cs, &d)
		}
	}
}
