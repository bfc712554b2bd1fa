package reconcile_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/transport"
	"github.com/reconciler/reconciler/reconcile"
)

// recorder records the PaymentIntents a provider re-fetches by id.
type recorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if id, ok := strings.CutPrefix(req.URL.Path, "/v1/payment_intents/"); ok {
		r.mu.Lock()
		r.ids = append(r.ids, id)
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.ids
	r.ids = nil
	return out
}

// A payment the stuck path cannot finish yet (an authorisation the customer
// abandoned, funds still pending) waits its turn: with room for two, three
// stuck payments are all re-fetched within two runs, oldest first, then the
// one checked longest ago; a dry run rotates nothing; the run's notes say
// what the path cost.
func TestStuckPathRotates(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		var ids []string
		for i := range 3 {
			pi := e.acct.CreatePayment(1000, "gbp", true, at(-24*10+float64(i)))
			e.acct.Authorise(pi, at(-24*10+float64(i)).Add(time.Minute))
			ids = append(ids, pi)
		}
		e.deliver(func(int, webhooksim.Delivery) bool { return true })
		rec := &recorder{}
		p, err := stripe.New(stripe.Config{APIKey: "sk_test_reconciler", BaseURL: e.url,
			Transport: transport.New(transport.Options{Base: rec})})
		require.NoError(t, err)
		clock := now
		run := func(dry bool) ([]string, map[string]any) {
			t.Helper()
			clock = clock.Add(time.Hour) // a run an hour after the last
			res, err := reconcile.Run(context.Background(), reconcile.Options{DB: e.db.DB, Provider: p, Now: func() time.Time { return clock },
				StuckLimit: 2, DryRun: dry})
			require.NoError(t, err)
			notes := map[string]any{}
			require.NoError(t, json.Unmarshal(res.Run.Notes, &notes))
			return rec.take(), notes
		}
		got, notes := run(false)
		require.Equal(t, ids[:2], got, "the two oldest first")
		require.Equal(t, float64(2), notes["stuck_checked"], "notes: %v", notes)
		require.Equal(t, float64(2), notes["stuck_api_requests"], "one request each: nothing captured, nothing disputed")
		got, _ = run(false)
		require.Equal(t, []string{ids[2], ids[0]}, got, "the one never checked, then the one checked longest ago")
		dry, _ := run(true)
		require.Equal(t, []string{ids[1], ids[0]}, dry, "checked longest ago first; ties by the older row")
		got, _ = run(false)
		require.Equal(t, dry, got, "a dry run rotates nothing")
		for _, id := range ids {
			require.Equal(t, models.StateAuthorised, e.payment(id).State)
		}
	})
}
