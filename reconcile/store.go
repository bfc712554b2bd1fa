package reconcile

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/jsonw"
	"github.com/reconciler/reconciler/models"
)

// store runs the engine's statements. Every statement of the event path is
// batched: a batch of any size costs a fixed number of round trips.
type store struct {
	db     *gorm.DB
	sqlite bool         // the embedded store; else PostgreSQL
	trips  atomic.Int64 // statements sent, BEGIN and COMMIT included
}

func newStore(db *gorm.DB) *store { return &store{db: db, sqlite: models.SQLite(db)} }

// pick returns the statement for the store's dialect.
func (s *store) pick(postgres, sqlite string) string {
	if s.sqlite {
		return sqlite
	}
	return postgres
}

// SQLite keeps times as text; these normalise any format it parses, so that
// comparisons and stored values never depend on who wrote them.
func sqlTime(expr string) string { return `strftime('%Y-%m-%d %H:%M:%f+00:00', ` + expr + `)` }

func (s *store) exec(tx *gorm.DB, q string, args ...any) error {
	s.trips.Add(1)
	return tx.Exec(q, args...).Error
}

// scan runs a query and scans its rows into dst (*[]string, *int64 or
// *[]localRow). It reads rows itself: gorm's Scan formats every statement
// with its arguments for its trace recorder, and the batch statements carry
// megabytes of JSON.
func (s *store) scan(tx *gorm.DB, dst any, q string, args ...any) error {
	s.trips.Add(1)
	rows, err := tx.Raw(q, args...).Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		switch d := dst.(type) {
		case *[]string:
			var v string
			if err := rows.Scan(&v); err != nil {
				return err
			}
			*d = append(*d, v)
		case *int64:
			if err := rows.Scan(d); err != nil {
				return err
			}
		case *[]carryRow:
			var r carryRow
			if err := rows.Scan(&r.ProviderID, &r.State); err != nil {
				return err
			}
			*d = append(*d, r)
		case *[]localRow:
			var r localRow
			if err := rows.Scan(&r.ProviderID, &r.State, &r.SourceUpdatedAt, &r.Amount, &r.Currency, &r.AmountRefunded,
				&r.SettledAt, &r.PayoutID, &r.AmountCaptured); err != nil {
				return err
			}
			*d = append(*d, r)
		default:
			return fmt.Errorf("store: cannot scan into %T", dst)
		}
	}
	return rows.Err()
}

// tx runs fn in one transaction, counting BEGIN and COMMIT.
func (s *store) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	s.trips.Add(2)
	return s.db.WithContext(ctx).Transaction(fn)
}

// retryTx is tx, retried when PostgreSQL aborts it for a deadlock or a
// serialization failure. Every statement is guarded, so a retry is safe.
func (s *store) retryTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		if err = s.tx(ctx, fn); !Retryable(err) {
			return err
		}
		time.Sleep(time.Duration(1+rand.IntN(20<<attempt)) * time.Millisecond)
	}
	return err
}

// Retryable reports whether err is a deadlock or serialization failure.
func Retryable(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40P01" || pg.Code == "40001")
}

