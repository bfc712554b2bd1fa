// Package sqlitestore is the embedded store: one SQLite file, for trying
// reconciler on one machine. Times are kept as text, so every stored time is
// normalised (sqlTime) and every comparison goes through julianday; the run
// lock is an OS file lock beside the database file (lock.go).
package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/internal/sqlbase"
)

// Store is the SQLite store.
type Store struct{ *sqlbase.Base }

var _ store.Store = (*Store)(nil)

// New returns the store over db (a gorm SQLite connection opened by
// internal/dbopen, whose transactions take the write lock at BEGIN); c nil
// means the wall clock.
func New(db *gorm.DB, c clock.Clock) *Store {
	return &Store{sqlbase.New(db, c, func(err error) error { return err })}
}

// Dialect implements store.Store.
func (s *Store) Dialect() string { return "sqlite" }

// InTx implements store.Store. SQLite's writers queue on busy_timeout and
// never deadlock (BEGIN IMMEDIATE), so nothing is retried.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	return s.Base.InTx(ctx, func(ctx context.Context, c *sqlbase.Conn) error { return fn(ctx, tx{c}) })
}

const inRange = "julianday(%[1]s) >= julianday(?) AND julianday(%[1]s) < julianday(?)"

// WindowStates implements store.Reads.
func (s *Store) WindowStates(ctx context.Context, q store.WindowQuery) ([]store.PaymentState, error) {
	return s.Base.WindowStates(ctx, q, inRange)
}

