// Package pgstore is the PostgreSQL store, the production one: batch
// statements over jsonb_to_recordset, the guard in each statement's WHERE,
// and session advisory locks that die with the process.
package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/internal/sqlbase"
)

// Store is the PostgreSQL store.
type Store struct {
	*sqlbase.Base
	toast toastChoice // whether event transactions compress with lz4 (toast.go)
}

var _ store.Store = (*Store)(nil)

// New returns the store over db (a gorm PostgreSQL connection); c nil means
// the wall clock.
func New(db *gorm.DB, c clock.Clock) *Store {
	b := sqlbase.New(db, c, translate)
	b.OwnConn = true // a batch COPYs its events (copyEvents)
	return &Store{Base: b}
}

// translate maps PostgreSQL's deadlock and serialization failures to
// store.ErrConflict, keeping the driver's error in the chain, and makes a
// multi-line driver error one line (OneLine).
func translate(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "40P01" || pg.Code == "40001") {
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	if err != nil && strings.Contains(err.Error(), "\n") {
		return oneLineError{err}
	}
	return err
}

// OneLine returns err's message as one line, each part once. pgx lists a
// failed connection's attempts on lines of their own, and with sslmode
// prefer the same failure twice (with TLS, then without); OneLine keeps
// each distinct line once, joined by "; ". A server error's detail, which
// pgx leaves out of its message, is added once.
func OneLine(err error) string {
	var parts []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !slices.Contains(parts, line) {
			parts = append(parts, line)
		}
	}
	msg := strings.Join(parts, " ")
	if len(parts) > 1 {
		msg = parts[0] + " " + strings.Join(parts[1:], "; ")
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Detail != "" && !strings.Contains(msg, pg.Detail) {
		msg += " (detail: " + strings.Join(strings.Fields(pg.Detail), " ") + ")"
	}
	return msg
}

// oneLineError is a driver error whose message OneLine made one line; the
// driver's error stays in the chain.
type oneLineError struct{ err error }

func (e oneLineError) Error() string { return OneLine(e.err) }
func (e oneLineError) Unwrap() error { return e.err }

// IsConflict reports whether err is a deadlock or a serialization failure,
// what InTx retries: for code that runs its own transactions on the same
// database (the simulator of the application's webhook worker).
func IsConflict(err error) bool { return errors.Is(translate(err), store.ErrConflict) }

// Dialect implements store.Store.
func (s *Store) Dialect() string { return "postgres" }

// InTx implements store.Store.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	lz4 := s.lz4(ctx)
	return s.Base.InTx(ctx, func(ctx context.Context, c *sqlbase.Conn) error { return fn(ctx, tx{c: c, lz4: lz4}) })
}

const inRange = "%[1]s >= ? AND %[1]s < ?"

// WindowStates implements store.Reads.
func (s *Store) WindowStates(ctx context.Context, q store.WindowQuery) ([]store.PaymentState, error) {
	return s.Base.WindowStates(ctx, q, inRange)
}

// StuckPayments implements store.Reads.
func (s *Store) StuckPayments(ctx context.Context, q store.StuckQuery) ([]string, error) {
	return s.Base.StuckPayments(ctx, q, "%s < ?")
}

// PaymentsInWindow implements store.Reads.
func (s *Store) PaymentsInWindow(ctx context.Context, q store.PaymentQuery) ([]models.Payment, error) {
	return s.Base.PaymentsInWindow(ctx, q, inRange)
}

// CountInWindow implements store.Reads.
func (s *Store) CountInWindow(ctx context.Context, q store.PaymentQuery) (int, error) {
	return s.Base.CountInWindow(ctx, q, inRange)
}

// PayoutsInWindow implements store.Reads.
func (s *Store) PayoutsInWindow(ctx context.Context, q store.PaymentQuery) ([]string, error) {
	return s.Base.PayoutsInWindow(ctx, q, inRange)
}

// lock is a session-level advisory lock on a connection of its own,
// released by the server if the process dies (DESIGN section 8).
type lock struct {
	conn lockConn
	key  string
}

// lockConn is the connection a lock lives on.
type lockConn interface {
	exec(ctx context.Context, q string, args ...any) error
	queryBool(ctx context.Context, q string, args ...any) (bool, error)
	close(ctx context.Context) error
}

