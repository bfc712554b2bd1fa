// Package sqlbase is what the dialect packages share: round-trip counting,
// the transaction and its retry, row scanning, argument encoding and the run
// record, whose statements are the same in both dialects. Dialect-specific
// SQL lives in store/pgstore and store/sqlitestore only.
package sqlbase

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/internal/jsonw"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// Base is the shared half of a dialect's store.
type Base struct {
	DB    *gorm.DB
	Clock clock.Clock
	// Translate maps the driver's errors to the store's sentinels
	// (store.ErrConflict above all); nil errors stay nil.
	Translate func(error) error
	// Schema names the application's tables (models.AppSchemaOf the
	// connection): every statement touching them is written from it.
	Schema models.AppSchema
	// OwnConn runs each transaction on a connection of its own (gorm's
	// Connection), which Conn.Raw then reaches: PostgreSQL's store COPYs a
	// batch's events on it, inside the transaction.
	OwnConn  bool
	rendered sync.Map // statement template → SQL in Schema's names
	trips    atomic.Int64
}

// New returns a Base over db; c nil means the wall clock.
func New(db *gorm.DB, c clock.Clock, translate func(error) error) *Base {
	if c == nil {
		c = clock.System
	}
	return &Base{DB: db, Clock: c, Translate: translate, Schema: models.AppSchemaOf(db)}
}

// RoundTrips implements store.Store.
func (b *Base) RoundTrips() int64 { return b.trips.Load() }

// AppSchema is the application's tables as the store writes them.
func (b *Base) AppSchema() models.AppSchema { return b.Schema }

// Now is the argument SQL stamps with coalesce(?, now()): nil on the wall
// clock (the server's time), the stubbed time otherwise.
func (b *Base) Now() any {
	if !clock.Stubbed(b.Clock) {
		return nil
	}
	return b.Clock.Now().UTC()
}

// Conn is one transaction's connection, counting what it sends.
type Conn struct {
	Tx *gorm.DB
	// Raw is the connection Tx runs on, when the store asked for one
	// (Base.OwnConn): its driver connection may be used between Tx's
	// statements, never during one.
	Raw   *sql.Conn
	base  *Base
	trips *atomic.Int64 // the caller's own count (store.CountTrips), or nil
}

func (c *Conn) count(n int64) {
	c.base.trips.Add(n)
	if c.trips != nil {
		c.trips.Add(n)
	}
}

// SQL is the statement template tmpl in the application's names
// (models.AppSchema.SQL), rendered once per store.
func (c *Conn) SQL(tmpl string) string {
	if q, ok := c.base.rendered.Load(tmpl); ok {
		return q.(string)
	}
	q := c.base.Schema.SQL(tmpl)
	c.base.rendered.Store(tmpl, q)
	return q
}

// Base returns the store the connection belongs to.
func (c *Conn) Base() *Base { return c.base }

// InTx runs fn in one transaction, retried up to eight times with jittered
// backoff on the store's clock when the driver reports a conflict.
func (b *Base) InTx(ctx context.Context, fn func(ctx context.Context, c *Conn) error) error {
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		c := &Conn{base: b, trips: store.TripCounter(ctx)}
		c.count(2) // BEGIN and COMMIT
		run := func(db *gorm.DB) error {
			return db.Transaction(func(tx *gorm.DB) error {
				c.Tx = tx
				return fn(ctx, c)
			})
		}
		if b.OwnConn {
			err = b.Translate(b.DB.WithContext(ctx).Connection(func(db *gorm.DB) error {
				c.Raw, _ = db.Statement.ConnPool.(*sql.Conn)
				return run(db)
			}))
		} else {
			err = b.Translate(run(b.DB.WithContext(ctx)))
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		if serr := b.Clock.Sleep(ctx, time.Duration(1+rand.IntN(20<<attempt))*time.Millisecond); serr != nil {
			return errors.Join(err, serr)
		}
	}
	return err
}

