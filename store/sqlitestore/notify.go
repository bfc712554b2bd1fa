package sqlitestore

import (
	"context"
	"time"

	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/internal/sqlbase"
)

// ClaimNotification implements store.Notifications. No row lock is needed:
// every write transaction of the embedded store holds the database's write
// lock from BEGIN (internal/dbopen opens it with _txlock=immediate), so a
// concurrent claim waits at its BEGIN.
func (s *Store) ClaimNotification(ctx context.Context, runID int64, channel string,
	fn func(ctx context.Context, n store.Notification) (*store.NotificationUpdate, error)) error {
	var stamp any
	if n, ok := s.Now().(time.Time); ok {
		stamp = n.Format(time.RFC3339Nano)
	}
	return s.Base.ClaimNotification(ctx, runID, channel, sqlbase.ClaimSQL{Now: now, NowArg: stamp}, fn)
}