// pgxConn is a connection of its own, opened with the pool's DSN.
type pgxConn struct{ c *pgx.Conn }

func (p pgxConn) exec(ctx context.Context, q string, args ...any) error {
	_, err := p.c.Exec(ctx, q, args...)
	return err
}

func (p pgxConn) queryBool(ctx context.Context, q string, args ...any) (bool, error) {
	var ok bool
	err := p.c.QueryRow(ctx, q, args...).Scan(&ok)
	return ok, err
}

func (p pgxConn) close(ctx context.Context) error { return p.c.Close(ctx) }

// poolConn is a connection taken from the pool: only when the gorm
// connection was opened over an existing pool and names no DSN.
type poolConn struct{ c *sql.Conn }

func (p poolConn) exec(ctx context.Context, q string, args ...any) error {
	_, err := p.c.ExecContext(ctx, q, args...)
	return err
}

func (p poolConn) queryBool(ctx context.Context, q string, args ...any) (bool, error) {
	var ok bool
	err := p.c.QueryRowContext(ctx, q, args...).Scan(&ok)
	return ok, err
}

func (p poolConn) close(context.Context) error {
	if err := p.c.Close(); !errors.Is(err, sql.ErrConnDone) {
		return err
	}
	return nil
}

// lockConnection opens the connection a lock lives on. It is NOT one of
// the pool's: a run holds its lock for its whole life, so N concurrent
// runs holding N pool connections would leave none for their own batch
// transactions against a pool of N and deadlock. The lock's connection is
// opened with the pool's DSN (the same database, user and search_path),
// outside the pool's budget: a deployment running N runs at once uses up
// to N connections more than its pool size. Only a gorm connection opened
// over an existing pool (no DSN to dial) falls back to one of the pool's.
func (s *Store) lockConnection(ctx context.Context) (lockConn, error) {
	if d, ok := s.DB.Dialector.(*postgres.Dialector); ok && d.Config != nil && d.DSN != "" {
		c, err := pgx.Connect(ctx, d.DSN)
		if err != nil {
			return nil, err
		}
		return pgxConn{c}, nil
	}
	sqlDB, err := s.DB.DB()
	if err != nil {
		return nil, err
	}
	c, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return poolConn{c}, nil
}

const lockID = `hashtextextended(current_schema() || '/reconciler/' || $1, 0)`

// TryLock implements store.Store: an advisory lock keyed by the current
// schema and key, so that deployments sharing a database in different
// schemas do not block each other.
func (s *Store) TryLock(ctx context.Context, key string) (store.Lock, error) {
	conn, err := s.lockConnection(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock connection: %w", err)
	}
	ok, err := conn.queryBool(ctx, `SELECT pg_try_advisory_lock(`+lockID+`)`, key)
	if err != nil {
		_ = conn.close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("take run lock: %w", err)
	}
	if !ok {
		_ = conn.close(context.WithoutCancel(ctx))
		return nil, store.ErrLocked
	}
	return &lock{conn: conn, key: key}, nil
}

func (l *lock) Release(ctx context.Context) error {
	err := l.conn.exec(ctx, `SELECT pg_advisory_unlock(`+lockID+`)`, l.key)
	if cerr := l.conn.close(ctx); err == nil {
		err = cerr
	}
	return err
}

// Held implements store.Lock. A session advisory lock is released only by
// an unlock or by the end of its session, so the session answering on the
// lock's own connection is the lock still held; a terminated backend or a
// broken connection fails the query.
func (l *lock) Held(ctx context.Context) error {
	if _, err := l.conn.queryBool(ctx, `SELECT true`); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: its connection failed: %w", store.ErrLockLost, err)
	}
	return nil
}

// tx is one transaction's batch statements.
type tx struct {
	c   *sqlbase.Conn
	lz4 bool // record events' payloads with lz4 (toast.go)
}

func (t tx) now() any { return t.c.Base().Now() }

func (t tx) LoadPayments(_ context.Context, provider string, ids []string) ([]store.Payment, error) {
	if len(ids) == 0 {
		// json.Marshal(nil) is the scalar null, not an array.
		return nil, nil
	}
	arg, err := sqlbase.JSON(ids)
	if err != nil {
		return nil, err
	}
	rows, err := t.payments(len(ids), t.c.SQL(loadPaymentsSQL), provider, arg)
	if err != nil {
		return nil, fmt.Errorf("load payments: %w", err)
	}
	return rows, nil
}

