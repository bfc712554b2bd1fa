package sqlitestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/sqlitestore"
)

// BenchmarkBatch times one batch's main statements on 1,000 payments, in a
// database of `rows` payments: a flat ns/op from size to size means a
// batch costs the same however large the table.
//
//	go test ./store/sqlitestore/ -run '^$' -bench Batch
func BenchmarkBatch(b *testing.B) {
	for _, rows := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			ctx := context.Background()
			st := sqlitestore.New(openDB(b), nil)
			at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
			ids := make([]string, rows)
			for i := range ids {
				ids[i] = fmt.Sprintf("pi_%08d", i*7919%rows)
			}
			for i := 0; i < rows; i += 1000 {
				ps := make([]store.NewPayment, 0, 1000)
				for _, id := range ids[i:min(i+1000, rows)] {
					ps = append(ps, store.NewPayment{ProviderID: id, State: models.StateCaptured, At: at, Amount: 1000, Currency: "gbp"})
				}
				require.NoError(b, st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
					_, err := tx.InsertPayments(ctx, "stripe", "", ps)
					return err
				}))
			}
			payload := json.RawMessage(`{"id":"evt_x","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_x","object":"charge","amount":1000,"metadata":{}` +
				strings.Repeat(`,"f":"`+strings.Repeat("x", 40)+`"`, 25) + `}}}`)
			b.Run("LoadPayments", func(b *testing.B) {
				for n := range b.N {
					batch := ids[(n*1000)%rows:][:1000]
					require.NoError(b, st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
						ps, err := tx.LoadPayments(ctx, "stripe", batch)
						require.Len(b, ps, 1000)
						return err
					}))
				}
			})
			b.Run("ApplySteps", func(b *testing.B) {
				for n := range b.N {
					steps := make([]store.Step, 1000)
					for i, id := range ids[(n*1000)%rows:][:1000] {
						steps[i] = store.Step{ProviderID: id, To: models.StateSettled, At: at.Add(time.Duration(n) * time.Second)}
					}
					require.NoError(b, st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
						_, err := tx.ApplySteps(ctx, "stripe", steps)
						return err
					}))
				}
			})
			sent := 0 // events of every round, so that each is new
			b.Run("InsertEvents", func(b *testing.B) {
				for range b.N {
					evs := make([]store.Event, 1000)
					for i := range evs {
						evs[i] = store.Event{EventID: fmt.Sprintf("evt_%d", sent), EventType: "charge.refunded", Payload: payload}
						sent++
					}
					require.NoError(b, st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
						k, err := tx.InsertEvents(ctx, 1, "stripe", evs)
						require.EqualValues(b, 1000, k)
						return err
					}))
				}
			})
		})
	}
}
