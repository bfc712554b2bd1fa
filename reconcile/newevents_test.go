package reconcile

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/store"
)

// eventsTx records which insert a batch used; the recorded ids decide what
// each returns, as the unique key would.
type eventsTx struct {
	store.Tx
	recorded map[string]bool
	calls    []string
}

func (t *eventsTx) insert(evs []store.Event) int64 {
	var n int64
	for _, e := range evs {
		if !t.recorded[e.EventID] {
			t.recorded[e.EventID] = true
			n++
		}
	}
	return n
}

func (t *eventsTx) InsertEvents(_ context.Context, _ int64, _ string, evs []store.Event) (int64, error) {
	if len(evs) == 0 {
		return 0, nil // as the stores: no statement
	}
	t.calls = append(t.calls, "ask")
	return t.insert(evs), nil
}

func (t *eventsTx) InsertEventsDirect(_ context.Context, _ int64, _ string, evs []store.Event) (int64, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	t.calls = append(t.calls, "direct")
	return t.insert(evs), nil
}

// TestNewEventsPicksByTheLastBatch: the first batch asks which events are
// recorded; while every event is new the next batches send them all at
// once; a batch that finds one recorded makes the next ask again; a batch
// with no events changes nothing.
func TestNewEventsPicksByTheLastBatch(t *testing.T) {
	tx := &eventsTx{recorded: map[string]bool{"evt_webhook": true}}
	var n newEvents
	batches := [][]string{
		{"evt_1", "evt_2"},          // ask: all new
		{"evt_3"},                   // direct: all new
		{},                          // nothing sent, nothing learnt
		{"evt_4", "evt_webhook"},    // direct: one was recorded
		{"evt_5", "evt_6"},          // ask: all new
		{"evt_7", "evt_1", "evt_8"}, // direct: evt_1 recorded by a batch before
		{"evt_9"},                   // ask
	}
	var added []int64
	for _, ids := range batches {
		evs := make([]store.Event, len(ids))
		for i, id := range ids {
			evs[i] = store.Event{EventID: id}
		}
		a, err := n.insert(context.Background(), tx, 1, "stripe", evs)
		require.NoError(t, err)
		added = append(added, a)
	}
	require.Equal(t, []string{"ask", "direct", "direct", "ask", "direct", "ask"}, tx.calls)
	require.Equal(t, []int64{2, 1, 0, 1, 2, 2, 1}, added)
}