func jsonArg(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

type localRow struct {
	ProviderID      string
	State           string
	SourceUpdatedAt *time.Time
	Amount          int64
	Currency        string
	AmountRefunded  int64
	SettledAt       *time.Time
	PayoutID        sql.NullString
	AmountCaptured  sql.NullInt64
}

func (r localRow) local() Local {
	return Local{Exists: true, State: models.State(r.State), At: r.SourceUpdatedAt, Amount: r.Amount, Currency: r.Currency, AmountRefunded: r.AmountRefunded,
		SettledAt: r.SettledAt, PayoutID: r.PayoutID.String, AmountCaptured: r.AmountCaptured.Int64}
}

// load reads the rows of ids in one statement.
func (s *store) load(tx *gorm.DB, provider string, ids []string) (map[string]Local, error) {
	if len(ids) == 0 {
		// A page whose events map to no payment (a charge without a
		// PaymentIntent, a payout of only transfers): nothing to read, and
		// json.Marshal(nil) is the scalar null, not an array.
		return map[string]Local{}, nil
	}
	arg, err := jsonArg(ids)
	if err != nil {
		return nil, err
	}
	var rows []localRow
	if err := s.scan(tx, &rows, s.pick(`SELECT provider_id, state, source_updated_at, amount, currency, amount_refunded, settled_at, payout_id, amount_captured
		FROM payments WHERE provider = ? AND provider_id IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb)))
		ORDER BY provider_id`, `SELECT provider_id, state, source_updated_at, amount, currency, amount_refunded, settled_at, payout_id, amount_captured
		FROM payments WHERE provider = ? AND provider_id IN (SELECT value FROM json_each(?))
		ORDER BY provider_id`), provider, arg); err != nil {
		return nil, fmt.Errorf("load payments: %w", err)
	}
	out := make(map[string]Local, len(rows))
	for _, r := range rows {
		out[r.ProviderID] = r.local()
	}
	return out, nil
}

type insertRow struct {
	ProviderID     string     `json:"provider_id"`
	State          string     `json:"state"`
	At             time.Time  `json:"at"`
	Amount         int64      `json:"amount"`
	Currency       string     `json:"currency"`
	AmountRefunded int64      `json:"amount_refunded"`
	SettledAt      *time.Time `json:"settled_at"`
	PayoutID       string     `json:"payout_id"`
	AmountCaptured *int64     `json:"amount_captured"`
}

// insertMissing creates rows for payments we did not know; a row created
// meanwhile by someone else wins (ON CONFLICT DO NOTHING).
func (s *store) insertMissing(tx *gorm.DB, provider, account string, rows []insertRow) (map[string]bool, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	arg, err := jsonArg(rows)
	if err != nil {
		return nil, err
	}
	var ids []string
	if err := s.scan(tx, &ids, s.pick(`INSERT INTO payments (provider, account, provider_id, state, amount, currency, amount_refunded, source_updated_at,
		    settled_at, payout_id, amount_captured)
		SELECT ?, ?, v.provider_id, v.state, v.amount, v.currency, v.amount_refunded, v.at, v.settled_at, NULLIF(v.payout_id, ''), v.amount_captured
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, state text, at timestamptz, amount bigint, currency text, amount_refunded bigint,
		    settled_at timestamptz, payout_id text, amount_captured bigint)
		ON CONFLICT (provider, provider_id) DO NOTHING
		RETURNING provider_id`, `INSERT INTO payments (provider, account, provider_id, state, amount, currency, amount_refunded, source_updated_at,
		    settled_at, payout_id, amount_captured)
		SELECT ?, ?, json_extract(value, '$.provider_id'), json_extract(value, '$.state'), json_extract(value, '$.amount'),
		       json_extract(value, '$.currency'), json_extract(value, '$.amount_refunded'), `+sqlTime(`json_extract(value, '$.at')`)+`,
		       CASE WHEN json_extract(value, '$.settled_at') IS NULL THEN NULL ELSE `+sqlTime(`json_extract(value, '$.settled_at')`)+` END,
		       NULLIF(json_extract(value, '$.payout_id'), ''), json_extract(value, '$.amount_captured')
		FROM json_each(?) WHERE true
		ON CONFLICT (provider, provider_id) DO NOTHING
		RETURNING provider_id`), provider, account, arg); err != nil {
		return nil, fmt.Errorf("insert missing payments: %w", err)
	}
	return setOf(ids), nil
}

type stepRow struct {
	ProviderID string    `json:"provider_id"`
	To         string    `json:"to_state"`
	Preds      string    `json:"preds"`
	At         time.Time `json:"at"`
	Refund     int64     `json:"refund"`
}

// applySteps applies one step per payment with the guard of DESIGN section
// 2, batched: a row moves only from an allowed predecessor and never back in
// provider time. It returns the payments that moved.
func (s *store) applySteps(tx *gorm.DB, provider string, steps []stepRow) (map[string]bool, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	arg, err := jsonArg(steps)
	if err != nil {
		return nil, err
	}
	var ids []string
	if err := s.scan(tx, &ids, s.pick(`UPDATE payments p
		SET state = v.to_state, source_updated_at = v.at,
		    amount_refunded = GREATEST(p.amount_refunded, v.refund), updated_at = now()
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, to_state text, preds text, at timestamptz, refund bigint)
		WHERE p.provider = ? AND p.provider_id = v.provider_id
		  AND p.state = ANY(string_to_array(v.preds, ','))
		  AND (p.source_updated_at IS NULL OR p.source_updated_at <= v.at
		       OR (p.state = 'settled' AND v.to_state IN ('refunded', 'chargeback')))
		RETURNING p.provider_id`, `UPDATE payments AS p
		SET state = v.to_state, source_updated_at = `+sqlTime(`v.at`)+`,
		    amount_refunded = max(p.amount_refunded, v.refund), updated_at = CURRENT_TIMESTAMP
		FROM (SELECT json_extract(value, '$.provider_id') AS provider_id, json_extract(value, '$.to_state') AS to_state,
		             json_extract(value, '$.preds') AS preds, json_extract(value, '$.at') AS at, json_extract(value, '$.refund') AS refund
		      FROM json_each(?)) AS v
		WHERE p.provider = ? AND p.provider_id = v.provider_id
		  AND instr(',' || v.preds || ',', ',' || p.state || ',') > 0
		  AND (p.source_updated_at IS NULL OR julianday(p.source_updated_at) <= julianday(v.at)
		       OR (p.state = 'settled' AND v.to_state IN ('refunded', 'chargeback')))
		RETURNING provider_id`), arg, provider); err != nil {
		return nil, fmt.Errorf("apply transitions: %w", err)
	}
	return setOf(ids), nil
}

type refundRow struct {
	ProviderID string `json:"provider_id"`
	Refund     int64  `json:"refund"`
}

// raiseRefunds raises amount_refunded, never lowering it (DESIGN section 4).
func (s *store) raiseRefunds(tx *gorm.DB, provider string, rows []refundRow) error {
	if len(rows) == 0 {
		return nil
	}
	arg, err := jsonArg(rows)
	if err != nil {
		return err
	}
	if err := s.exec(tx, s.pick(`UPDATE payments p SET amount_refunded = v.refund, updated_at = now()
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, refund bigint)
		WHERE p.provider = ? AND p.provider_id = v.provider_id
		  AND p.amount_refunded < v.refund AND p.state <> 'canceled'`, `UPDATE payments AS p SET amount_refunded = v.refund, updated_at = CURRENT_TIMESTAMP
		FROM (SELECT json_extract(value, '$.provider_id') AS provider_id, json_extract(value, '$.refund') AS refund FROM json_each(?)) AS v
		WHERE p.provider = ? AND p.provider_id = v.provider_id
		  AND p.amount_refunded < v.refund AND p.state <> 'canceled'`), arg, provider); err != nil {
		return fmt.Errorf("raise amount_refunded: %w", err)
	}
	return nil
}

type settleRow struct {
	ProviderID string    `json:"provider_id"`
	At         time.Time `json:"at"`
	PayoutID   string    `json:"payout_id"`
}

// recordSettlements records the payout that paid each payment out, whatever
// its state (DESIGN section 2): settled_at when it is empty, and a payout id
// the row lacks or a later payout. It returns how many rows it filled in.
func (s *store) recordSettlements(tx *gorm.DB, provider string, rows []settleRow) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	arg, err := jsonArg(rows)
	if err != nil {
		return 0, err
	}
	var ids []string
	if err := s.scan(tx, &ids, s.pick(`UPDATE payments p
		SET settled_at = v.at, payout_id = coalesce(NULLIF(v.payout_id, ''), p.payout_id), updated_at = now()
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, at timestamptz, payout_id text)
		WHERE p.provider = ? AND p.provider_id = v.provider_id
		  AND (p.settled_at IS NULL
		       OR (NULLIF(v.payout_id, '') IS NOT NULL AND p.payout_id IS DISTINCT FROM v.payout_id AND p.settled_at <= v.at))
		RETURNING p.provider_id`, `UPDATE payments AS p
		SET settled_at = `+sqlTime(`v.at`)+`, payout_id = coalesce(NULLIF(v.payout_id, ''), p.payout_id), updated_at = CURRENT_TIMESTAMP
		FROM (SELECT json_extract(value, '$.provider_id') AS provider_id, json_extract(value, '$.at') AS at,
		             json_extract(value, '$.payout_id') AS payout_id FROM json_each(?)) AS v
		WHERE p.provider = ? AND p.provider_id = v.provider_id
		  AND (p.settled_at IS NULL
		       OR (NULLIF(v.payout_id, '') IS NOT NULL AND p.payout_id IS NOT v.payout_id AND julianday(p.settled_at) <= julianday(v.at)))
		RETURNING provider_id`), arg, provider); err != nil {
		return 0, fmt.Errorf("record settlements: %w", err)
	}
	return int64(len(ids)), nil
}