// StuckPayments implements store.Reads.
func (s *Store) StuckPayments(ctx context.Context, q store.StuckQuery) ([]string, error) {
	return s.Base.StuckPayments(ctx, q, "julianday(%s) < julianday(?)")
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

// now is the stamp of a statement: the clock's time when stubbed, else
// SQLite's. Fix (found by store/storetest): the wall-clock branch was
// CURRENT_TIMESTAMP, whole seconds in another text form than every other
// stored time; it is SQLite's now in the normalised form, to the
// millisecond, like a stubbed stamp.
const now = `coalesce(` + `strftime('%Y-%m-%d %H:%M:%f+00:00', ?)` + `, strftime('%Y-%m-%d %H:%M:%f+00:00', 'now'))`

// The batch updates join payments with a JSON array argument. Each one
// materialises the array first (WITH v AS MATERIALIZED), so that the
// planner walks the array and finds each row by the unique index on
// (provider, provider_id). Written as UPDATE … FROM json_each(?) directly,
// SQLite walked every row of the provider and scanned the whole array for
// each (json_each is costed as expensive to search), re-parsing every
// element with json_extract at each step: rows × batch per statement, so a
// run's cost grew with the square of the table (the demo at 2,000 payments
// spent 87 % of its time in ApplySteps). TestBatchStatementsUseTheIndex
// holds the plans to this.
const (
	applyStepsSQL  = applyStepsHead + applyStepsTail
	applyStepsHead = `WITH v AS MATERIALIZED (
		  SELECT json_extract(value, '$.provider_id') AS provider_id, json_extract(value, '$.to_state') AS to_state,
		         json_extract(value, '$.preds') AS preds, json_extract(value, '$.at') AS at, json_extract(value, '$.refund') AS refund,
		         json_extract(value, '$.settle_at') AS settle_at, json_extract(value, '$.payout_id') AS payout_id
		  FROM json_each(?))
		UPDATE {payments} AS p
		SET {state} = v.to_state, {source_updated_at} = ` + sqlTimeAt + `,
		    {amount_refunded} = max(p.{amount_refunded}, v.refund)`
	applyStepsTail = `[[updated_at:, {updated_at} = ` + now + `]]
		FROM v
		WHERE p.{provider} = ? AND p.{provider_id} = v.provider_id
		  AND instr(',' || v.preds || ',', ',' || p.{state} || ',') > 0
		  AND (p.{source_updated_at} IS NULL OR julianday(p.{source_updated_at}) <= julianday(v.at)
		       OR (p.{state} = {'settled'} AND v.to_state IN ({'refunded'}, {'chargeback'})))
		RETURNING ` + sqlbase.PaymentColumns

	raiseRefundsSQL = `WITH v AS MATERIALIZED (
		  SELECT json_extract(value, '$.provider_id') AS provider_id, json_extract(value, '$.refund') AS refund FROM json_each(?))
		UPDATE {payments} AS p SET {amount_refunded} = v.refund[[updated_at:, {updated_at} = ` + now + `]]
		FROM v
		WHERE p.{provider} = ? AND p.{provider_id} = v.provider_id
		  AND p.{amount_refunded} < v.refund AND p.{state} <> {'canceled'}
		RETURNING ` + sqlbase.PaymentColumns

	recordCapturedSQL = `WITH v AS MATERIALIZED (
		  SELECT json_extract(value, '$.provider_id') AS provider_id, json_extract(value, '$.amount_captured') AS amount_captured FROM json_each(?))
		UPDATE {payments} AS p SET {amount_captured} = v.amount_captured[[updated_at:, {updated_at} = ` + now + `]]
		FROM v
		WHERE p.{provider} = ? AND p.{provider_id} = v.provider_id AND p.{amount_captured} IS NOT v.amount_captured
		RETURNING ` + sqlbase.PaymentColumns

	loadPaymentsSQL = `SELECT ` + sqlbase.PaymentColumns + `
		FROM {payments} WHERE {provider} = ? AND {provider_id} IN (SELECT value FROM json_each(?))
		ORDER BY {provider_id}`

	insertPaymentsSQL = `INSERT INTO {payments} ({provider}, {account}, {provider_id}, {state}, {amount}, {currency}, {amount_refunded}, {source_updated_at}
		    [[settled_at:, {settled_at}]][[payout_id:, {payout_id}]][[amount_captured:, {amount_captured}]][[created_at:, {created_at}]][[updated_at:, {updated_at}]])
		SELECT ?, ?, json_extract(value, '$.provider_id'), json_extract(value, '$.state'), json_extract(value, '$.amount'),
		       json_extract(value, '$.currency'), json_extract(value, '$.amount_refunded'), ` + sqlTimeValueAt + `
		       [[settled_at:, CASE WHEN json_extract(value, '$.settled_at') IS NULL THEN NULL ELSE ` + sqlTimeValueSettled + ` END]]
		       [[payout_id:, NULLIF(json_extract(value, '$.payout_id'), '')]][[amount_captured:, json_extract(value, '$.amount_captured')]][[created_at:, ` + now + `]][[updated_at:, ` + now + `]]
		FROM json_each(?) WHERE true
		ON CONFLICT ({provider}, {provider_id}) DO NOTHING
		RETURNING ` + sqlbase.PaymentColumns

	loadCarrySQL = `SELECT provider_id, state FROM reconciler_carry WHERE provider_id IN (SELECT value FROM json_each(?)) AND run_id = ?`

	dropCarrySQL = `DELETE FROM reconciler_carry WHERE provider_id IN (SELECT value FROM json_each(?)) AND run_id = ?`

	saveCarrySQL = `INSERT INTO reconciler_carry (run_id, provider_id, state)
		SELECT ?, json_extract(value, '$.provider_id'), value -> '$.state'
		FROM json_each(?) WHERE true
		ON CONFLICT (run_id, provider_id) DO UPDATE SET state = excluded.state`

	// +run_id: the run's items are found through their payments' index;
	// the run's own index would walk every item the run has written so far
	// at each batch.
	deleteItemsSQL = `DELETE FROM drift_items WHERE +run_id = ? AND provider = ? AND provider_id IN (SELECT value FROM json_each(?))`

	insertItemsSQL = `INSERT INTO drift_items (run_id, provider, provider_id, kind, action, local_state, provider_state, detail, created_at)
		SELECT ?, ?, json_extract(value, '$.provider_id'), json_extract(value, '$.kind'), json_extract(value, '$.action'),
		       json_extract(value, '$.local_state'), json_extract(value, '$.provider_state'), coalesce(json_extract(value, '$.detail'), '{}'), ` + now + `
		FROM json_each(?)`

	replaceItemsSQL = `WITH v AS MATERIALIZED (
		  SELECT json_extract(value, '$.provider_id') AS provider_id, json_extract(value, '$.kind') AS kind,
		         json_extract(value, '$.action') AS action, json_extract(value, '$.local_state') AS local_state,
		         json_extract(value, '$.provider_state') AS provider_state, coalesce(json_extract(value, '$.detail'), '{}') AS detail
		  FROM json_each(?))
		UPDATE drift_items AS d
		SET kind = v.kind, action = v.action, local_state = v.local_state, provider_state = v.provider_state,
		    detail = v.detail, created_at = ` + now + `
		FROM v
		WHERE +d.run_id = ? AND d.provider = ? AND d.provider_id = v.provider_id`

	insertEventsSQL = `INSERT INTO {webhook_events} ({source}, {event_id}, {event_type}, {payload}, {processed_at}[[synthetic:, {synthetic}]][[run_id:, {run_id}]])
		SELECT ?, json_extract(value, '$.event_id'), json_extract(value, '$.event_type'), json_extract(value, '$.payload'),
			CASE WHEN json_extract(value, '$.deliver') THEN NULL ELSE ` + now + ` END[[synthetic:, 1]][[run_id:, ?]]
		FROM json_each(?) WHERE true
		ON CONFLICT ({source}, {event_id}) DO NOTHING
		RETURNING {event_id}`

	missingEventsSQL = `SELECT count(*) FROM json_each(?) AS v
		WHERE NOT EXISTS (SELECT 1 FROM {webhook_events} w WHERE w.{source} = ? AND w.{event_id} = v.value)`
)

// settles is RecordSettlements' guard, the payout's time in v's column at:
// the row has no settled_at, or names another payout, paid no later.
func settles(at string) string {
	return `(p.{settled_at} IS NULL
		       OR (NULLIF(v.payout_id, '') IS NOT NULL AND p.{payout_id} IS NOT v.payout_id AND julianday(p.{settled_at}) <= julianday(` + at + `)))`
}

// The statements that record a settlement share its guard (settles).
var (
	recordSettlementsSQL = `WITH v AS MATERIALIZED (
		  SELECT json_extract(value, '$.provider_id') AS provider_id, json_extract(value, '$.at') AS at,
		         json_extract(value, '$.payout_id') AS payout_id FROM json_each(?))
		UPDATE {payments} AS p
		SET {settled_at} = ` + sqlTimeAt + `, {payout_id} = coalesce(NULLIF(v.payout_id, ''), p.{payout_id})[[updated_at:, {updated_at} = ` + now + `]]
		FROM v
		WHERE p.{provider} = ? AND p.{provider_id} = v.provider_id
		  AND ` + settles("v.at") + `
		RETURNING ` + sqlbase.PaymentColumns

	// applyStepsSettlesSQL records a step's settlement (store.Step.Settled)
	// with the move, under the same guard.
	applyStepsSettlesSQL = applyStepsHead + `,
		    {settled_at} = CASE WHEN ` + stepSettles + ` THEN strftime('%Y-%m-%d %H:%M:%f+00:00', v.settle_at) ELSE p.{settled_at} END,
		    {payout_id} = CASE WHEN ` + stepSettles + ` THEN coalesce(NULLIF(v.payout_id, ''), p.{payout_id}) ELSE p.{payout_id} END` + applyStepsTail
	stepSettles = `v.settle_at IS NOT NULL AND ` + settles("v.settle_at")
)

// The stored form of a batch's times (v.at, an element's at and
// settled_at): strftime normalises any time format SQLite parses, so that
// comparisons and stored values never depend on who wrote them.
const (
	sqlTimeAt           = `strftime('%Y-%m-%d %H:%M:%f+00:00', v.at)`
	sqlTimeValueAt      = `strftime('%Y-%m-%d %H:%M:%f+00:00', json_extract(value, '$.at'))`
	sqlTimeValueSettled = `strftime('%Y-%m-%d %H:%M:%f+00:00', json_extract(value, '$.settled_at'))`
)

// tx is one transaction's batch statements.
type tx struct{ c *sqlbase.Conn }

// stamp is the clock's time as SQLite text, or nil for CURRENT_TIMESTAMP.
func (t tx) stamp() any {
	if n, ok := t.c.Base().Now().(time.Time); ok {
		return n.Format(time.RFC3339Nano)
	}
	return nil
}

func (t tx) LoadPayments(_ context.Context, provider string, ids []string) ([]store.Payment, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	arg, err := sqlbase.JSON(ids)
	if err != nil {
		return nil, err
	}
	rows, err := t.c.Payments(len(ids), t.c.SQL(loadPaymentsSQL), provider, arg)
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
	created, err := t.c.Payments(len(rows), t.c.SQL(insertPaymentsSQL), sqlbase.Inserted(t.c.Base().Schema, []any{provider, account}, t.stamp(), arg)...)
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
	q := applyStepsSQL
	if sqlbase.RecordsSettlements(t.c.Base().Schema) {
		q = applyStepsSettlesSQL
	}
	return t.guarded(q, "apply transitions", arg, provider)
}

func (t tx) RaiseRefunds(_ context.Context, provider string, rows []store.Refund) ([]store.Payment, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	return t.guardedJSON(raiseRefundsSQL, "raise amount_refunded", rows, provider)
}

func (t tx) RecordSettlements(_ context.Context, provider string, rows []store.Settlement) ([]store.Payment, error) {
	if len(rows) == 0 || !sqlbase.RecordsSettlements(t.c.Base().Schema) {
		return nil, nil
	}
	return t.guardedJSON(recordSettlementsSQL, "record settlements", rows, provider)
}

func (t tx) RecordCaptured(_ context.Context, provider string, rows []store.Capture) ([]store.Payment, error) {
	if len(rows) == 0 || !t.c.Base().Schema.Has("amount_captured") {
		return nil, nil
	}
	return t.guardedJSON(recordCapturedSQL, "record captured amounts", rows, provider)
}

// guardedJSON runs a guarded update of the payments named in rows (encoded
// as its JSON argument) and returns the rows it changed.
func (t tx) guardedJSON(q, what string, rows any, provider string) ([]store.Payment, error) {
	arg, err := sqlbase.JSON(rows)
	if err != nil {
		return nil, err
	}
	return t.guarded(q, what, arg, provider)
}

// guarded runs a guarded update whose batch argument is arg and returns
// the rows it changed, as they are after it.
func (t tx) guarded(q, what, arg, provider string) ([]store.Payment, error) {
	changed, err := t.c.Payments(0, t.c.SQL(q), sqlbase.Updated(t.c.Base().Schema, []any{arg}, t.stamp(), provider)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return changed, nil
}

func (t tx) LoadCarry(_ context.Context, runID int64, ids []string) ([]store.Carry, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	arg, err := sqlbase.JSON(ids)
	if err != nil {
		return nil, err
	}
	rows, err := t.c.Carries(loadCarrySQL, arg, runID)
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
		if err := t.c.Exec(dropCarrySQL, arg, runID); err != nil {
			return fmt.Errorf("forget carried payments: %w", err)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if err := t.c.Exec(saveCarrySQL, runID, sqlbase.CarryJSON(rows)); err != nil {
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
	if err := t.c.Exec(insertItemsSQL, runID, provider, t.stamp(), arg); err != nil {
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
	if err := t.c.Exec(replaceItemsSQL, arg, t.stamp(), runID, provider); err != nil {
		return fmt.Errorf("rewrite drift items: %w", err)
	}
	return nil
}

func (t tx) InsertEvents(_ context.Context, runID int64, source string, rows []store.Event) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	ids, err := t.c.Strings(t.c.SQL(insertEventsSQL), sqlbase.RunArg(t.c.Base().Schema, []any{source, t.stamp()}, runID, sqlbase.EventsJSON(rows))...)
	if err != nil {
		return 0, fmt.Errorf("insert synthetic events: %w", err)
	}
	return int64(len(ids)), nil
}

// InsertEventsDirect is InsertEvents: SQLite's insert asks no question
// first.
func (t tx) InsertEventsDirect(ctx context.Context, runID int64, source string, rows []store.Event) (int64, error) {
	return t.InsertEvents(ctx, runID, source, rows)
}

func (t tx) MissingEvents(_ context.Context, source string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	arg, err := sqlbase.JSON(ids)
	if err != nil {
		return 0, err
	}
	return t.c.Int(t.c.SQL(missingEventsSQL), arg, source)
}

func (t tx) AddCounts(_ context.Context, runID int64, p store.Progress) error {
	return t.c.AddCounts(runID, p)
}
