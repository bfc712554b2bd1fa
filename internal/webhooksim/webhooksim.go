// Package webhooksim plays the application's live webhook worker in tests:
// it records a delivery in webhook_events (ON CONFLICT DO NOTHING) and moves
// payments with the published guard (package guard) inside the same
// transaction, as an application is told to, so tests can seed a database
// "as the webhooks left it" and race the job.
package webhooksim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/guard"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/store/pgstore"
)

// Delivery is one webhook delivery: an event and the facts it implies.
type Delivery struct {
	EventID, EventType string
	At                 time.Time
	Payload            []byte
	Facts              []Fact
}

// Fact is one implied change of a payment.
type Fact struct {
	PaymentID      string
	State          models.State // StateNone: no state change
	At             time.Time
	AmountRefunded int64
	Amount         int64
	Currency       string
	// PayoutID, on a settled fact, names the payout: the worker records
	// the settlement with the published guard (RecordSettlement) too.
	PayoutID string
}

// Stripe converts the fake Stripe's deliveries.
func Stripe(ds []stripefake.Delivery) []Delivery {
	out := make([]Delivery, len(ds))
	for i, d := range ds {
		out[i] = Delivery{EventID: d.EventID, EventType: d.EventType, At: d.At, Payload: d.Payload}
		for _, f := range d.Facts {
			out[i].Facts = append(out[i].Facts, Fact{PaymentID: f.PaymentID, State: f.State, At: f.At, AmountRefunded: f.AmountRefunded, Amount: f.Amount, Currency: f.Currency})
		}
	}
	return out
}

// GoCardless converts the fake GoCardless's deliveries.
func GoCardless(ds []gcfake.Delivery) []Delivery {
	out := make([]Delivery, len(ds))
	for i, d := range ds {
		out[i] = Delivery{EventID: d.EventID, EventType: d.EventType, At: d.At, Payload: d.Payload}
		for _, f := range d.Facts {
			out[i].Facts = append(out[i].Facts, Fact{PaymentID: f.PaymentID, State: f.State, At: f.At, AmountRefunded: f.AmountRefunded, Amount: f.Amount, Currency: f.Currency})
		}
	}
	return out
}

// Apply processes one delivery for provider source: a duplicate delivery
// (the event id is already recorded) does nothing.
// Like a real worker, it retries a transaction PostgreSQL aborted for a
// deadlock.
func Apply(ctx context.Context, db *gorm.DB, source string, d Delivery) error {
	var err error
	for range 10 {
		err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return newConn(tx).apply(ctx, source, d) })
		if !pgstore.IsConflict(err) {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	}
	return err
}

// conn is a worker's statements in one transaction, written in the
// connection's mapping (models.AppSchemaOf) and dialect, as an
// application's worker writes its own tables; the published guard runs on
// its transaction. A Seed writes its statements once, not once a delivery,
// and sends them without gorm's statement building: seeding the demo's
// SQLite spent two fifths of its time there.
type conn struct {
	tx guard.Execer // the transaction's *sql.Tx
	g  guard.Guard  // the published guard, over the connection's mapping
	// insertEvent and insertPayment are the worker's own two statements.
	insertEvent, insertPayment string
}

func newConn(tx *gorm.DB) *conn {
	m := models.AppSchemaOf(tx)
	c := &conn{tx: tx.Statement.ConnPool, g: guard.For(dialect(tx), m)}
	// The same statements on both stores: PostgreSQL types the payload
	// parameter as the jsonb column it fills, and the embedded store's
	// times are text in the normalised form the engine's statements and
	// the guard's write.
	at := `$7`
	if c.g.Dialect == guard.SQLite {
		at = `strftime('%Y-%m-%d %H:%M:%f+00:00', $7)`
	}
	c.insertEvent = c.placeholders(m.SQL(`INSERT INTO {webhook_events} ({source}, {event_id}, {event_type}, {payload}, {processed_at})
		VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP) ON CONFLICT ({source}, {event_id}) DO NOTHING`))
	c.insertPayment = c.placeholders(m.SQL(`INSERT INTO {payments} ({provider}, {provider_id}, {state}, {amount}, {currency}, {amount_refunded}, {source_updated_at})
		VALUES ($1, $2, $3, $4, $5, $6, ` + at + `) ON CONFLICT ({provider}, {provider_id}) DO NOTHING`))
	return c
}