// Driver runs f with the transaction's driver connection (Raw must be set:
// Base.OwnConn), counted as one statement. Nothing else may use the
// transaction meanwhile.
func (c *Conn) Driver(f func(driverConn any) error) error {
	if c.Raw == nil {
		return errors.New("no connection of the transaction's own (Base.OwnConn unset)")
	}
	c.count(1)
	return c.Raw.Raw(f)
}

// Exec sends one statement.
func (c *Conn) Exec(q string, args ...any) error {
	c.count(1)
	return c.Tx.Exec(q, args...).Error
}

// Scan runs a query and calls row for each row. It reads rows itself:
// gorm's Scan formats every statement with its arguments for its trace
// recorder, and the batch statements carry megabytes of JSON.
func (c *Conn) Scan(row func(*sql.Rows) error, q string, args ...any) error {
	c.count(1)
	rows, err := c.Tx.Raw(q, args...).Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Strings runs a query returning one text column.
func (c *Conn) Strings(q string, args ...any) ([]string, error) {
	var out []string
	err := c.Scan(func(r *sql.Rows) error {
		var v string
		if err := r.Scan(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	}, q, args...)
	return out, err
}

// Int runs a query returning one integer.
func (c *Conn) Int(q string, args ...any) (int64, error) {
	var n int64
	err := c.Scan(func(r *sql.Rows) error { return r.Scan(&n) }, q, args...)
	return n, err
}

// PaymentColumns are the columns Payments reads, in its order, for a
// dialect's SELECT or RETURNING (the schema's names; NULL for a column a
// mapped schema lacks).
const PaymentColumns = `{provider_id}, {state}, {source_updated_at}, {amount}, {currency}, {amount_refunded}, {settled_at|NULL}, {payout_id|NULL}, {amount_captured|NULL}`

// PaymentColumnsP is PaymentColumns qualified by the alias p, for the
// RETURNING of an UPDATE whose FROM names columns of the same names.
const PaymentColumnsP = `{p.provider_id}, {p.state}, {p.source_updated_at}, {p.amount}, {p.currency}, {p.amount_refunded}, {p.settled_at|NULL}, {p.payout_id|NULL}, {p.amount_captured|NULL}`

// Payments runs a query returning the columns of store.Payment in order:
// provider_id, state, source_updated_at, amount, currency,
// amount_refunded, settled_at, payout_id, amount_captured. n is how many
// rows it may return, to size the result (0: unknown).
func (c *Conn) Payments(n int, q string, args ...any) ([]store.Payment, error) {
	out := make([]store.Payment, 0, n)
	times := Times{N: n}
	err := c.Scan(func(r *sql.Rows) error {
		var p store.Payment
		var state string
		var at, settled sql.NullTime
		var payout sql.NullString
		var captured sql.NullInt64
		if err := r.Scan(&p.ProviderID, &state, &at, &p.Amount, &p.Currency, &p.AmountRefunded,
			&settled, &payout, &captured); err != nil {
			return err
		}
		st, err := c.base.Schema.OurState(state)
		if err != nil {
			return err
		}
		p.State, p.PayoutID, p.AmountCaptured = st, payout.String, captured.Int64
		p.At, p.SettledAt = times.Of(at.Time, at.Valid), times.Of(settled.Time, settled.Valid)
		out = append(out, p)
		return nil
	}, q, args...)
	return out, err
}

// Times holds the times of scanned rows in arrays of a few dozen, each
// row's pointing into one: a time scanned through its pointer
// (store.Payment's fields) was an allocation of its own, twice a row
// (issue 16). A full array is left to the rows pointing into it, never
// grown. N is how many rows are expected (0: unknown).
type Times struct {
	N   int
	buf []time.Time
}

// Of returns a pointer to t in the current array, or nil when !ok (NULL).
func (a *Times) Of(t time.Time, ok bool) *time.Time {
	if !ok {
		return nil
	}
	if len(a.buf) == cap(a.buf) {
		a.buf = make([]time.Time, 0, min(max(2*a.N, 16), 256))
	}
	a.buf = append(a.buf, t)
	return &a.buf[len(a.buf)-1]
}

// Carries runs a query returning provider_id and state.
func (c *Conn) Carries(q string, args ...any) ([]store.Carry, error) {
	var out []store.Carry
	err := c.Scan(func(r *sql.Rows) error {
		var cr store.Carry
		var b models.JSON
		if err := r.Scan(&cr.ProviderID, &b); err != nil {
			return err
		}
		cr.State = json.RawMessage(b)
		out = append(out, cr)
		return nil
	}, q, args...)
	return out, err
}

// JSON encodes a batch argument. The string is json.Marshal's bytes, which
// nothing else holds, without the copy string() would make: the batch
// arguments were a tenth of an empty month's allocations.
//
// The most sent, a batch's ids, its drift items and its new payments (and
// StepsJSON's steps), are written by hand (jsonargs.go): encoding/json's
// reflection over the first two was a third of the job's JSON work on an
// empty schema's month, over the others two fifths of what was left.
func JSON(v any) (string, error) {
	var b []byte
	var err error
	switch v := v.(type) {
	case []string:
		b = stringsJSON(v)
	case []store.Item:
		b, err = itemsJSON(v)
	case []store.NewPayment:
		b = newPaymentsJSON(v)
	default:
		b, err = json.Marshal(v)
	}
	if err != nil || len(b) == 0 {
		return "", err
	}
	return unsafe.String(&b[0], len(b)), nil
}

// StepsJSON encodes steps with each state's allowed predecessors, which the
// guarded statement tests the row's state against, in the application's
// state values (m).
func StepsJSON(steps []store.Step, m models.AppSchema) (string, error) {
	rows := make([]stepRow, len(steps))
	for i, s := range steps {
		rows[i] = stepRow{ProviderID: s.ProviderID, To: m.AppState(s.To), Preds: predsCSV(s.To, m), At: s.At, Refund: s.Refund}
		if st := s.Settled; st != nil && RecordsSettlements(m) {
			rows[i].SettleAt, rows[i].PayoutID = &st.At, st.PayoutID
		}
		// Fix (found by store/storetest): a move to canceled never raises
		// amount_refunded, as in the published guard (guard.Advance) and
		// RaiseRefunds; a released authorisation is not a refund.
		if s.To == models.StateCanceled {
			rows[i].Refund = 0
		}
	}
	b := stepsJSON(rows) // by hand, as the items (jsonargs.go)
	return unsafe.String(&b[0], len(b)), nil
}

func predsCSV(to models.State, m models.AppSchema) string {
	var b []byte
	for i, p := range models.Predecessors(to) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.AppState(p)...)
	}
	return string(b)
}