func (t tx) InsertPayments(_ context.Context, provider, account string, rows []store.NewPayment) ([]store.Payment, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	arg, err := sqlbase.JSON(sqlbase.AppStates(rows, t.c.Base().Schema))
	if err != nil {
		return nil, err
	}
	created, err := t.payments(len(rows), t.c.SQL(`INSERT INTO {payments} ({provider}, {account}, {provider_id}, {state}, {amount}, {currency}, {amount_refunded}, {source_updated_at}
		    [[settled_at:, {settled_at}]][[payout_id:, {payout_id}]][[amount_captured:, {amount_captured}]][[created_at:, {created_at}]][[updated_at:, {updated_at}]])
		SELECT ?, ?, v.provider_id, v.state, v.amount, v.currency, v.amount_refunded, v.at[[settled_at:, v.settled_at]][[payout_id:, NULLIF(v.payout_id, '')]][[amount_captured:, v.amount_captured]]
		       [[created_at:, coalesce(CAST(? AS timestamptz), now())]][[updated_at:, coalesce(CAST(? AS timestamptz), now())]]
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, state text, at timestamptz, amount bigint, currency text, amount_refunded bigint,
		    settled_at timestamptz, payout_id text, amount_captured bigint)
		ON CONFLICT ({provider}, {provider_id}) DO NOTHING
		RETURNING `+sqlbase.PaymentColumns), sqlbase.Inserted(t.c.Base().Schema, []any{provider, account}, t.now(), arg)...)
	if err != nil {
		return nil, fmt.Errorf("insert missing payments: %w", err)
	}
	return created, nil
}

func (t tx) ApplySteps(_ context.Context, provider string, steps []store.Step) ([]store.Payment, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	arg, err := sqlbase.StepsJSON(steps, t.c.Base().Schema)
	if err != nil {
		return nil, err
	}
	settle := ""
	if sqlbase.RecordsSettlements(t.c.Base().Schema) {
		settle = applyStepsSettleSQL
	}
	return t.guarded(applyStepsSQL(settle), "apply transitions", arg, provider)
}

// applyStepsSQL is ApplySteps' guarded UPDATE, with settle (or not) its
// settlement.
func applyStepsSQL(settle string) string {
	return batchUpdateSQL(`provider_id text, to_state text, preds text, at timestamptz, refund bigint, settle_at timestamptz, payout_id text`,
		`{state} = v.to_state, {source_updated_at} = v.at,
		    {amount_refunded} = GREATEST(p.{amount_refunded}, v.refund)`+settle,
		`p.{state} = ANY(string_to_array(v.preds, ','))
		  AND (p.{source_updated_at} IS NULL OR p.{source_updated_at} <= v.at
		       OR (p.{state} = {'settled'} AND v.to_state IN ({'refunded'}, {'chargeback'})))`)
}

// settles is RecordSettlements' guard, the payout's time in v's column at:
// the row has no settled_at, or names another payout, paid no later.
func settles(at string) string {
	return `(p.{settled_at} IS NULL
		       OR (NULLIF(v.payout_id, '') IS NOT NULL AND p.{payout_id} IS DISTINCT FROM v.payout_id AND p.{settled_at} <= ` + at + `))`
}

// applyStepsSettleSQL records a step's settlement (store.Step.Settled) with
// the move, under RecordSettlements' guard.
var applyStepsSettleSQL = `,
		    {settled_at} = CASE WHEN ` + stepSettles + ` THEN v.settle_at ELSE p.{settled_at} END,
		    {payout_id} = CASE WHEN ` + stepSettles + ` THEN coalesce(NULLIF(v.payout_id, ''), p.{payout_id}) ELSE p.{payout_id} END`

var stepSettles = `v.settle_at IS NOT NULL AND ` + settles("v.settle_at")

func (t tx) RaiseRefunds(_ context.Context, provider string, rows []store.Refund) ([]store.Payment, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	return t.guardedJSON(raiseRefundsSQL, "raise amount_refunded", rows, provider)
}