type captureRow struct {
	ProviderID     string `json:"provider_id"`
	AmountCaptured int64  `json:"amount_captured"`
}

// recordCaptured records a partial capture's captured amount.
func (s *store) recordCaptured(tx *gorm.DB, provider string, rows []captureRow) error {
	if len(rows) == 0 {
		return nil
	}
	arg, err := jsonArg(rows)
	if err != nil {
		return err
	}
	if err := s.exec(tx, s.pick(`UPDATE payments p SET amount_captured = v.amount_captured, updated_at = now()
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, amount_captured bigint)
		WHERE p.provider = ? AND p.provider_id = v.provider_id AND p.amount_captured IS DISTINCT FROM v.amount_captured`,
		`UPDATE payments AS p SET amount_captured = v.amount_captured, updated_at = CURRENT_TIMESTAMP
		FROM (SELECT json_extract(value, '$.provider_id') AS provider_id, json_extract(value, '$.amount_captured') AS amount_captured FROM json_each(?)) AS v
		WHERE p.provider = ? AND p.provider_id = v.provider_id AND p.amount_captured IS NOT v.amount_captured`), arg, provider); err != nil {
		return fmt.Errorf("record captured amounts: %w", err)
	}
	return nil
}

type carryRow struct {
	ProviderID string
	State      models.JSON
}

