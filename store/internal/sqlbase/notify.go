package sqlbase

import (
	"context"
	"fmt"

	"github.com/reconciler/reconciler/store"
)

// ClaimSQL is what a dialect's claim of a notification row differs in.
type ClaimSQL struct {
	// Lock follows the SELECT of the claimed row and holds it until the
	// transaction ends: " FOR UPDATE" on PostgreSQL, "" on the embedded
	// store, whose transactions hold the database's write lock from BEGIN.
	Lock string
	// Now stamps sent_at: an expression with one placeholder, NowArg.
	Now    string
	NowArg any
}

// ClaimNotification implements store.Notifications. Its transaction
// outlives ctx, so that what fn did is recorded when ctx ends meanwhile;
// the claim's own statements do use ctx. It is not InTx: fn must never run
// twice.
func (b *Base) ClaimNotification(ctx context.Context, runID int64, channel string, d ClaimSQL,
	fn func(ctx context.Context, n store.Notification) (*store.NotificationUpdate, error)) error {
	txCtx := context.WithoutCancel(ctx)
	tx := b.DB.WithContext(txCtx).Begin()
	if tx.Error != nil {
		return fmt.Errorf("begin claim of run %d for %s: %w", runID, channel, b.Translate(tx.Error))
	}
	finished := false
	defer func() {
		if !finished {
			tx.Rollback()
		}
	}()
	if err := tx.WithContext(ctx).Exec(`INSERT INTO sent_notifications (run_id, channel) VALUES (?, ?)
		ON CONFLICT (run_id, channel) DO NOTHING`, runID, channel).Error; err != nil {
		return fmt.Errorf("claim run %d for %s: %w", runID, channel, b.Translate(err))
	}
	var row struct {
		ID        int64
		Status    string
		Attempts  int
		LastError *string
	}
	if err := tx.WithContext(ctx).Raw(`SELECT id, status, attempts, last_error FROM sent_notifications
		WHERE run_id = ? AND channel = ?`+d.Lock, runID, channel).Scan(&row).Error; err != nil {
		return fmt.Errorf("lock notification of run %d for %s: %w", runID, channel, b.Translate(err))
	}
	if row.ID == 0 {
		return fmt.Errorf("notification row of run %d for %s vanished", runID, channel)
	}
	upd, err := fn(ctx, store.Notification{Status: row.Status, Attempts: row.Attempts, LastError: row.LastError})
	if err != nil {
		return err
	}
	if upd != nil {
		recCtx, cancel := context.WithTimeout(txCtx, store.NotificationRecordTimeout)
		defer cancel()
		q := `UPDATE sent_notifications SET status = ?, attempts = attempts + ?, last_error = ?`
		args := []any{upd.Status, upd.Attempts, upd.LastError}
		if upd.Sent {
			q += `, sent_at = ` + d.Now
			args = append(args, d.NowArg)
		}
		if err := tx.WithContext(recCtx).Exec(q+` WHERE id = ?`, append(args, row.ID)...).Error; err != nil {
			return fmt.Errorf("record notification of run %d for %s: %w", runID, channel, b.Translate(err))
		}
	}
	finished = true
	if err := tx.Commit().Error; err != nil {
		return fmt.Errorf("commit notification of run %d for %s: %w", runID, channel, b.Translate(err))
	}
	return nil
}
