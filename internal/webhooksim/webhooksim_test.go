package webhooksim_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
)

// The simulated worker on both stores: a delivery is recorded once, a new
// payment is inserted, and every later fact goes through the published
// guard.
func TestApplyOnBothStores(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(testing.TB) *pgtest.DB{"postgres": pgtest.New, "sqlite": pgtest.NewSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t).DB
			ctx := context.Background()
			at := time.Date(2026, 3, 14, 9, 26, 53, 123000000, time.UTC)
			apply := func(d webhooksim.Delivery) { require.NoError(t, webhooksim.Apply(ctx, db, "stripe", d)) }
			fact := func(st models.State, at time.Time, refunded int64) webhooksim.Fact {
				return webhooksim.Fact{PaymentID: "pi_1", State: st, At: at, Amount: 1000, Currency: "gbp", AmountRefunded: refunded}
			}

			apply(webhooksim.Delivery{EventID: "evt_1", EventType: "payment_intent.succeeded", At: at,
				Payload: []byte(`{"id": "evt_1", "data": {"object": {"amount": 1000}}}`), Facts: []webhooksim.Fact{fact(models.StateCaptured, at, 0)}})
			requireRow(t, db, models.StateCaptured, at, 0)
			var ev models.WebhookEvent
			require.NoError(t, db.Where("event_id = ?", "evt_1").Take(&ev).Error)
			var payload map[string]any
			require.NoError(t, json.Unmarshal(ev.Payload, &payload), "the payload is a JSON object: %s", ev.Payload)
			require.Equal(t, "evt_1", payload["id"])
			require.NotNil(t, ev.ProcessedAt)
			require.False(t, ev.Synthetic)

			// A duplicate delivery does nothing, even with other facts.
			apply(webhooksim.Delivery{EventID: "evt_1", EventType: "payment_intent.succeeded", At: at,
				Payload: []byte(`{}`), Facts: []webhooksim.Fact{fact(models.StateSettled, at.Add(time.Hour), 0)}})
			requireRow(t, db, models.StateCaptured, at, 0)

			// A refund, then a stale fact the guard refuses, then a partial
			// refund without a state.
			apply(webhooksim.Delivery{EventID: "evt_2", EventType: "charge.refunded", At: at.Add(time.Hour),
				Payload: []byte(`{}`), Facts: []webhooksim.Fact{fact(models.StateRefunded, at.Add(time.Hour), 400)}})
			requireRow(t, db, models.StateRefunded, at.Add(time.Hour), 400)
			apply(webhooksim.Delivery{EventID: "evt_3", EventType: "payout.paid", At: at.Add(30 * time.Minute),
				Payload: []byte(`{}`), Facts: []webhooksim.Fact{fact(models.StateSettled, at.Add(30*time.Minute), 0)}})
			requireRow(t, db, models.StateRefunded, at.Add(time.Hour), 400)
			apply(webhooksim.Delivery{EventID: "evt_4", EventType: "charge.refund.updated", At: at.Add(2 * time.Hour),
				Payload: []byte(`{}`), Facts: []webhooksim.Fact{fact(models.StateNone, at.Add(2*time.Hour), 1000)}})
			requireRow(t, db, models.StateRefunded, at.Add(time.Hour), 1000)

			var n int64
			require.NoError(t, db.Model(&models.WebhookEvent{}).Count(&n).Error)
			require.Equal(t, int64(4), n)
		})
	}
}

func TestSeedKeepsAndMisses(t *testing.T) {
	t.Parallel()
	db := pgtest.NewSQLite(t).DB
	at := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	ds := []webhooksim.Delivery{
		{EventID: "evt_1", EventType: "x", At: at, Payload: []byte(`{}`),
			Facts: []webhooksim.Fact{{PaymentID: "pi_1", State: models.StateCaptured, At: at, Amount: 1000, Currency: "gbp"}}},
		{EventID: "evt_2", EventType: "x", At: at.Add(time.Hour), Payload: []byte(`{}`),
			Facts: []webhooksim.Fact{{PaymentID: "pi_1", State: models.StateSettled, At: at.Add(time.Hour), Amount: 1000, Currency: "gbp"}}},
		{EventID: "evt_3", EventType: "x", At: at.Add(3 * time.Hour), Payload: []byte(`{}`)},
	}
	delivered, missed, err := webhooksim.Seed(context.Background(), db, "stripe", ds, at.Add(2*time.Hour),
		func(i int, _ webhooksim.Delivery) bool { return i != 1 })
	require.NoError(t, err)
	require.Equal(t, 1, delivered)
	require.Equal(t, 1, missed, "evt_3 is after the seed's time, neither delivered nor missed")
	requireRow(t, db, models.StateCaptured, at, 0)
}

func requireRow(t *testing.T, db *gorm.DB, st models.State, at time.Time, refunded int64) {
	t.Helper()
	var p models.Payment
	require.NoError(t, db.Where("provider = ? AND provider_id = ?", "stripe", "pi_1").Take(&p).Error)
	require.Equal(t, st, p.State)
	require.NotNil(t, p.SourceUpdatedAt)
	require.True(t, p.SourceUpdatedAt.Equal(at), "source_updated_at %s, want %s", p.SourceUpdatedAt, at)
	require.Equal(t, refunded, p.AmountRefunded)
}