// loadCarry reads what the run carries about ids.
func (s *store) loadCarry(tx *gorm.DB, runID int64, ids []string) ([]carryRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	arg, err := jsonArg(ids)
	if err != nil {
		return nil, err
	}
	var rows []carryRow
	if err := s.scan(tx, &rows, s.pick(`SELECT c.provider_id, c.state FROM reconciler_carry c
		JOIN jsonb_array_elements_text(CAST(? AS jsonb)) AS v(id) ON c.provider_id = v.id WHERE c.run_id = ?`,
		`SELECT provider_id, state FROM reconciler_carry WHERE provider_id IN (SELECT value FROM json_each(?)) AND run_id = ?`), arg, runID); err != nil {
		return nil, fmt.Errorf("load carried payments: %w", err)
	}
	return rows, nil
}

// saveCarry writes what the run carries about payments (upserts) and forgets
// the payments in drop.
func (s *store) saveCarry(tx *gorm.DB, runID int64, rows []carryRow, drop []string) error {
	if len(drop) > 0 {
		arg, err := jsonArg(drop)
		if err != nil {
			return err
		}
		if err := s.exec(tx, s.pick(`DELETE FROM reconciler_carry c USING jsonb_array_elements_text(CAST(? AS jsonb)) AS v(id)
			WHERE c.run_id = ? AND c.provider_id = v.id`,
			`DELETE FROM reconciler_carry WHERE provider_id IN (SELECT value FROM json_each(?)) AND run_id = ?`), arg, runID); err != nil {
			return fmt.Errorf("forget carried payments: %w", err)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	// Encoded by hand: the states are JSON already, and encoding/json would
	// validate and compact each one again.
	n := 2
	for _, r := range rows {
		n += len(r.State) + len(r.ProviderID) + 64
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"provider_id":`...)
		b = appendString(b, r.ProviderID)
		b = append(b, `,"state":`...)
		b = append(b, r.State...)
		b = append(b, '}')
	}
	arg := string(append(b, ']'))
	if err := s.exec(tx, s.pick(`INSERT INTO reconciler_carry (run_id, provider_id, state)
		SELECT ?, v.provider_id, v.state
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, state jsonb)
		ON CONFLICT (run_id, provider_id) DO UPDATE SET state = excluded.state`,
		`INSERT INTO reconciler_carry (run_id, provider_id, state)
		SELECT ?, json_extract(value, '$.provider_id'), json(json_extract(value, '$.state'))
		FROM json_each(?) WHERE true
		ON CONFLICT (run_id, provider_id) DO UPDATE SET state = excluded.state`),
		runID, arg); err != nil {
		return fmt.Errorf("carry payments: %w", err)
	}
	return nil
}

// deleteItems removes the items a run wrote earlier for payments that a
// later batch decides again.
func (s *store) deleteItems(tx *gorm.DB, runID int64, provider string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	arg, err := jsonArg(ids)
	if err != nil {
		return err
	}
	// A join, not IN (subquery): PostgreSQL's generic plan for the prepared
	// IN form scanned the run's items once per id (seconds a batch).
	q, args := `DELETE FROM drift_items d USING jsonb_array_elements_text(CAST(? AS jsonb)) AS v(id)
		WHERE d.run_id = ? AND d.provider = ? AND d.provider_id = v.id`, []any{arg, runID, provider}
	if s.sqlite {
		q, args = `DELETE FROM drift_items WHERE run_id = ? AND provider = ? AND provider_id IN (SELECT value FROM json_each(?))`, []any{runID, provider, arg}
	}
	if err := s.exec(tx, q, args...); err != nil {
		return fmt.Errorf("replace drift items: %w", err)
	}
	return nil
}

type eventRow struct {
	EventID   string          `json:"event_id"`
	EventType string          `json:"event_type"`
	Payload   json.RawMessage `json:"payload"`
}

// insertEvents records events the application lacks as synthetic rows and
// returns how many were new.
func (s *store) insertEvents(tx *gorm.DB, source string, runID int64, rows []eventRow) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	arg := eventsJSON(rows)
	if s.sqlite {
		var ids []string
		if err := s.scan(tx, &ids, `INSERT INTO webhook_events (source, event_id, event_type, payload, processed_at, synthetic, run_id)
			SELECT ?, json_extract(value, '$.event_id'), json_extract(value, '$.event_type'), json_extract(value, '$.payload'), CURRENT_TIMESTAMP, 1, ?
			FROM json_each(?) WHERE true
			ON CONFLICT (source, event_id) DO NOTHING
			RETURNING event_id`, source, runID, arg); err != nil {
			return 0, fmt.Errorf("insert synthetic events: %w", err)
		}
		return int64(len(ids)), nil
	}
	var n int64
	if err := s.scan(tx, &n, `WITH ins AS (
		INSERT INTO webhook_events (source, event_id, event_type, payload, processed_at, synthetic, run_id)
		SELECT ?, v.event_id, v.event_type, v.payload, now(), true, ?
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(event_id text, event_type text, payload jsonb)
		ON CONFLICT (source, event_id) DO NOTHING
		RETURNING 1)
		SELECT count(*) FROM ins`, source, runID, arg); err != nil {
		return 0, fmt.Errorf("insert synthetic events: %w", err)
	}
	return n, nil
}

// eventsJSON encodes event rows by hand: the payloads are the provider's
// own JSON, already decoded once, and re-encoding them through
// encoding/json (which re-validates and compacts raw messages) was a tenth
// of the job's CPU at scale.
func eventsJSON(rows []eventRow) string {
	n := 2
	for _, r := range rows {
		n += len(r.Payload) + len(r.EventID) + len(r.EventType) + 48
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"event_id":`...)
		b = appendString(b, r.EventID)
		b = append(b, `,"event_type":`...)
		b = appendString(b, r.EventType)
		b = append(b, `,"payload":`...)
		if len(r.Payload) == 0 {
			b = append(b, "null"...)
		} else {
			b = append(b, r.Payload...)
		}
		b = append(b, '}')
	}
	return string(append(b, ']'))
}