var raiseRefundsSQL = batchUpdateSQL(`provider_id text, refund bigint`, `{amount_refunded} = v.refund`,
	`p.{amount_refunded} < v.refund AND p.{state} <> {'canceled'}`)

func (t tx) RecordSettlements(_ context.Context, provider string, rows []store.Settlement) ([]store.Payment, error) {
	if len(rows) == 0 || !sqlbase.RecordsSettlements(t.c.Base().Schema) {
		return nil, nil
	}
	return t.guardedJSON(recordSettlementsSQL, "record settlements", rows, provider)
}

var recordSettlementsSQL = batchUpdateSQL(`provider_id text, at timestamptz, payout_id text`,
	`{settled_at} = v.at, {payout_id} = coalesce(NULLIF(v.payout_id, ''), p.{payout_id})`, settles("v.at"))

func (t tx) RecordCaptured(_ context.Context, provider string, rows []store.Capture) ([]store.Payment, error) {
	if len(rows) == 0 || !t.c.Base().Schema.Has("amount_captured") {
		return nil, nil
	}
	return t.guardedJSON(recordCapturedSQL, "record captured amounts", rows, provider)
}

var recordCapturedSQL = batchUpdateSQL(`provider_id text, amount_captured bigint`, `{amount_captured} = v.amount_captured`,
	`p.{amount_captured} IS DISTINCT FROM v.amount_captured`)

// guardedJSON runs a guarded update of the payments named in rows (encoded
// as its JSON argument) and returns the rows it changed.
func (t tx) guardedJSON(q, what string, rows any, provider string) ([]store.Payment, error) {
	arg, err := sqlbase.JSON(rows)
	if err != nil {
		return nil, err
	}
	return t.guarded(q, what, arg, provider)
}

