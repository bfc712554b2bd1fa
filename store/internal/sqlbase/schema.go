package sqlbase

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// Catalog is what a dialect tells of a live table, for CheckSchema.
type Catalog interface {
	// Columns returns the table's columns (name → type, lower case), and
	// nil when the table does not exist.
	Columns(ctx context.Context, db *gorm.DB, t models.AppTable) (map[string]string, error)
	// Uniques lists the column sets of the table's unique constraints and
	// unique indexes that ON CONFLICT can use (no partial indexes).
	Uniques(ctx context.Context, db *gorm.DB, t models.AppTable) ([][]string, error)
	// Kind reports whether a column type holds a value of kind k, and the
	// types the message names as the fix.
	Kind(typ string, k models.ColumnKind) (ok bool, want string)
}

// CheckSchema checks the live application tables against s before a run
// reads or writes anything (issue 18): each table exists, each mapped
// column exists with a type of its kind, the unique keys the statements'
// ON CONFLICT relies on exist, and (on a mapped install) no row holds a
// state value s does not map. The first problem is a *store.SchemaError: one line naming the
// table, column, type or state and the fix. A table of the contract's own
// names that does not exist yet is no problem: the migrations create it.
func CheckSchema(ctx context.Context, db *gorm.DB, s models.AppSchema, cat Catalog) error {
	db = db.WithContext(ctx)
	for _, t := range []struct {
		key    string // schema.payments
		ours   string // payments
		table  models.AppTable
		cols   []models.AppColumn
		unique [2]string
	}{
		{"schema.payments", "payments", s.Payments, models.PaymentColumns, [2]string{"provider", "provider_id"}},
		{"schema.webhook_events", "webhook_events", s.Events, models.EventColumns, [2]string{"source", "event_id"}},
	} {
		have, err := cat.Columns(ctx, db, t.table)
		if err != nil {
			return fmt.Errorf("schema: read the columns of %s: %w", t.table.Qualified(), err)
		}
		if have == nil {
			if !s.Mapped() {
				continue // the migrations create the contract's tables
			}
			return &store.SchemaError{Msg: fmt.Sprintf("schema: table %s (%s) not found; map it with %s.table, or create it with reconciler migrate --app-tables",
				t.table.Qualified(), t.ours, t.key)}
		}
		for _, c := range t.cols {
			name := t.table.Columns[c.Name]
			if name == "" {
				continue
			}
			typ, ok := have[name]
			if !ok && name == c.Name && workerColumn[c.Name] {
				continue // the application's worker's own column, which the job never uses
			}
			if !ok && !c.Optional || !ok && name != c.Name {
				return &store.SchemaError{Msg: fmt.Sprintf("schema: column %s.%s not found in table %s; map it with %s.columns.%s or add it",
					t.ours, c.Name, t.table.Qualified(), t.key, c.Name)}
			}
			if !ok {
				// An optional column of the contract's name that is not
				// there: the job does without it (Absent says so).
				return &store.SchemaError{Msg: fmt.Sprintf("schema: column %s.%s not found in table %s; add it, or map it to nothing with %s.columns.%s: \"-\" (then the job does not record it)",
					t.ours, c.Name, t.table.Qualified(), t.key, c.Name)}
			}
			// The types of a default install are the migrations' (or
			// compatible ones its application chose and the job has always
			// written): only a mapped install's are checked.
			if ok, want := cat.Kind(typ, c.Kind); !ok && s.Mapped() {
				return &store.SchemaError{Msg: fmt.Sprintf("schema: column %s.%s (%s.%s) is %s, want %s; change the column or map another with %s.columns.%s",
					t.ours, c.Name, t.table.Qualified(), name, typ, want, t.key, c.Name)}
			}
		}
		uniques, err := cat.Uniques(ctx, db, t.table)
		if err != nil {
			return fmt.Errorf("schema: read the unique keys of %s: %w", t.table.Qualified(), err)
		}
		key := []string{t.table.Columns[t.unique[0]], t.table.Columns[t.unique[1]]}
		slices.Sort(key)
		if !slices.ContainsFunc(uniques, func(u []string) bool { u = slices.Clone(u); slices.Sort(u); return slices.Equal(u, key) }) {
			return &store.SchemaError{Msg: fmt.Sprintf("schema: table %s has no unique constraint on (%s, %s), which the job's ON CONFLICT needs; add one: CREATE UNIQUE INDEX ON %s (%s, %s)",
				t.table.Qualified(), t.table.Columns[t.unique[0]], t.table.Columns[t.unique[1]], t.table.Ident(),
				models.QuoteIdent(t.table.Columns[t.unique[0]]), models.QuoteIdent(t.table.Columns[t.unique[1]]))}
		}
	}
	if !s.Mapped() {
		return nil // the contract's states are the rows' own: nothing is translated, nothing guessed
	}
	// Every state value in the table must be one the mapping names: a
	// SELECT DISTINCT over the state column, never a guess.
	rows, err := db.Raw(s.SQL(`SELECT DISTINCT {state} FROM {payments} WHERE {state} IS NOT NULL`)).Rows()
	if err != nil {
		return fmt.Errorf("schema: read the state values of %s: %w", s.Payments.Qualified(), err)
	}
	defer rows.Close()
	var unmapped []string
	for rows.Next() {
		var v sql.NullString
		if err := rows.Scan(&v); err != nil {
			return err
		}
		if _, err := s.OurState(v.String); err != nil {
			unmapped = append(unmapped, v.String)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(unmapped) > 0 {
		slices.Sort(unmapped)
		return &store.SchemaError{Msg: fmt.Sprintf("schema: state %s in %s.%s is not mapped (mapped: %s); map it with schema.states.<state>: %s, or change those rows (the job never guesses a state)",
			quoteList(unmapped), s.Payments.Qualified(), s.Payments.Columns["state"], strings.Join(s.AppStates(models.States), ", "), unmapped[0])}
	}
	return nil
}

// workerColumn are the webhook-events columns of the application's worker
// (claim with reclaim): checked when the table has them or the mapping
// names them, never required.
var workerColumn = map[string]bool{"received_at": true, "claimed_at": true, "attempts": true, "last_error": true}

func quoteList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}
