package pgstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/reconciler/reconciler/store"
)

// copyEventsMin is the number of new events from which a batch COPYs them
// instead of sending one JSON document for jsonb_to_recordset: PostgreSQL
// parsed each batch's document (a megabyte of payloads on an empty schema)
// and then built every payload's jsonb again from it, and the job wrote the
// document and pgx copied it twice more. Below it the four round trips a
// COPY takes (the time, a savepoint, the COPY, its release) cost more than
// they save.
var copyEventsMin = 64

const copySavepoint = "reconciler_copy_events"

var errNotPgx = errors.New("not pgx's connection")

// copyEvents COPYs rows into webhook_events inside the transaction and
// returns how many it wrote, with done true. A row recorded meanwhile (a
// webhook delivered between the batch's question and now: COPY has no ON
// CONFLICT) undoes the COPY (a savepoint) and returns done false: the
// caller INSERTs them with ON CONFLICT DO NOTHING instead.
func (t tx) copyEvents(ctx context.Context, runID int64, source string, rows []store.Event) (n int64, done bool, err error) {
	// The rows' time, and lz4 for their payloads when the store uses it
	// (toast.go), in one round trip.
	var at time.Time
	var method sql.NullString
	q := `SELECT coalesce(CAST(? AS timestamptz), now()), NULL`
	if t.lz4 {
		q = `SELECT coalesce(CAST(? AS timestamptz), now()), ` + setLZ4
	}
	if err := t.c.Scan(func(r *sql.Rows) error { return r.Scan(&at, &method) }, q, t.now()); err != nil {
		return 0, false, fmt.Errorf("insert synthetic events: %w", err)
	}
	m := t.c.Base().Schema
	var body []byte
	select {
	case body = <-copyBodies:
	default:
	}
	body = copyEventsText(body[:0], rows, source, at, m.Has("synthetic"), m.Has("run_id"), runID)
	defer func() {
		select {
		case copyBodies <- body:
		default:
		}
	}()
	q = t.c.SQL(`COPY {webhook_events} ({source}, {event_id}, {event_type}, {payload}, {processed_at}[[synthetic:, {synthetic}]][[run_id:, {run_id}]]) FROM STDIN`)
	if err := t.c.Exec(`SAVEPOINT ` + copySavepoint); err != nil {
		return 0, false, fmt.Errorf("insert synthetic events: %w", err)
	}
	err = t.c.Driver(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx // a pool of another driver: the INSERT does
		}
		tag, err := sc.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(body), q)
		n = tag.RowsAffected()
		return err
	})
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "23505" || errors.Is(err, errNotPgx) {
		if err := t.c.Exec(`ROLLBACK TO SAVEPOINT ` + copySavepoint); err != nil {
			return 0, false, fmt.Errorf("insert synthetic events: %w", err)
		}
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("insert synthetic events: %w", err)
	}
	if err := t.c.Exec(`RELEASE SAVEPOINT ` + copySavepoint); err != nil {
		return 0, false, fmt.Errorf("insert synthetic events: %w", err)
	}
	return n, true, nil
}

// copyBodies holds a COPY body's buffer for the next batch (a megabyte on
// an empty schema; nothing keeps one after its COPY). Not a sync.Pool: the
// collector, which runs about as often as a batch commits, empties those.
var copyBodies = make(chan []byte, 1)

// copyEventsText appends to b rows in COPY's text format, in copyEvents'
// columns: an event to deliver (store.Event.Deliver) has processed_at NULL,
// the others at.
func copyEventsText(b []byte, rows []store.Event, source string, at time.Time, synthetic, withRun bool, runID int64) []byte {
	n := 0
	for _, r := range rows {
		n += len(r.Payload) + len(r.EventID) + len(r.EventType) + len(source) + 64
	}
	b = slices.Grow(b, n+n/16)
	stamp := at.UTC().AppendFormat(nil, "2006-01-02 15:04:05.999999Z07:00")
	run := strconv.AppendInt(nil, runID, 10)
	for _, r := range rows {
		b = copyField(b, source)
		b = append(b, '\t')
		b = copyField(b, r.EventID)
		b = append(b, '\t')
		b = copyField(b, r.EventType)
		b = append(b, '\t')
		if len(r.Payload) == 0 {
			b = append(b, `null`...)
		} else {
			b = copyField(b, r.Payload)
		}
		b = append(b, '\t')
		if r.Deliver {
			b = append(b, `\N`...)
		} else {
			b = append(b, stamp...)
		}
		if synthetic {
			b = append(b, "\tt"...)
		}
		if withRun {
			b = append(b, '\t')
			b = append(b, run...)
		}
		b = append(b, '\n')
	}
	return b
}

// copyField appends s escaped for COPY's text format: a backslash, and
// the tab, newline and carriage return that end fields and rows. It copies
// the runs between them whole (a payload has a backslash in every escaped
// quote).
func copyField[S ~string | ~[]byte](b []byte, s S) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		var e byte
		switch s[i] {
		case '\\':
			e = '\\'
		case '\t':
			e = 't'
		case '\n':
			e = 'n'
		case '\r':
			e = 'r'
		default:
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, '\\', e)
		start = i + 1
	}
	return append(b, s[start:]...)
}
