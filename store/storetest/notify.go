package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// The claim of a sent_notifications row (store.Notifications).

var notificationTests = []test{
	{"ClaimRecordsWhatFnReturns", testClaimRecords},
	{"ClaimErrorRecordsNothing", testClaimErrorRecordsNothing},
	{"ClaimOfAnUnknownRun", testClaimUnknownRun},
	{"ClaimRecordsAfterCtxEnds", testClaimRecordsAfterCtxEnds},
	{"ConcurrentClaimWaits", testConcurrentClaimWaits},
}

// notification is a sent_notifications row.
type notification struct {
	RunID     int64
	Channel   string
	Status    string
	Attempts  int
	LastError *string
	SentAt    *time.Time
}

func (e *env) notifications() []notification {
	e.t.Helper()
	var out []notification
	require.NoError(e.t, e.db.Raw(`SELECT run_id, channel, status, attempts, last_error, sent_at FROM sent_notifications ORDER BY run_id, channel`).
		Scan(&out).Error)
	for i := range out {
		out[i].SentAt = utc(out[i].SentAt)
	}
	return out
}

// claim claims (runID, channel) on st, requires it to succeed, and returns
// what fn saw.
func (e *env) claim(st store.Store, runID int64, channel string, upd *store.NotificationUpdate) store.Notification {
	e.t.Helper()
	var saw store.Notification
	calls := 0
	require.NoError(e.t, st.ClaimNotification(e.ctx, runID, channel, func(_ context.Context, n store.Notification) (*store.NotificationUpdate, error) {
		calls++
		saw = n
		return upd, nil
	}))
	require.Equal(e.t, 1, calls)
	return saw
}

func testClaimRecords(t *testing.T, e *env) {
	r, other := e.run(models.Run{}), e.run(models.Run{})
	pending := store.Notification{Status: store.NotificationPending}
	require.Equal(t, pending, e.claim(e.st, r.ID, "slack", nil), "a new row is pending")
	require.Equal(t, []notification{{RunID: r.ID, Channel: "slack", Status: store.NotificationPending}}, e.notifications(),
		"the claim is kept with no update")
	require.Equal(t, pending, e.claim(e.st, r.ID, "slack", &store.NotificationUpdate{Status: store.NotificationFailed, Attempts: 2,
		LastError: ptr("slack answered 503")}))
	require.Equal(t, []notification{{RunID: r.ID, Channel: "slack", Status: store.NotificationFailed, Attempts: 2, LastError: ptr("slack answered 503")}},
		e.notifications())

	// Channels and runs are rows of their own.
	e.claim(e.st, r.ID, "email", nil)
	e.claim(e.st, other.ID, "slack", &store.NotificationUpdate{Status: store.NotificationSent, Attempts: 1, Sent: true})

	sentAt := e.now.Add(time.Hour)
	require.Equal(t, store.Notification{Status: store.NotificationFailed, Attempts: 2, LastError: ptr("slack answered 503")},
		e.claim(e.withClock(sentAt), r.ID, "slack", &store.NotificationUpdate{Status: store.NotificationSent, Attempts: 1, Sent: true}))
	require.Equal(t, []notification{
		{RunID: r.ID, Channel: "email", Status: store.NotificationPending},
		{RunID: r.ID, Channel: "slack", Status: store.NotificationSent, Attempts: 3, SentAt: &sentAt},
		{RunID: other.ID, Channel: "slack", Status: store.NotificationSent, Attempts: 1, SentAt: &e.now},
	}, e.notifications(), "sent_at is the store's clock; last_error is cleared")
	require.Equal(t, store.Notification{Status: store.NotificationSent, Attempts: 3}, e.claim(e.st, r.ID, "slack", nil))
}

func testClaimErrorRecordsNothing(t *testing.T, e *env) {
	r := e.run(models.Run{})
	fail := func(upd *store.NotificationUpdate) error {
		return e.st.ClaimNotification(e.ctx, r.ID, "slack", func(context.Context, store.Notification) (*store.NotificationUpdate, error) {
			return upd, errBoom
		})
	}
	require.ErrorIs(t, fail(nil), errBoom)
	require.Empty(t, e.notifications(), "the row the claim created is not kept")
	e.claim(e.st, r.ID, "slack", &store.NotificationUpdate{Status: store.NotificationFailed, Attempts: 1, LastError: ptr("x")})
	require.ErrorIs(t, fail(&store.NotificationUpdate{Status: store.NotificationSent, Attempts: 1, Sent: true}), errBoom)
	require.Equal(t, []notification{{RunID: r.ID, Channel: "slack", Status: store.NotificationFailed, Attempts: 1, LastError: ptr("x")}}, e.notifications())
}

func testClaimUnknownRun(t *testing.T, e *env) {
	called := false
	err := e.st.ClaimNotification(e.ctx, 987654, "slack", func(context.Context, store.Notification) (*store.NotificationUpdate, error) {
		called = true
		return nil, nil
	})
	require.Error(t, err)
	require.False(t, called)
	require.Empty(t, e.notifications())
}

func testClaimRecordsAfterCtxEnds(t *testing.T, e *env) {
	r := e.run(models.Run{})
	ctx, cancel := context.WithCancel(e.ctx)
	err := e.st.ClaimNotification(ctx, r.ID, "slack", func(ctx context.Context, _ store.Notification) (*store.NotificationUpdate, error) {
		cancel() // the caller gave up while the POST was under way
		<-ctx.Done()
		return &store.NotificationUpdate{Status: store.NotificationSent, Attempts: 1, Sent: true}, nil
	})
	require.NoError(t, err)
	require.Equal(t, []notification{{RunID: r.ID, Channel: "slack", Status: store.NotificationSent, Attempts: 1, SentAt: &e.now}}, e.notifications())
}

// testConcurrentClaimWaits: a second claim of an existing row waits for
// the first to record its outcome, and sees it.
func testConcurrentClaimWaits(t *testing.T, e *env) {
	r := e.run(models.Run{})
	e.claim(e.st, r.ID, "slack", &store.NotificationUpdate{Status: store.NotificationFailed, Attempts: 1, LastError: ptr("first try")})
	holding, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var firstErr, secondErr error
	var second store.Notification
	wg.Add(1)
	go func() {
		defer wg.Done()
		firstErr = e.st.ClaimNotification(e.ctx, r.ID, "slack", func(context.Context, store.Notification) (*store.NotificationUpdate, error) {
			close(holding)
			<-release
			return &store.NotificationUpdate{Status: store.NotificationSent, Attempts: 1, Sent: true}, nil
		})
	}()
	<-holding
	secondDone := make(chan struct{})
	go func() {
		defer close(secondDone)
		secondErr = e.st.ClaimNotification(e.ctx, r.ID, "slack", func(_ context.Context, n store.Notification) (*store.NotificationUpdate, error) {
			second = n
			return nil, nil
		})
	}()
	select {
	case <-secondDone:
		close(release)
		wg.Wait()
		t.Fatalf("the second claim ran while the first held the row: it saw %+v (err %v)", second, secondErr)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	wg.Wait()
	<-secondDone
	require.NoError(t, firstErr)
	require.NoError(t, secondErr)
	require.Equal(t, store.Notification{Status: store.NotificationSent, Attempts: 2, LastError: nil}, second)
	require.False(t, errors.Is(secondErr, store.ErrLocked))
}