// EventsJSON encodes event rows by hand: the payloads are the provider's
// own JSON, already decoded once, and re-encoding them through
// encoding/json (which re-validates and compacts raw messages) was a tenth
// of the job's CPU at scale.
func EventsJSON(rows []store.Event) string {
	n := 2
	for _, r := range rows {
		n += len(r.Payload) + len(r.EventID) + len(r.EventType) + 48
	}
	// Written into a strings.Builder, whose String does not copy: a
	// batch's argument is about a megabyte of payloads on an empty schema,
	// and string(b) copied each once more (45 MB over the month).
	var sb strings.Builder
	sb.Grow(n)
	var scratch []byte
	sb.WriteByte('[')
	for i, r := range rows {
		if i > 0 {
			sb.WriteByte(',')
		}
		scratch = append(scratch[:0], `{"event_id":`...)
		scratch = jsonw.String(scratch, r.EventID)
		scratch = append(scratch, `,"event_type":`...)
		scratch = jsonw.String(scratch, r.EventType)
		scratch = append(scratch, `,"payload":`...)
		sb.Write(scratch)
		if len(r.Payload) == 0 {
			sb.WriteString("null")
		} else {
			sb.Write(r.Payload)
		}
		if r.Deliver {
			sb.WriteString(`,"deliver":true`)
		}
		sb.WriteByte('}')
	}
	sb.WriteByte(']')
	return sb.String()
}

