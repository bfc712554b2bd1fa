package verify

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The stretches listed at once partition the window exactly, in order, cut
// at whole seconds: every payment created in the window lies in one of
// them and only one.
func TestStretchesPartitionTheWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, []stretch{
		{t0, t0.Add(6 * time.Hour)}, {t0.Add(6 * time.Hour), t0.Add(12 * time.Hour)},
		{t0.Add(12 * time.Hour), t0.Add(18 * time.Hour)}, {t0.Add(18 * time.Hour), t0.Add(24 * time.Hour)},
	}, stretches(t0, t0.Add(24*time.Hour), 4))
	require.Equal(t, []stretch{{t0, t0.Add(time.Hour)}}, stretches(t0, t0.Add(time.Hour), 1))
	// Shorter than a second a stretch: as many as whole seconds allow.
	require.Equal(t, []stretch{{t0.Add(300 * time.Millisecond), t0.Add(900 * time.Millisecond)}},
		stretches(t0.Add(300*time.Millisecond), t0.Add(900*time.Millisecond), 4))
	require.Equal(t, []stretch{{t0.Add(500 * time.Millisecond), t0.Add(time.Second)}, {t0.Add(time.Second), t0.Add(1500 * time.Millisecond)}},
		stretches(t0.Add(500*time.Millisecond), t0.Add(1500*time.Millisecond), 4))

	rnd := rand.New(rand.NewPCG(16, 16))
	for range 2000 {
		since := t0.Add(time.Duration(rnd.Int64N(int64(400 * 24 * time.Hour))))
		until := since.Add(1 + time.Duration(rnd.Int64N(int64([]time.Duration{3 * time.Second, time.Hour, 90 * 24 * time.Hour}[rnd.IntN(3)]))))
		k := 1 + rnd.IntN(6)
		got := stretches(since, until, k)
		require.NotEmpty(t, got)
		require.LessOrEqual(t, len(got), k)
		require.Equal(t, since, got[0].since)
		require.Equal(t, until, got[len(got)-1].until)
		for i, s := range got {
			require.True(t, s.since.Before(s.until), "%v: stretch %d empty", got, i)
			if i > 0 {
				require.Equal(t, got[i-1].until, s.since, "consecutive")
				require.Zero(t, s.since.Nanosecond(), "cut at a whole second")
			}
		}
		if until.Sub(since) >= time.Duration(k)*2*time.Second {
			require.Len(t, got, k, "a window of %v in %d", until.Sub(since), k)
		}
	}
}
