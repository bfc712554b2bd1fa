package reconcile

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
)

// store runs the engine's statements. Every statement of the event path is
// batched: a batch of any size costs a fixed number of round trips.
type store struct {
	db    *gorm.DB
	trips atomic.Int64 // statements sent, BEGIN and COMMIT included
}

func (s *store) exec(tx *gorm.DB, q string, args ...any) error {
	s.trips.Add(1)
	return tx.Exec(q, args...).Error
}

func (s *store) scan(tx *gorm.DB, dst any, q string, args ...any) error {
	s.trips.Add(1)
	return tx.Raw(q, args...).Scan(dst).Error
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
}

func (r localRow) local() Local {
	return Local{Exists: true, State: models.State(r.State), At: r.SourceUpdatedAt, Amount: r.Amount, Currency: r.Currency, AmountRefunded: r.AmountRefunded}
}

// load reads the rows of ids in one statement.
func (s *store) load(tx *gorm.DB, provider string, ids []string) (map[string]Local, error) {
	arg, err := jsonArg(ids)
	if err != nil {
		return nil, err
	}
	var rows []localRow
	if err := s.scan(tx, &rows, `SELECT provider_id, state, source_updated_at, amount, currency, amount_refunded
		FROM payments WHERE provider = ? AND provider_id IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb)))
		ORDER BY provider_id`, provider, arg); err != nil {
		return nil, fmt.Errorf("load payments: %w", err)
	}
	out := make(map[string]Local, len(rows))
	for _, r := range rows {
		out[r.ProviderID] = r.local()
	}
	return out, nil
}

type insertRow struct {
	ProviderID     string    `json:"provider_id"`
	State          string    `json:"state"`
	At             time.Time `json:"at"`
	Amount         int64     `json:"amount"`
	Currency       string    `json:"currency"`
	AmountRefunded int64     `json:"amount_refunded"`
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
	if err := s.scan(tx, &ids, `INSERT INTO payments (provider, account, provider_id, state, amount, currency, amount_refunded, source_updated_at)
		SELECT ?, ?, v.provider_id, v.state, v.amount, v.currency, v.amount_refunded, v.at
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, state text, at timestamptz, amount bigint, currency text, amount_refunded bigint)
		ON CONFLICT (provider, provider_id) DO NOTHING
		RETURNING provider_id`, provider, account, arg); err != nil {
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
	if err := s.scan(tx, &ids, `UPDATE payments p
		SET state = v.to_state, source_updated_at = v.at,
		    amount_refunded = GREATEST(p.amount_refunded, v.refund), updated_at = now()
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, to_state text, preds text, at timestamptz, refund bigint)
		WHERE p.provider = ? AND p.provider_id = v.provider_id
		  AND p.state = ANY(string_to_array(v.preds, ','))
		  AND (p.source_updated_at IS NULL OR p.source_updated_at <= v.at)
		RETURNING p.provider_id`, arg, provider); err != nil {
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
	if err := s.exec(tx, `UPDATE payments p SET amount_refunded = v.refund, updated_at = now()
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, refund bigint)
		WHERE p.provider = ? AND p.provider_id = v.provider_id
		  AND p.amount_refunded < v.refund AND p.state <> 'canceled'`, arg, provider); err != nil {
		return fmt.Errorf("raise amount_refunded: %w", err)
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
	arg, err := jsonArg(rows)
	if err != nil {
		return 0, err
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
	err = s.scan(tx, &n, `SELECT count(*) FROM jsonb_array_elements_text(CAST(? AS jsonb)) AS v(id)
		WHERE NOT EXISTS (SELECT 1 FROM webhook_events w WHERE w.source = ? AND w.event_id = v.id)`, arg, source)
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
	if err := s.exec(tx, `INSERT INTO drift_items (run_id, provider, provider_id, kind, action, local_state, provider_state, detail)
		SELECT ?, ?, v.provider_id, v.kind, v.action, v.local_state, v.provider_state, coalesce(v.detail, '{}')
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, kind text, action text, local_state text, provider_state text, detail jsonb)`,
		runID, provider, arg); err != nil {
		return fmt.Errorf("insert drift items: %w", err)
	}
	return nil
}

// counts are a batch's additions to the run's counters, except Examined
// and InSync, which are the run's totals so far (distinct payments).
type counts struct {
	Examined, InSync, Repaired, Refused, Reported, Synthetic, Events int64
}

func (c *counts) add(o counts) {
	c.Examined += o.Examined
	c.InSync += o.InSync
	c.Repaired += o.Repaired
	c.Refused += o.Refused
	c.Reported += o.Reported
	c.Synthetic += o.Synthetic
	c.Events += o.Events
}

func (s *store) addCounts(tx *gorm.DB, runID int64, c counts, apiRequests int64) error {
	return s.exec(tx, `UPDATE reconciliation_runs SET
		examined = ?, in_sync = ?, repaired = repaired + ?, refused = refused + ?,
		reported = reported + ?, synthetic_events = synthetic_events + ?, events_read = events_read + ?,
		api_requests = ?
		WHERE id = ?`, c.Examined, c.InSync, c.Repaired, c.Refused, c.Reported, c.Synthetic, c.Events, apiRequests, runID)
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
// server if the process dies (DESIGN section 8).
type lock struct {
	conn *sql.Conn
	key  string
}

// tryLock takes the run lock for (provider, account) in the current schema,
// so that two deployments sharing a database in different schemas do not
// block each other.
func tryLock(ctx context.Context, db *gorm.DB, provider, account string) (*lock, error) {
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

func (l *lock) release(ctx context.Context) error {
	_, err := l.conn.ExecContext(ctx, `SELECT pg_advisory_unlock(hashtextextended(current_schema() || '/reconciler/' || $1, 0))`, l.key)
	if cerr := l.conn.Close(); err == nil && !errors.Is(cerr, sql.ErrConnDone) {
		err = cerr
	}
	return err
}