// CarryJSON encodes carry rows by hand: their states are JSON already.
func CarryJSON(rows []store.Carry) string {
	n := 2
	for _, r := range rows {
		n += len(r.State) + len(r.ProviderID) + 64
	}
	var sb strings.Builder // String does not copy (EventsJSON)
	sb.Grow(n)
	var scratch []byte
	sb.WriteByte('[')
	for i, r := range rows {
		if i > 0 {
			sb.WriteByte(',')
		}
		scratch = append(scratch[:0], `{"provider_id":`...)
		scratch = jsonw.String(scratch, r.ProviderID)
		scratch = append(scratch, `,"state":`...)
		sb.Write(scratch)
		sb.Write(r.State)
		sb.WriteByte('}')
	}
	sb.WriteByte(']')
	return sb.String()
}

// AddCounts is the same statement in both dialects.
func (c *Conn) AddCounts(runID int64, p store.Progress) error {
	var cur *string
	var at *time.Time
	if p.Cursor != "" {
		cur, at = &p.Cursor, utcPtr(&p.CursorAt)
	}
	return c.Exec(`UPDATE reconciliation_runs SET
		examined = ?, in_sync = ?, repaired = repaired + ?, refused = refused + ?,
		reported = reported + ?, synthetic_events = synthetic_events + ?, events_read = events_read + ?,
		settlements_recorded = settlements_recorded + ?, delivered = delivered + ?,
		api_requests = ?, progress_cursor = coalesce(?, progress_cursor), progress_at = coalesce(?, progress_at)
		WHERE id = ?`, p.Examined, p.InSync, p.Repaired, p.Refused, p.Reported, p.Synthetic, p.Events, p.Settlements,
		p.Delivered, p.APIRequests, cur, at, runID)
}

// ---- the run record --------------------------------------------------------

func (b *Base) db(ctx context.Context) *gorm.DB { return b.DB.WithContext(ctx) }

// utcPtr is *t in UTC. The run record writes its times in UTC. Fix (found
// by store/storetest): the embedded store keeps a time as the text the
// driver formats in the time's own zone, so runs written with times in other
// zones (clock.System is local time) sorted by their text, not their
// instant, in FindRuns.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// CreateRun implements store.RunRecord.
func (b *Base) CreateRun(ctx context.Context, r *models.Run) error {
	row := *r
	row.WindowStart, row.WindowEnd, row.StartedAt = r.WindowStart.UTC(), r.WindowEnd.UTC(), r.StartedAt.UTC()
	row.FinishedAt, row.ProgressAt = utcPtr(r.FinishedAt), utcPtr(r.ProgressAt)
	if err := b.db(ctx).Create(&row).Error; err != nil {
		return fmt.Errorf("record run: %w", b.Translate(err))
	}
	r.ID = row.ID
	return nil
}

// InterruptOthers implements store.RunRecord.
func (b *Base) InterruptOthers(ctx context.Context, provider, account string, runID int64, at time.Time, msg string) (int64, error) {
	res := b.db(ctx).Model(&models.Run{}).
		Where("provider = ? AND account = ? AND status = ? AND id <> ?", provider, account, models.RunRunning, runID).
		Updates(map[string]any{"status": models.RunInterrupted, "finished_at": at.UTC(), "error": msg})
	if res.Error != nil {
		return 0, fmt.Errorf("mark dead runs interrupted: %w", b.Translate(res.Error))
	}
	return res.RowsAffected, nil
}

// FinishRun implements store.RunRecord: guarded on the run's own state, so
// that a run another one marked interrupted (it lost its lock) is not
// flipped back.
func (b *Base) FinishRun(ctx context.Context, r models.Run) (bool, error) {
	set := map[string]any{
		"status": r.Status, "finished_at": utcPtr(r.FinishedAt), "error": r.Error, "api_requests": r.APIRequests,
	}
	if len(r.Notes) > 0 {
		set["notes"] = r.Notes
	}
	res := b.db(ctx).Model(&models.Run{}).Where("id = ? AND status = ?", r.ID, models.RunRunning).Updates(set)
	if res.Error != nil {
		return false, fmt.Errorf("record run end: %w", b.Translate(res.Error))
	}
	return res.RowsAffected > 0, nil
}

