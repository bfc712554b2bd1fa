// Package guard is the published guard of DESIGN section 2 ("One guard,
// published"): the single rule by which a payment row may change, in a form an
// application's own webhook worker can call inside its own transaction, so
// that the worker and the reconciler never disagree.
//
// The rule: a row moves to state `to`, established at the provider's time
// `at`, only from an allowed predecessor of `to` and never back in provider
// time (equal times pass, so same-second facts resolve by rank). The one
// exception: a refund or a lost dispute is never stale against a settlement
// (settled → refunded and settled → chargeback pass whatever the times),
// because a payout undoes neither. amount_refunded only grows, and never on
// a canceled payment. A payout is recorded (settled_at, payout_id) whatever
// the state, never replaced by an older one.
//
// Allowed is the rule in memory (it is models.Guard). Advance, RaiseRefund
// and RecordSettlement run it as one conditional UPDATE each, never
// read-then-write, on any Execer: *sql.DB, *sql.Tx, *sql.Conn, or gorm's
// tx.Statement.ConnPool inside a gorm transaction. The package-level
// functions speak PostgreSQL; SQLite.Advance and friends speak the embedded
// SQLite store. On PostgreSQL the migrations also create the same rule as
// SQL functions (reconciler_advance, reconciler_raise_refund,
// reconciler_record_settlement, reconciler_allowed_predecessors), and the
// tests require the functions, this package and the engine's batched
// statements to decide every case identically.
//
// An application whose tables have names of their own (issue 18: the
// configuration's schema section, models.AppSchema) uses For(dialect,
// schema): the same rule and statements, written in its table, column and
// state names. On PostgreSQL the same functions are installed there too,
// written in the application's names and values by every reconciler
// migrate with the mapping it read (models guard_mapped.sql); they take the
// job's state names, as For does.
package guard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/reconciler/reconciler/models"
)

// Execer runs a statement. *sql.DB, *sql.Tx and *sql.Conn satisfy it, and so
// does gorm's ConnPool (tx.Statement.ConnPool inside db.Transaction). The
// statement is sent as is, with the dialect's own placeholders.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Allowed reports whether a row in state cur, whose state was established at
// provider time curAt (nil: unknown), may move to `to` established at at. It
// is models.Guard, the one in-memory rule; Advance runs the same rule in SQL.
// A missing row (models.StateNone) is not a move: Allowed reports false.
func Allowed(cur models.State, curAt *time.Time, to models.State, at time.Time) bool {
	return models.Guard(cur, curAt, to, at)
}

// Predecessors returns the states from which to may be entered (nil for
// created and for an unknown state). The caller owns the slice.
func Predecessors(to models.State) []models.State {
	return append([]models.State(nil), models.Predecessors(to)...)
}

// ErrUnknownState is wrapped by the error Advance returns for a target that
// is not one of models.States.
var ErrUnknownState = errors.New("guard: unknown state")

// Dialect is the SQL a store speaks.
type Dialect int

const (
	// Postgres is the production store: $n placeholders, timestamptz times.
	Postgres Dialect = iota
	// SQLite is the embedded store: ? placeholders, times stored as text in
	// the engine's normalised form and compared with julianday().
	SQLite
)

// String returns "postgres" or "sqlite".
func (d Dialect) String() string {
	if d == SQLite {
		return "sqlite"
	}
	return "postgres"
}

// Advance moves payment (provider, providerID) to `to`, established at the
// provider's time at, if the guard allows it, raising amount_refunded to
// amountRefunded with the move (ignored when to is canceled; never
// lowering it). It reports whether the row moved. Not moving is not an
// error: the row is missing, someone already moved it, or the fact is
// stale. An unknown `to` or a zero at is an error. PostgreSQL; it is the
// statement of the SQL function reconciler_advance.
func Advance(ctx context.Context, db Execer, provider, providerID string, to models.State, at time.Time, amountRefunded int64) (bool, error) {
	return Postgres.Advance(ctx, db, provider, providerID, to, at, amountRefunded)
}

// RaiseRefund raises amount_refunded of payment (provider, providerID) to
// amount, never lowering it and never on a canceled payment, and reports
// whether the row changed. PostgreSQL; reconciler_raise_refund.
func RaiseRefund(ctx context.Context, db Execer, provider, providerID string, amount int64) (bool, error) {
	return Postgres.RaiseRefund(ctx, db, provider, providerID, amount)
}

