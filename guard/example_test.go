package guard_test

import (
	"context"
	"database/sql"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/guard"
	"github.com/reconciler/reconciler/models"
)

// An application's webhook worker records the delivery and moves the payment
// in one transaction (the README's example).
func ExampleAdvance() {
	var (
		ctx            = context.Background()
		db             *sql.DB // the application's PostgreSQL pool
		eventID        = "evt_1"
		eventType      = "charge.refunded"
		payload        = []byte(`{}`)
		pi             = "pi_1"
		created        = int64(1709294400) // the event's created, Unix seconds
		amountRefunded = int64(1000)
	)
	if db == nil {
		return // (no database in this example)
	}
	worker := func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(ctx, `INSERT INTO webhook_events (source, event_id, event_type, payload, processed_at)
			VALUES ('stripe', $1, $2, $3, now()) ON CONFLICT (source, event_id) DO NOTHING`, eventID, eventType, payload)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // a duplicate delivery changes nothing
		}
		if _, err := guard.Advance(ctx, tx, "stripe", pi, models.StateRefunded, time.Unix(created, 0), amountRefunded); err != nil {
			return err
		}
		return tx.Commit()
	}
	_ = worker()
}

// With gorm, the guard runs on the transaction's connection.
func ExampleDialect_Advance() {
	var gdb *gorm.DB // the application's gorm handle
	if gdb == nil {
		return
	}
	_ = gdb.Transaction(func(tx *gorm.DB) error {
		g := guard.Postgres
		if models.SQLite(tx) {
			g = guard.SQLite
		}
		_, err := g.Advance(tx.Statement.Context, tx.Statement.ConnPool, "gocardless", "PM123", models.StateSettled, time.Now(), 0)
		return err
	})
}