func appendString(b []byte, s string) []byte { return jsonw.String(b, s) }

// missingEvents counts which of ids webhook_events lacks (dry runs).
func (s *store) missingEvents(tx *gorm.DB, source string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	arg, err := jsonArg(ids)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.scan(tx, &n, s.pick(`SELECT count(*) FROM jsonb_array_elements_text(CAST(? AS jsonb)) AS v(id)
		WHERE NOT EXISTS (SELECT 1 FROM webhook_events w WHERE w.source = ? AND w.event_id = v.id)`,
		`SELECT count(*) FROM json_each(?) AS v
		WHERE NOT EXISTS (SELECT 1 FROM webhook_events w WHERE w.source = ? AND w.event_id = v.value)`), arg, source)
	return n, err
}

type itemRow struct {
	ProviderID    string         `json:"provider_id"`
	Kind          string         `json:"kind"`
	Action        string         `json:"action"`
	LocalState    *string        `json:"local_state"`
	ProviderState *string        `json:"provider_state"`
	Detail        map[string]any `json:"detail"`
}

func (s *store) insertItems(tx *gorm.DB, provider string, runID int64, rows []itemRow) error {
	if len(rows) == 0 {
		return nil
	}
	arg, err := jsonArg(rows)
	if err != nil {
		return err
	}
	if err := s.exec(tx, s.pick(`INSERT INTO drift_items (run_id, provider, provider_id, kind, action, local_state, provider_state, detail)
		SELECT ?, ?, v.provider_id, v.kind, v.action, v.local_state, v.provider_state, coalesce(v.detail, '{}')
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, kind text, action text, local_state text, provider_state text, detail jsonb)`,
		`INSERT INTO drift_items (run_id, provider, provider_id, kind, action, local_state, provider_state, detail)
		SELECT ?, ?, json_extract(value, '$.provider_id'), json_extract(value, '$.kind'), json_extract(value, '$.action'),
		       json_extract(value, '$.local_state'), json_extract(value, '$.provider_state'), coalesce(json_extract(value, '$.detail'), '{}')
		FROM json_each(?)`),
		runID, provider, arg); err != nil {
		return fmt.Errorf("insert drift items: %w", err)
	}
	return nil
}