// RecordSettlement records that payout payoutID paid payment (provider,
// providerID) out at provider time at, whatever the state: an empty
// settled_at is filled in (an empty payoutID means the payout is unknown and
// keeps the row's payout_id), and a different payout at a time no earlier
// than the recorded settled_at replaces it. It reports whether the row
// changed. A zero at is an error. PostgreSQL; reconciler_record_settlement.
func RecordSettlement(ctx context.Context, db Execer, provider, providerID, payoutID string, at time.Time) (bool, error) {
	return Postgres.RecordSettlement(ctx, db, provider, providerID, payoutID, at)
}

// Guard is the guard in one dialect over one application schema: the
// tables, columns and state values a mapped install names (issue 18;
// models.AppSchema, the configuration's schema section). Its methods are the
// package-level functions' and Dialect's, written in the application's
// names: the state passed in and the rule are the job's, the values
// written and compared are the application's. On PostgreSQL the SQL
// functions that every migrate installs for the mapping decide alike.
type Guard struct {
	Dialect Dialect
	Schema  models.AppSchema
}

// For is the guard in dialect d over the application schema s.
func For(d Dialect, s models.AppSchema) Guard { return Guard{Dialect: d, Schema: s} }

// Advance is the package-level Advance in dialect d.
func (d Dialect) Advance(ctx context.Context, db Execer, provider, providerID string, to models.State, at time.Time, amountRefunded int64) (bool, error) {
	return For(d, models.DefaultAppSchema()).Advance(ctx, db, provider, providerID, to, at, amountRefunded)
}

// RaiseRefund is the package-level RaiseRefund in dialect d.
func (d Dialect) RaiseRefund(ctx context.Context, db Execer, provider, providerID string, amount int64) (bool, error) {
	return For(d, models.DefaultAppSchema()).RaiseRefund(ctx, db, provider, providerID, amount)
}

// RecordSettlement is the package-level RecordSettlement in dialect d.
func (d Dialect) RecordSettlement(ctx context.Context, db Execer, provider, providerID, payoutID string, at time.Time) (bool, error) {
	return For(d, models.DefaultAppSchema()).RecordSettlement(ctx, db, provider, providerID, payoutID, at)
}

// Advance is the package-level Advance, in g's dialect and names.
func (g Guard) Advance(ctx context.Context, db Execer, provider, providerID string, to models.State, at time.Time, amountRefunded int64) (bool, error) {
	d := g.Dialect
	if !to.Valid() {
		return false, fmt.Errorf("%w %q (want one of %v)", ErrUnknownState, string(to), models.States)
	}
	if at.IsZero() {
		return false, errors.New("guard: advance: the fact's provider time is zero")
	}
	preds := models.Predecessors(to)
	if len(preds) == 0 {
		return false, nil // created: only ever entered by inserting the row
	}
	if to == models.StateCanceled {
		amountRefunded = 0
	}
	return d.exec(ctx, db, g.Schema.SQL(advanceSQL(d, to)), g.Schema.AppState(to), at, amountRefunded, provider, providerID)
}

// RaiseRefund is the package-level RaiseRefund, in g's dialect and names.
func (g Guard) RaiseRefund(ctx context.Context, db Execer, provider, providerID string, amount int64) (bool, error) {
	d := g.Dialect
	q := `UPDATE {payments} SET {amount_refunded} = $1[[updated_at:, {updated_at} = now()]]
	 WHERE {provider} = $2 AND {provider_id} = $3 AND {amount_refunded} < $1 AND {state} <> {'canceled'}`
	args := []any{amount, provider, providerID}
	if d == SQLite {
		q = `UPDATE {payments} SET {amount_refunded} = ?1[[updated_at:, {updated_at} = CURRENT_TIMESTAMP]]
	 WHERE {provider} = ?2 AND {provider_id} = ?3 AND {amount_refunded} < ?1 AND {state} <> {'canceled'}`
	}
	return d.execArgs(ctx, db, g.Schema.SQL(q), args)
}