// GetRun implements store.RunRecord.
func (b *Base) GetRun(ctx context.Context, id int64) (models.Run, error) {
	var r models.Run
	if err := b.db(ctx).Where("id = ?", id).Limit(1).Find(&r).Error; err != nil {
		return r, fmt.Errorf("read run %d: %w", id, b.Translate(err))
	}
	if r.ID == 0 {
		return r, fmt.Errorf("run %d: %w", id, store.ErrNotFound)
	}
	return r, nil
}

// FindRuns implements store.RunRecord.
func (b *Base) FindRuns(ctx context.Context, q store.RunQuery) ([]models.Run, error) {
	db := b.db(ctx).Model(&models.Run{})
	if q.Provider != "" {
		db = db.Where("provider = ?", q.Provider)
		if !q.AnyAccount {
			db = db.Where("account = ?", q.Account)
		}
	}
	if q.Status != "" {
		db = db.Where("status = ?", q.Status)
	}
	if q.NotStatus != "" {
		db = db.Where("status <> ?", q.NotStatus)
	}
	if q.Trigger != "" {
		db = db.Where(`"trigger" = ?`, q.Trigger)
	}
	if q.TriggeredBy != "" {
		db = db.Where("triggered_by = ?", q.TriggeredBy)
	}
	if q.NotDryRun {
		db = db.Where("NOT dry_run")
	}
	if q.WindowRead {
		// Both dialects keep the run record's times in UTC (utcPtr), so
		// the comparison is of instants on SQLite's text too.
		db = db.Where("finished_at IS NOT NULL AND window_end <= finished_at")
	}
	order := store.OrderID
	switch q.Order {
	case store.OrderFinished, store.OrderWindowEnd:
		order = q.Order
	}
	dir := " DESC"
	if q.Ascending {
		dir = ""
	}
	if order == store.OrderFinished {
		// Fix (found by store/storetest): runs not finished come last
		// whichever the direction. PostgreSQL sorts NULL first descending
		// and SQLite first ascending, so the two dialects disagreed.
		db = db.Order(order + dir + " NULLS LAST")
	} else {
		db = db.Order(order + dir)
	}
	if order != store.OrderID {
		db = db.Order("id" + dir)
	}
	if q.Limit > 0 {
		db = db.Limit(q.Limit)
	}
	var runs []models.Run
	if err := db.Find(&runs).Error; err != nil {
		return nil, fmt.Errorf("read runs: %w", b.Translate(err))
	}
	return runs, nil
}

// DriftCounts implements store.RunRecord.
func (b *Base) DriftCounts(ctx context.Context, runID int64) ([]store.DriftCount, error) {
	var out []store.DriftCount
	if err := b.db(ctx).Raw(`SELECT kind, action, count(*) AS n FROM drift_items WHERE run_id = ? GROUP BY kind, action ORDER BY kind, action`, runID).
		Scan(&out).Error; err != nil {
		return nil, fmt.Errorf("count drift: %w", b.Translate(err))
	}
	return out, nil
}

// ForgetCarry implements store.RunRecord.
func (b *Base) ForgetCarry(ctx context.Context, runID int64) error {
	if err := b.db(ctx).Exec(`DELETE FROM reconciler_carry WHERE run_id = ?`, runID).Error; err != nil {
		return fmt.Errorf("clear carried payments: %w", b.Translate(err))
	}
	return nil
}

// ForgetDeadCarry implements store.RunRecord.
func (b *Base) ForgetDeadCarry(ctx context.Context, provider, account string, runID int64) error {
	if err := b.db(ctx).Exec(`DELETE FROM reconciler_carry WHERE run_id IN
		(SELECT id FROM reconciliation_runs WHERE provider = ? AND account = ? AND status <> ? AND id <> ?)`,
		provider, account, models.RunRunning, runID).Error; err != nil {
		return fmt.Errorf("clear dead runs' carried payments: %w", b.Translate(err))
	}
	return nil
}