// counts are a batch's additions to the run's counters, except Examined
// and InSync, which are the run's totals so far (distinct payments).
type counts struct {
	Examined, InSync, Repaired, Refused, Reported, Synthetic, Events, Settlements int64
}

func (c *counts) add(o counts) {
	c.Examined += o.Examined
	c.InSync += o.InSync
	c.Repaired += o.Repaired
	c.Refused += o.Refused
	c.Reported += o.Reported
	c.Synthetic += o.Synthetic
	c.Events += o.Events
	c.Settlements += o.Settlements
}

func (s *store) addCounts(tx *gorm.DB, runID int64, c counts, apiRequests int64, cursor string, cursorAt time.Time) error {
	var cur *string
	var at *time.Time
	if cursor != "" {
		cur, at = &cursor, &cursorAt
	}
	return s.exec(tx, `UPDATE reconciliation_runs SET
		examined = ?, in_sync = ?, repaired = repaired + ?, refused = refused + ?,
		reported = reported + ?, synthetic_events = synthetic_events + ?, events_read = events_read + ?,
		settlements_recorded = settlements_recorded + ?,
		api_requests = ?, progress_cursor = coalesce(?, progress_cursor), progress_at = coalesce(?, progress_at)
		WHERE id = ?`, c.Examined, c.InSync, c.Repaired, c.Refused, c.Reported, c.Synthetic, c.Events, c.Settlements, apiRequests, cur, at, runID)
}

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func predsCSV(to models.State) string {
	ps := models.Predecessors(to)
	ss := make([]string, len(ps))
	for i, p := range ps {
		ss[i] = string(p)
	}
	return strings.Join(ss, ",")
}

