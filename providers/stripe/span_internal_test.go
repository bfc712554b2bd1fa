package stripe

import (
	"math/rand/v2"
	"testing"
)

// A window listed in stretches is partitioned: the stretches cover it
// exactly, newest first, without overlap or gap, each at least a second.
func TestSpanSplitPartitions(t *testing.T) {
	t.Parallel()
	if got := (span{100, 200}).split(4); len(got) != 4 || got[0] != (span{175, 200}) || got[3] != (span{100, 125}) {
		t.Fatalf("split(4) of [100, 200): %v", got)
	}
	if got := (span{100, 102}).split(4); len(got) != 2 || got[0] != (span{101, 102}) || got[1] != (span{100, 101}) {
		t.Fatalf("split(4) of [100, 102): %v", got)
	}
	rnd := rand.New(rand.NewPCG(20, 26))
	for range 5000 {
		since := 1_700_000_000 + rnd.Int64N(1e8)
		s := span{since, since + 1 + rnd.Int64N([]int64{5, 3600, 90 * 86400}[rnd.IntN(3)])}
		k := 1 + rnd.IntN(6)
		got := s.split(k)
		if len(got) == 0 || len(got) > k || got[0].until != s.until || got[len(got)-1].since != s.since {
			t.Fatalf("split(%d) of %v: %v", k, s, got)
		}
		if s.until-s.since >= int64(k) && len(got) != k {
			t.Fatalf("split(%d) of %v: %d stretches", k, s, len(got))
		}
		for i, p := range got {
			if p.since >= p.until || (i > 0 && p.until != got[i-1].since) {
				t.Fatalf("split(%d) of %v: %v", k, s, got)
			}
		}
	}
}
