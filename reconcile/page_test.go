package reconcile

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPagesRecycled: the writer hands a written page's slices back cleared
// (recycle), and the reader's next page takes each of them when it is as
// large as the page before (nextFrom); otherwise, or with none handed back,
// it makes one with a quarter more room.
func TestPagesRecycled(t *testing.T) {
	free := make(chan Page, 2)
	written := Page{Changes: make([]Change, 3, 8), Events: make([]Event, 2), listed: true}
	written.Changes[0] = Change{ProviderID: "pi_1", Payload: []byte(`{}`)}
	written.Events[0] = Event{ID: "evt_1"}
	recycle(written, free)
	require.Equal(t, Change{}, written.Changes[0], "cleared: the GC may take what it pointed to")
	require.Equal(t, Event{}, written.Events[0])

	prev := Page{Changes: make([]Change, 4), Events: make([]Event, 4), listed: true}
	next := prev.nextFrom(free)
	require.Empty(t, next.Changes)
	require.Empty(t, next.Events)
	require.True(t, next.listed)
	require.Same(t, &written.Changes[:1][0], &next.Changes[:1][0], "the changes' slice came back")
	require.Equal(t, 5, cap(next.Events), "the events' slice was too small: a new one, a quarter larger")

	none := prev.nextFrom(free)
	require.Equal(t, 5, cap(none.Changes), "nothing handed back: a new one")
	recycle(Page{}, nil) // no reader: dropped, never blocks
	full := make(chan Page)
	recycle(written, full) // reader not ready: dropped, never blocks
}