// lock is a session-level advisory lock on one connection, released by the
// server if the process dies (DESIGN section 8). On SQLite it is a row in
// run_locks naming the holder's host and pid.
type lock struct {
	conn *sql.Conn
	key  string
	row  *gorm.DB // SQLite: the store holding the row
}

// tryLock takes the run lock for (provider, account) in the current schema,
// so that two deployments sharing a database in different schemas do not
// block each other.
func tryLock(ctx context.Context, db *gorm.DB, provider, account string) (*lock, error) {
	if models.SQLite(db) {
		return tryLockRow(ctx, db, provider+"/"+account)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock connection: %w", err)
	}
	key := provider + "/" + account
	var ok bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/reconciler/' || $1, 0))`, key).Scan(&ok); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("take run lock: %w", err)
	}
	if !ok {
		_ = conn.Close()
		return nil, ErrLocked
	}
	return &lock{conn: conn, key: key}, nil
}

// tryLockRow takes the lock row, or takes it over when its holder was a
// process on this host that no longer runs. The embedded store is for one
// machine: a holder on another host is always respected.
func tryLockRow(ctx context.Context, db *gorm.DB, key string) (*lock, error) {
	host, _ := os.Hostname()
	pid := os.Getpid()
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var held []struct {
			Host string
			Pid  int
		}
		if err := tx.Raw(`SELECT host, pid FROM run_locks WHERE key = ?`, key).Scan(&held).Error; err != nil {
			return err
		}
		if len(held) > 0 {
			h := held[0]
			if h.Host != host || processAlive(h.Pid) {
				return ErrLocked
			}
		}
		return tx.Exec(`INSERT INTO run_locks (key, host, pid, acquired_at) VALUES (?, ?, ?, CURRENT_TIMESTAMP)
			ON CONFLICT (key) DO UPDATE SET host = excluded.host, pid = excluded.pid, acquired_at = excluded.acquired_at`, key, host, pid).Error
	})
	if err != nil {
		if errors.Is(err, ErrLocked) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("take run lock: %w", err)
	}
	return &lock{key: key, row: db}, nil
}

// processAlive reports whether pid runs on this machine.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func (l *lock) release(ctx context.Context) error {
	if l.row != nil {
		return l.row.WithContext(ctx).Exec(`DELETE FROM run_locks WHERE key = ? AND pid = ?`, l.key, os.Getpid()).Error
	}
	_, err := l.conn.ExecContext(ctx, `SELECT pg_advisory_unlock(hashtextextended(current_schema() || '/reconciler/' || $1, 0))`, l.key)
	if cerr := l.conn.Close(); err == nil && !errors.Is(cerr, sql.ErrConnDone) {
		err = cerr
	}
	return err
}