// guarded runs a guarded update (q: batchUpdateSQL's, without RETURNING)
// and returns the rows it changed, as they are after it.
func (t tx) guarded(q, what, arg, provider string) ([]store.Payment, error) {
	changed, err := t.payments(0, t.c.SQL(q+`
		RETURNING `+sqlbase.PaymentColumnsP), sqlbase.Updated(t.c.Base().Schema, []any{arg}, t.now(), provider)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return changed, nil
}

// The statements that find a batch's payments among all the table's take
// the ids as an array computed once, an index condition whatever the plan,
// like those below. Joined with jsonb_to_recordset (which PostgreSQL
// estimates at 100 rows whatever it holds), a table of up to about 25,000
// payments was cheaper to hash whole in the planner's eyes than to probe
// 100 times: every batch's UPDATEs and its load scanned all of it, the
// batches of an empty schema's month slowing from 70 to 110 ms as the table
// grew (issue 16). TestFewRowsStatementsUseTheIndex pins the plans.
const loadPaymentsSQL = `SELECT ` + sqlbase.PaymentColumns + `
		FROM {payments} WHERE {provider} = ? AND {provider_id} = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST(? AS jsonb))))
		ORDER BY {provider_id}`

// batchUpdateSQL is a guarded UPDATE of the payments its JSON argument
// names (cols: the argument's record, which has a provider_id): set and
// where are over p (the row) and v (its record). The argument is decoded
// once, in a CTE read twice: as the ids the index is probed for, and as the
// records joined to the rows found. A CTE read twice is materialized
// without the word MATERIALIZED, which PostgreSQL before 12 refuses. Its
// arguments are the JSON, the time when the table has updated_at
// (sqlbase.Updated), and the provider.
func batchUpdateSQL(cols, set, where string) string {
	return `WITH batch AS (SELECT * FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(` + cols + `))
		UPDATE {payments} p
		SET ` + set + `[[updated_at:, {updated_at} = coalesce(CAST(? AS timestamptz), now())]]
		FROM batch v
		WHERE p.{provider} = ? AND p.{provider_id} = ANY(ARRAY(SELECT provider_id FROM batch)) AND p.{provider_id} = v.provider_id
		  AND ` + where
}

// The statements that find a batch's few rows among all of a run's (its
// drift items, what it carries) take the ids as an array computed once
// (ARRAY(SELECT …), an InitPlan) and compare with = ANY: an index
// condition whatever the plan. As a join with jsonb_array_elements_text,
// PostgreSQL's generic plan (the function estimated at 100 rows, the run's
// rows at a few thousand) hashed the ids and scanned all of the run's
// rows for each batch: on an empty schema's month, 3-4 ms a DELETE that
// removed 15 items, 116 ms of the month's PostgreSQL time; IN (subquery)
// had scanned them once per id (issue 16). TestFewRowsStatementsUseTheIndex
// pins the plans.
const (
	loadCarrySQL = `SELECT c.provider_id, c.state FROM reconciler_carry c
		WHERE c.run_id = ? AND c.provider_id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST(? AS jsonb))))`
	dropCarrySQL = `DELETE FROM reconciler_carry c
		WHERE c.run_id = ? AND c.provider_id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST(? AS jsonb))))`
	deleteItemsSQL = `DELETE FROM drift_items d
		WHERE d.run_id = ? AND d.provider = ? AND d.provider_id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST(? AS jsonb))))`
	// replaceItemsSQL rewrites in place a batch's items (one a payment),
	// its argument decoded once as batchUpdateSQL's is.
	replaceItemsSQL = `WITH batch AS (SELECT * FROM jsonb_to_recordset(CAST(? AS jsonb))
		    AS v(provider_id text, kind text, action text, local_state text, provider_state text, detail jsonb))
		UPDATE drift_items d
		SET kind = v.kind, action = v.action, local_state = v.local_state, provider_state = v.provider_state,
		    detail = coalesce(v.detail, '{}'), created_at = coalesce(CAST(? AS timestamptz), now())
		FROM batch v
		WHERE d.run_id = ? AND d.provider = ? AND d.provider_id = ANY(ARRAY(SELECT provider_id FROM batch)) AND d.provider_id = v.provider_id`
)

func (t tx) LoadCarry(_ context.Context, runID int64, ids []string) ([]store.Carry, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	arg, err := sqlbase.JSON(ids)
	if err != nil {
		return nil, err
	}
	rows, err := t.c.Carries(loadCarrySQL, runID, arg)
	if err != nil {
		return nil, fmt.Errorf("load carried payments: %w", err)
	}
	return rows, nil
}

func (t tx) SaveCarry(_ context.Context, runID int64, rows []store.Carry, drop []string) error {
	if len(drop) > 0 {
		arg, err := sqlbase.JSON(drop)
		if err != nil {
			return err
		}
		if err := t.c.Exec(dropCarrySQL, runID, arg); err != nil {
			return fmt.Errorf("forget carried payments: %w", err)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if err := t.c.Exec(`INSERT INTO reconciler_carry (run_id, provider_id, state)
		SELECT ?, v.provider_id, v.state
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, state jsonb)
		ON CONFLICT (run_id, provider_id) DO UPDATE SET state = excluded.state`, runID, sqlbase.CarryJSON(rows)); err != nil {
		return fmt.Errorf("carry payments: %w", err)
	}
	return nil
}

func (t tx) DeleteItems(_ context.Context, runID int64, provider string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	arg, err := sqlbase.JSON(ids)
	if err != nil {
		return err
	}
	if err := t.c.Exec(deleteItemsSQL, runID, provider, arg); err != nil {
		return fmt.Errorf("replace drift items: %w", err)
	}
	return nil
}

func (t tx) InsertItems(_ context.Context, runID int64, provider string, rows []store.Item) error {
	if len(rows) == 0 {
		return nil
	}
	arg, err := sqlbase.JSON(rows)
	if err != nil {
		return err
	}
	if err := t.c.Exec(`INSERT INTO drift_items (run_id, provider, provider_id, kind, action, local_state, provider_state, detail, created_at)
		SELECT ?, ?, v.provider_id, v.kind, v.action, v.local_state, v.provider_state, coalesce(v.detail, '{}'), coalesce(CAST(? AS timestamptz), now())
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, kind text, action text, local_state text, provider_state text, detail jsonb)`,
		runID, provider, t.now(), arg); err != nil {
		return fmt.Errorf("insert drift items: %w", err)
	}
	return nil
}

func (t tx) ReplaceItems(_ context.Context, runID int64, provider string, rows []store.Item) error {
	if len(rows) == 0 {
		return nil
	}
	arg, err := sqlbase.JSON(rows)
	if err != nil {
		return err
	}
	if err := t.c.Exec(replaceItemsSQL, arg, t.now(), runID, provider); err != nil {
		return fmt.Errorf("rewrite drift items: %w", err)
	}
	return nil
}

func (t tx) InsertEvents(ctx context.Context, runID int64, source string, rows []store.Event) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	// Most of a night's events are recorded already (the webhooks came):
	// ask which, and send only the others. Sending every payload for the
	// conflict to discard made PostgreSQL parse and compare megabytes of
	// JSON it then threw away (issue 16).
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.EventID
	}
	arg, err := sqlbase.JSON(ids)
	if err != nil {
		return 0, err
	}
	// The question names the events not recorded: on a rerun none, where
	// asking for the recorded ones sent back every id of the batch for the
	// job to read and set aside (issue 16).
	missing, err := t.c.Strings(t.c.SQL(`SELECT v.id `+missingEventsSQL), arg, source)
	if err != nil {
		return 0, fmt.Errorf("find recorded events: %w", err)
	}
	if len(missing) == 0 {
		return 0, nil
	}
	if len(missing) < len(rows) {
		want := make(map[string]bool, len(missing))
		for _, id := range missing {
			want[id] = true
		}
		left := make([]store.Event, 0, len(missing))
		for _, r := range rows {
			if want[r.EventID] {
				left = append(left, r)
			}
		}
		rows = left
	}
	return t.InsertEventsDirect(ctx, runID, source, rows)
}

// missingEventsSQL is the FROM and WHERE of the ids of a batch (a JSON
// array, the first argument) that webhook_events lacks for a source (the
// second). Each id probes the unique index once: the subquery, with its
// LIMIT, is not made a join, where NOT EXISTS, made an anti-join, hashes
// the whole table under a generic plan until it holds some tens of
// thousands of rows (5,000 in the test). TestFewRowsStatementsUseTheIndex
// pins the plan.
const missingEventsSQL = `FROM jsonb_array_elements_text(CAST(? AS jsonb)) AS v(id)
		WHERE (SELECT 1 FROM {webhook_events} w WHERE w.{source} = ? AND w.{event_id} = v.id LIMIT 1) IS NULL`

func (t tx) InsertEventsDirect(ctx context.Context, runID int64, source string, rows []store.Event) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	if len(rows) >= copyEventsMin && t.c.Raw != nil {
		n, done, err := t.copyEvents(ctx, runID, source, rows)
		if err != nil || done {
			return n, err
		}
		// A row was recorded meanwhile: the INSERT skips it.
	}
	if err := t.compressLZ4(rows); err != nil {
		return 0, fmt.Errorf("insert synthetic events: %w", err)
	}
	n, err := t.c.Int(t.c.SQL(`WITH ins AS (
		INSERT INTO {webhook_events} ({source}, {event_id}, {event_type}, {payload}, {processed_at}[[synthetic:, {synthetic}]][[run_id:, {run_id}]])
		SELECT ?, v.event_id, v.event_type, v.payload,
			CASE WHEN v.deliver THEN NULL ELSE coalesce(CAST(? AS timestamptz), now()) END[[synthetic:, true]][[run_id:, ?]]
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(event_id text, event_type text, payload jsonb, deliver boolean)
		ON CONFLICT ({source}, {event_id}) DO NOTHING
		RETURNING 1)
		SELECT count(*) FROM ins`), sqlbase.RunArg(t.c.Base().Schema, []any{source, t.now()}, runID, sqlbase.EventsJSON(rows))...)
	if err != nil {
		return 0, fmt.Errorf("insert synthetic events: %w", err)
	}
	return n, nil
}