// RecordSettlement is the package-level RecordSettlement, in g's dialect
// and names. An application table without settled_at or payout_id records
// no settlement: it reports false.
func (g Guard) RecordSettlement(ctx context.Context, db Execer, provider, providerID, payoutID string, at time.Time) (bool, error) {
	d := g.Dialect
	if at.IsZero() {
		return false, errors.New("guard: record settlement: the payout's provider time is zero")
	}
	if !g.Schema.Has("settled_at") || !g.Schema.Has("payout_id") {
		return false, nil
	}
	q := `UPDATE {payments} SET {settled_at} = $1, {payout_id} = coalesce(NULLIF(CAST($2 AS text), ''), {payout_id})[[updated_at:, {updated_at} = now()]]
	 WHERE {provider} = $3 AND {provider_id} = $4
	   AND ({settled_at} IS NULL
	        OR (NULLIF(CAST($2 AS text), '') IS NOT NULL AND {payout_id} IS DISTINCT FROM $2 AND {settled_at} <= $1))`
	args := []any{at, payoutID, provider, providerID}
	if d == SQLite {
		q = `UPDATE {payments} SET {settled_at} = ` + sqliteTime(`?1`) + `, {payout_id} = coalesce(NULLIF(?2, ''), {payout_id})[[updated_at:, {updated_at} = CURRENT_TIMESTAMP]]
	 WHERE {provider} = ?3 AND {provider_id} = ?4
	   AND ({settled_at} IS NULL
	        OR (NULLIF(?2, '') IS NOT NULL AND {payout_id} IS NOT ?2 AND julianday({settled_at}) <= julianday(?1)))`
		args[0] = sqliteTimeArg(at)
	}
	return d.execArgs(ctx, db, g.Schema.SQL(q), args)
}

// advanceSQL is the guard's UPDATE for target to, a template of
// models.AppSchema.SQL. Its arguments are the target, the fact's time, the
// refund, the provider and the provider id. The predecessors are inlined:
// they are the fixed state names of models, written in the application's
// values by the template.
func advanceSQL(d Dialect, to models.State) string {
	in := func(states []models.State) string {
		q := make([]string, len(states))
		for i, s := range states {
			q[i] = "{'" + string(s) + "'}"
		}
		return strings.Join(q, ", ")
	}
	preds := models.Predecessors(to)
	var exempt []models.State // the predecessors the time clause does not bind
	for _, p := range preds {
		if models.TimeExempt(p, to) {
			exempt = append(exempt, p)
		}
	}
	if d == SQLite {
		q := `UPDATE {payments} SET {state} = ?1, {source_updated_at} = ` + sqliteTime(`?2`) + `,
		    {amount_refunded} = max({amount_refunded}, ?3)[[updated_at:, {updated_at} = CURRENT_TIMESTAMP]]
		 WHERE {provider} = ?4 AND {provider_id} = ?5
		   AND {state} IN (` + in(preds) + `)
		   AND ({source_updated_at} IS NULL OR julianday({source_updated_at}) <= julianday(?2)`
		if len(exempt) > 0 {
			q += ` OR {state} IN (` + in(exempt) + `)`
		}
		return q + `)`
	}
	q := `UPDATE {payments} SET {state} = $1, {source_updated_at} = $2,
	    {amount_refunded} = GREATEST({amount_refunded}, $3)[[updated_at:, {updated_at} = now()]]
	 WHERE {provider} = $4 AND {provider_id} = $5
	   AND {state} IN (` + in(preds) + `)
	   AND ({source_updated_at} IS NULL OR {source_updated_at} <= $2`
	if len(exempt) > 0 {
		q += ` OR {state} IN (` + in(exempt) + `)`
	}
	return q + `)`
}

// sqliteTime normalises a time the way the engine's SQLite statements do, so
// that stored values never depend on who wrote them.
func sqliteTime(expr string) string { return `strftime('%Y-%m-%d %H:%M:%f+00:00', ` + expr + `)` }

// sqliteTimeArg is the text SQLite parses: RFC 3339 in UTC.
func sqliteTimeArg(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func (d Dialect) exec(ctx context.Context, db Execer, q string, to string, at time.Time, refund int64, provider, providerID string) (bool, error) {
	var atArg any = at
	if d == SQLite {
		atArg = sqliteTimeArg(at)
	}
	return d.execArgs(ctx, db, q, []any{to, atArg, refund, provider, providerID})
}

func (d Dialect) execArgs(ctx context.Context, db Execer, q string, args []any) (bool, error) {
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("guard (%s): %w", d, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("guard (%s): rows affected: %w", d, err)
	}
	return n > 0, nil
}
