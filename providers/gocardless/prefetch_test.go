package gocardless

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/tmpfile"
)

// TestPrefetchChainEndsAtASlicePastTheHold: a slice listed ahead whose
// events pass the hold is given up by the reader, which then plans anew,
// so the chain must not list the slice after it, even when the page that
// passes the hold is the slice's last. (The chain went on past such a
// slice; the reader found the next slice listed ahead for a plan it no
// longer had, and its requests were wasted.) A slice listed to its end
// within the hold goes on to the next.
func TestPrefetchChainEndsAtASlicePastTheHold(t *testing.T) {
	t.Parallel()
	w := newSlicedWorld(t, 3000)
	whole := w.list(t, 1<<30, 500, w.lp)
	from := ceilMS(w.lp.Since)
	span := 2 * 24 * time.Hour
	n := 0 // the payment events of the first slice, [from, from+span)
	for _, pg := range whole.pages {
		for _, e := range pg.Events {
			if strings.HasPrefix(e.Type, "payments.") && !e.At.Before(from) && e.At.Before(from.Add(span)) {
				n++
			}
		}
	}
	require.Greater(t, n, 40, "the first two days hold too few payment events for the test")
	for _, c := range []struct {
		hold      int
		following bool
	}{
		{hold: n - 1, following: false}, // passed on the slice's last page (pages of 20: the page before held at most n-1)
		{hold: n, following: true},      // listed to its end within the hold
	} {
		p, err := New(Config{AccessToken: "sandbox_prefetch", BaseURL: w.url, Hold: c.hold, PageSize: 20})
		require.NoError(t, err)
		p.noPrefetch = false
		p.spills = tmpfile.NewBudget(1 << 30)
		win := &window{since: w.lp.Since, to: ceilMS(w.lp.Until), flagged: map[string]bool{}, last: map[string]int{}, totals: map[string]total{}, totalsKept: totalsKept}
		win.sp, err = openSpill(p.spillDir, DefaultSpillMax, p.spills)
		require.NoError(t, err)
		p.prefetchNext(context.Background(), win, from, win.to, span)
		pf := win.ahead
		require.NotNil(t, pf, "hold %d: nothing listed ahead", c.hold)
		<-pf.done
		require.NoError(t, pf.err)
		require.Equal(t, n, pf.n, "hold %d: the slice's payment events, listed ahead", c.hold)
		require.Empty(t, pf.next, "hold %d: the slice was listed to its last page", c.hold)
		require.Equal(t, c.following, pf.following != nil, "hold %d (%d events): the slice after it listed ahead", c.hold, n)
		pf.stop()
		win.sp.close()
	}
}