// PaymentsInWindow implements store.Reads, given the dialect's condition
// for "column in [?, ?)" (a %s for the column).
func (b *Base) PaymentsInWindow(ctx context.Context, q store.PaymentQuery, inRange string) ([]models.Payment, error) {
	m := b.Schema
	var rows []models.Payment
	err := b.inWindow(ctx, q, inRange).Select(m.SQL(models.PaymentSelect)).
		Where(m.SQL("{p.id} > ?"), q.AfterID).Order(m.SQL("{p.id}")).Limit(q.Limit).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read payments: %w", b.Translate(err))
	}
	for i := range rows {
		if rows[i].State, err = m.OurState(string(rows[i].State)); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// inWindow is the payments of q's (provider, account) whose
// source_updated_at or settled_at lies in [q.Since, q.Until), as p, given
// the dialect's condition for "column in [?, ?)" (a %s for the column).
func (b *Base) inWindow(ctx context.Context, q store.PaymentQuery, inRange string) *gorm.DB {
	m := b.Schema
	cond := func(col string) string { return "(" + fmt.Sprintf(inRange, m.SQL(col)) + ")" }
	return b.db(ctx).Table(m.SQL("{payments} AS p")).
		Where(m.SQL("{p.provider} = ? AND {p.account} = ?"), q.Provider, q.Account).
		Where(cond("{p.source_updated_at}")+" OR "+cond("{p.settled_at|NULL}"), q.Since.UTC(), q.Until.UTC(), q.Since.UTC(), q.Until.UTC())
}

// CountInWindow implements store.Reads, given the dialect's range
// condition, as PaymentsInWindow does.
func (b *Base) CountInWindow(ctx context.Context, q store.PaymentQuery, inRange string) (int, error) {
	var n int64
	err := b.inWindow(ctx, q, inRange).Count(&n).Error
	if err != nil {
		return 0, fmt.Errorf("count payments: %w", b.Translate(err))
	}
	return int(n), nil
}

// PayoutsInWindow implements store.Reads, given the dialect's range
// condition, as PaymentsInWindow does.
func (b *Base) PayoutsInWindow(ctx context.Context, q store.PaymentQuery, inRange string) ([]string, error) {
	m := b.Schema
	var ids []string
	err := b.inWindow(ctx, q, inRange).Distinct(m.SQL("{p.payout_id|NULL}")).
		Where(m.SQL("{p.payout_id|NULL} IS NOT NULL AND {p.payout_id|NULL} <> ''")).
		Pluck(m.SQL("{p.payout_id|NULL}"), &ids).Error
	if err != nil {
		return nil, fmt.Errorf("read the window's payouts: %w", b.Translate(err))
	}
	slices.Sort(ids)
	return ids, nil
}

// WindowStates implements store.Reads, given the dialect's range condition.
func (b *Base) WindowStates(ctx context.Context, q store.WindowQuery, inRange string) ([]store.PaymentState, error) {
	m := b.Schema
	// Scanned by hand: gorm's Find filled each row's struct by reflection,
	// a fiftieth of a month's rerun (its window's 19,000 rows; issue 16).
	sqlText := m.SQL("SELECT {p.provider_id}, {p.state} FROM {payments} AS p WHERE {p.provider} = ? AND {p.account} = ? AND {p.provider_id} > ? AND {p.state} <> ? AND ") +
		fmt.Sprintf(inRange, m.SQL("{p.source_updated_at}")) + m.SQL(" ORDER BY {p.provider_id}")
	args := []any{q.Provider, q.Account, q.After, m.AppState(models.StateCreated), q.Since.UTC(), q.Until.UTC()}
	if q.Limit > 0 {
		sqlText += " LIMIT ?"
		args = append(args, q.Limit)
	}
	rows, err := b.db(ctx).Raw(sqlText, args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("read the window's rows: %w", b.Translate(err))
	}
	defer rows.Close()
	out := make([]store.PaymentState, 0, max(q.Limit, 0))
	var id, state string
	for rows.Next() {
		if err := rows.Scan(&id, &state); err != nil {
			return nil, fmt.Errorf("read the window's rows: %w", b.Translate(err))
		}
		st, err := m.OurState(state)
		if err != nil {
			return nil, err
		}
		out = append(out, store.PaymentState{ProviderID: id, State: st})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the window's rows: %w", b.Translate(err))
	}
	return out, nil
}

// StuckPayments implements store.Reads, given the dialect's "column < ?".
// Payments never re-fetched come first, then those checked longest ago;
// within each, the oldest source_updated_at first.
func (b *Base) StuckPayments(ctx context.Context, q store.StuckQuery, before string) ([]string, error) {
	m := b.Schema
	states := m.AppStates(q.States)
	var ids []string
	err := b.db(ctx).Table(m.SQL("{payments} AS p")).
		Joins(m.SQL("LEFT JOIN reconciler_checks AS c ON c.provider = {p.provider} AND c.provider_id = {p.provider_id}")).
		Where(m.SQL("{p.provider} = ? AND {p.account} = ? AND {p.state} IN ? AND ")+fmt.Sprintf(before, m.SQL("{p.source_updated_at}")),
			q.Provider, q.Account, states, q.Before.UTC()).
		Order(m.SQL("c.checked_at IS NOT NULL, c.checked_at, {p.source_updated_at}, {p.provider_id}")).Limit(q.Limit).Pluck(m.SQL("{p.provider_id}"), &ids).Error
	if err != nil {
		return nil, fmt.Errorf("read stuck payments: %w", b.Translate(err))
	}
	return ids, nil
}

// MarkChecked implements store.Reads: one statement, an upsert.
func (b *Base) MarkChecked(ctx context.Context, provider, account string, ids []string, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	rows := make([]check, len(ids))
	for i, id := range ids {
		rows[i] = check{Provider: provider, Account: account, ProviderID: id, CheckedAt: at.UTC()}
	}
	err := b.db(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "provider"}, {Name: "provider_id"}},
		DoUpdates: clause.AssignmentColumns([]string{"account", "checked_at"}),
	}).Create(&rows).Error
	if err != nil {
		return fmt.Errorf("record stuck checks: %w", b.Translate(err))
	}
	return nil
}