// placeholders writes q's $n as the dialect's numbered parameters.
func (c *conn) placeholders(q string) string {
	if c.g.Dialect == guard.SQLite {
		return strings.ReplaceAll(q, "$", "?")
	}
	return q
}

// timeArg is a provider time as the dialect's statements take it.
func (c *conn) timeArg(t time.Time) any {
	if c.g.Dialect == guard.SQLite {
		return t.UTC().Format(time.RFC3339Nano)
	}
	return t.UTC()
}

func (c *conn) apply(ctx context.Context, source string, d Delivery) error {
	res, err := c.tx.ExecContext(ctx, c.insertEvent, source, d.EventID, d.EventType, string(d.Payload))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // nil: a duplicate delivery
	}
	for _, f := range d.Facts {
		if err := c.applyFact(ctx, source, f); err != nil {
			return err
		}
	}
	return nil
}

// dialect is the published guard's dialect for db: the worker speaks its
// database's SQL, as an application's does. The store names it
// (internal/dbopen is the one place that asks a connection).
func dialect(db *gorm.DB) guard.Dialect {
	if dbopen.Store(db, nil).Dialect() == guard.SQLite.String() {
		return guard.SQLite
	}
	return guard.Postgres
}

// ApplyFact applies one fact as the application's worker would: a payment
// it did not know is inserted (a row created meanwhile by someone else wins),
// and every change of an existing row goes through the published guard
// (package guard), on either store.
func ApplyFact(tx *gorm.DB, source string, f Fact) error {
	ctx := tx.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return newConn(tx).applyFact(ctx, source, f)
}

func (c *conn) applyFact(ctx context.Context, source string, f Fact) error {
	g := c.g
	if f.State == models.StateNone {
		if f.AmountRefunded > 0 {
			_, err := g.RaiseRefund(ctx, c.tx, source, f.PaymentID, f.AmountRefunded)
			return err
		}
		return nil
	}
	refund := int64(0)
	if f.State != models.StateCanceled {
		refund = f.AmountRefunded
	}
	res, err := c.tx.ExecContext(ctx, c.insertPayment, source, f.PaymentID, g.Schema.AppState(f.State), f.Amount, f.Currency, refund, c.timeArg(f.At))
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		if _, err := g.Advance(ctx, c.tx, source, f.PaymentID, f.State, f.At, f.AmountRefunded); err != nil {
			return err
		}
	}
	if f.State == models.StateSettled && f.PayoutID != "" {
		_, err := g.RecordSettlement(ctx, c.tx, source, f.PaymentID, f.PayoutID, f.At)
		return err
	}
	return nil
}

// Seed delivers every delivery up to t that keep(i, d) accepts, as the
// webhooks would have left the database.
func Seed(ctx context.Context, db *gorm.DB, source string, ds []Delivery, t time.Time, keep func(i int, d Delivery) bool) (delivered, missed int, err error) {
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		c := newConn(tx)
		for i, d := range ds {
			if d.At.After(t) {
				continue
			}
			if !keep(i, d) {
				missed++
				continue
			}
			if err := c.apply(ctx, source, d); err != nil {
				return fmt.Errorf("deliver %s: %w", d.EventID, err)
			}
			delivered++
			if (delivered == 256 || delivered == 4096) && c.g.Dialect == guard.Postgres {
				// A never-analyzed payments table makes the guard's update
				// pick the partial stuck-payment index (provider, account,
				// source_updated_at) over the unique one and filter every
				// open payment for its id: 28 of the month's 30 s of seeding
				// (issue 16). An application's table has statistics; a
				// seed's grows from nothing in one transaction, whose own
				// rows ANALYZE counts.
				if err := tx.Exec(`ANALYZE ` + c.g.Schema.Payments.Ident()).Error; err != nil {
					return err
				}
			}
		}
		return nil
	})
	return delivered, missed, err
}
