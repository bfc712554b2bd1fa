package pgstore

import (
	"context"

	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/internal/sqlbase"
)

// ClaimNotification implements store.Notifications: the claimed row is
// locked with SELECT … FOR UPDATE, so a concurrent claim of the same row
// waits for this transaction.
func (s *Store) ClaimNotification(ctx context.Context, runID int64, channel string,
	fn func(ctx context.Context, n store.Notification) (*store.NotificationUpdate, error)) error {
	return s.Base.ClaimNotification(ctx, runID, channel,
		sqlbase.ClaimSQL{Lock: " FOR UPDATE", Now: "coalesce(CAST(? AS timestamptz), now())", NowArg: s.Now()}, fn)
}
