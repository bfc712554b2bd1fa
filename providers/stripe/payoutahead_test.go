package stripe_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/providers/stripe"
)

// TestPayoutsListedAhead: in a window of daily payouts read with read-aheads
// taken over and over, each payout event a read-ahead lists has its balance
// transactions listed ahead (payoutahead.go), and the mapping reads them
// from there. ListChanges hands on the same events, changes and pages as
// the stream alone, with no request more than the read-aheads' own, and
// leaves no file behind, whether the listing ahead was whole, cut short by
// the bound on disk (the mapping lists the rest from the last page kept),
// or refused (the mapping lists the payout itself).
func TestPayoutsListedAhead(t *testing.T) {
	t.Parallel()
	u, lp := aheadAccount(t, 3000, 7*24*time.Hour, true)
	base := aheadProvider(t, u, stripe.Config{})
	want := listAll(t, base, lp)
	payouts := 0
	for _, e := range want.events {
		if e.Type == "payout.paid" {
			payouts++
		}
	}
	require.GreaterOrEqual(t, payouts, 3, "a window of daily payouts")

	// Each payout's first request for its balance transactions answered
	// 400 by refusing (its first page: no starting_after).
	var mu sync.Mutex
	refused := map[string]bool{}
	refusing := proxy(t, u, func(w http.ResponseWriter, r *http.Request, q url.Values) bool {
		if r.URL.Path != "/v1/balance_transactions" || q.Get("starting_after") != "" {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if refused[q.Get("payout")] {
			return false
		}
		refused[q.Get("payout")] = true
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"not now"}}`)
		return true
	}, nil)

	for _, c := range []struct {
		name string
		url  string
		most int64 // ReadAheadPayoutsMax
		// extra: requests beyond the stream's and read-aheads' own (the
		// refused ones, which the stream alone never made)
		extra bool
	}{
		{"whole", u, 0, false},
		// A page of 100 balance transactions keeps about 25 kB decoded
		// (btSize): a bound of 40 kB keeps a page of a payout.
		{"cut short by the bound", u, 40 << 10, false},
		{"refused, then listed by the mapping", refusing, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs bytes.Buffer
			var logMu sync.Mutex
			p := aheadProvider(t, c.url, stripe.Config{ReadAhead: true, ReadAheadEvents: 300, ReadAheadDir: dir, ReadAheadPayoutsMax: c.most,
				Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			got := listAll(t, p, lp)
			requireSameListing(t, want, got)
			require.Positive(t, p.PayoutsListedAhead(), "payouts whose balance transactions were listed ahead")
			logMu.Lock()
			whole := strings.Count(logs.String(), "read ahead\" payout_id")
			part := strings.Count(logs.String(), "whole=false")
			logMu.Unlock()
			t.Logf("%d payout events, %d listed ahead (%d in part); %d read-aheads; %d requests, %d alone",
				payouts, p.PayoutsListedAhead(), part, p.ReadAheadsTaken(), p.Requests(), base.Requests())
			require.EqualValues(t, p.PayoutsListedAhead(), whole, "each logged")
			if c.most == 0 && !c.extra {
				require.Zero(t, part, "every listing whole")
			} else {
				require.Positive(t, part, "listings the mapping finished itself")
			}
			taken := p.ReadAheadsTaken()
			bound := base.Requests() + 2*taken + 2
			if c.extra {
				bound += int64(payouts) * 2 // each refused once, by whoever asked first
			}
			if c.most > 0 {
				bound += p.PayoutsListedAhead() // a page read but past the bound, read again
			}
			require.LessOrEqual(t, p.Requests(), bound, "requests: %d alone, %d with %d read-aheads and %d payouts listed ahead",
				base.Requests(), p.Requests(), taken, p.PayoutsListedAhead())
			left, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, left, "the files are unlinked when made")
		})
	}
}