func (t tx) MissingEvents(_ context.Context, source string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	arg, err := sqlbase.JSON(ids)
	if err != nil {
		return 0, err
	}
	return t.c.Int(t.c.SQL(`SELECT count(*) `+missingEventsSQL), arg, source)
}

func (t tx) AddCounts(_ context.Context, runID int64, p store.Progress) error {
	return t.c.AddCounts(runID, p)
}

// refreshStatsTarget is the statistics target of RefreshStats' ANALYZE:
// a sample of 300 times as many rows. A column the application gave a
// target of its own (ALTER TABLE … SET STATISTICS) keeps it.
const refreshStatsTarget = 10

// statsMinBytes is the size from which a table without planner statistics
// is analyzed (RefreshStats): about 2,000 payments or 350 drift items.
const statsMinBytes = 256 << 10

// RefreshStats analyzes the application's payments and webhook_events
// tables, and drift_items, when PostgreSQL has never gathered planner
// statistics for them and they hold at least 256 KiB, and returns the
// tables it analyzed. The engine calls it before a run and again as the
// run's own batches grow the tables.
//
// Without statistics the planner takes `provider = $1` to match half a
// percent of the rows, and plans every batch statement (the row loads,
// the guarded UPDATEs: a few hundred ids joined to the table) as a hash
// join over a bitmap scan of the provider's whole table; with them it
// probes the unique index once per id. Measured with auto_explain on a
// month of 19,656 payments seeded seconds before the run (issue 16): each
// statement read every row, 16 ms for 494 updated, and the night ran at
// 16,600 events/s against 23,400 once the table had been analyzed.
// Autovacuum analyzes a table a minute or more after it grows; a table
// just restored, bulk-loaded or created by a migration may have no
// statistics for the whole of a run. A run into an empty schema is the
// extreme case: every table starts empty, the generic plans made in its
// first batches expect a handful of rows, and each later statement read
// the whole of the run's payments (20,000 rows for 27 updated) and the
// run's items, until the tables were analyzed mid-run (issue 16).
//
// Only a table never analyzed is analyzed, and only in the columns the
// statements join on: one whose statistics are old is autovacuum's to
// refresh, and autovacuum gathers the rest. ANALYZE samples 3,000 rows
// (statistics target 10, refreshStatsTarget), not the default target's
// 30,000: the batch statements need the table's size, the provider's few
// values and that provider_id and event_id are unique, which a small
// sample tells as well as a large one, and sorting 30,000 ids under the
// database's collation cost 230-310 ms of a night's 3.2 s (a webhook_events
// table seeded with 32,000 rows: 234-253 ms at the default target, 7.4 ms
// at 10). Autovacuum's next analyze of the table, which a growing table
// gets, replaces these statistics with its own. It takes a lock that
// blocks neither reads nor writes (and waits at most 2 s for one a VACUUM
// or an index build holds: then the run goes on without), and by a role
// that does not own the table is skipped by PostgreSQL with a warning.
func (s *Store) RefreshStats(ctx context.Context) ([]string, error) {
	var done []string
	// Only the columns the batch statements join on: the statistics of a
	// payload column cost ANALYZE three times the rest of the table.
	for _, t := range [][2]string{
		{s.Schema.Payments.Ident(), s.Schema.SQL(`{provider}, {provider_id}`)},
		{s.Schema.Events.Ident(), s.Schema.SQL(`{source}, {event_id}`)},
		{"drift_items", "run_id, provider, provider_id"},
	} {
		table, cols := t[0], t[1]
		var never bool
		if err := s.DB.WithContext(ctx).Raw(`SELECT coalesce(st.last_analyze, st.last_autoanalyze) IS NULL AND pg_relation_size(c.oid) >= ?
			FROM pg_class c LEFT JOIN pg_stat_all_tables st ON st.relid = c.oid
			WHERE c.oid = to_regclass(?)`, statsMinBytes, table).Scan(&never).Error; err != nil {
			return done, fmt.Errorf("planner statistics of %s: %w", table, translate(err))
		}
		if !never {
			continue
		}
		// ANALYZE waits for a VACUUM or an index build on the table; the
		// run between its batches does not wait long for statistics.
		if err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			// Both settings in one statement (SET LOCAL, one a statement).
			if err := tx.Exec(`SELECT set_config('lock_timeout', '2s', true), set_config('default_statistics_target', ?, true)`,
				strconv.Itoa(refreshStatsTarget)).Error; err != nil {
				return err
			}
			return tx.Exec(`ANALYZE ` + table + ` (` + cols + `)`).Error
		}); err != nil {
			return done, fmt.Errorf("analyze %s: %w", table, translate(err))
		}
		done = append(done, table)
	}
	return done, nil
}