// check is a row of reconciler_checks.
type check struct {
	Provider   string
	Account    string
	ProviderID string
	CheckedAt  time.Time
}

func (check) TableName() string { return "reconciler_checks" }

// ---- the application's names (issue 18) -------------------------------------

// AppStates returns rows with their states in the application's values.
func AppStates(rows []store.NewPayment, m models.AppSchema) []store.NewPayment {
	out := make([]store.NewPayment, len(rows))
	for i, r := range rows {
		r.State = models.State(m.AppState(r.State))
		out[i] = r
	}
	return out
}

// Updated is the arguments of an UPDATE whose template stamps updated_at
// ([[updated_at: … ? …]]) after pre: now is left out when the application's
// table has no updated_at.
func Updated(m models.AppSchema, pre []any, now any, rest ...any) []any {
	out := append([]any(nil), pre...)
	if m.Has("updated_at") {
		out = append(out, now)
	}
	return append(out, rest...)
}

// Inserted is the arguments of an INSERT whose template stamps created_at
// and updated_at after pre, each left out when the table lacks it.
func Inserted(m models.AppSchema, pre []any, now any, rest ...any) []any {
	out := append([]any(nil), pre...)
	for _, c := range []string{"created_at", "updated_at"} {
		if m.Has(c) {
			out = append(out, now)
		}
	}
	return append(out, rest...)
}

// RunArg is the arguments of the events INSERT: the run's id after pre
// only when the application's table records it (run_id).
func RunArg(m models.AppSchema, pre []any, runID int64, rest ...any) []any {
	out := append([]any(nil), pre...)
	if m.Has("run_id") {
		out = append(out, runID)
	}
	return append(out, rest...)
}

// RecordsSettlements reports whether the application's table records
// settlements (settled_at and payout_id both mapped); without them the
// stores record none and the run's notes say so.
func RecordsSettlements(m models.AppSchema) bool { return m.Has("settled_at") && m.Has("payout_id") }
