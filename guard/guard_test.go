package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/guard"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
)

var (
	_ guard.Execer = (*sql.DB)(nil)
	_ guard.Execer = (*sql.Tx)(nil)
	_ guard.Execer = (*sql.Conn)(nil)
	_ guard.Execer = gorm.ConnPool(nil)
)

var t0 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

func TestGuardAllowed(t *testing.T) {
	const (
		none = models.StateNone
		cr   = models.StateCreated
		au   = models.StateAuthorised
		ca   = models.StateCaptured
		se   = models.StateSettled
		re   = models.StateRefunded
		cn   = models.StateCanceled
		fa   = models.StateFailed
		cb   = models.StateChargeback
	)
	for _, c := range []struct {
		name  string
		cur   models.State
		curAt *time.Time
		to    models.State
		want  bool
	}{
		{"forward", au, at(-time.Second), ca, true},
		{"forward skipping states", cr, at(-time.Second), re, true},
		{"forward, equal times", au, at(0), ca, true},
		{"forward, unknown current time", au, nil, ca, true},
		{"stale", au, at(time.Second), ca, false},
		{"stale by a millisecond", au, at(time.Millisecond), ca, false},
		{"backward", ca, at(-time.Second), au, false},
		{"same state", ca, at(-time.Second), ca, false},
		{"terminal canceled", cn, at(-time.Second), ca, false},
		{"terminal failed", fa, at(-time.Second), re, false},
		{"terminal chargeback", cb, at(-time.Second), re, false},
		{"refunded can be disputed", re, at(-time.Second), cb, true},
		{"refunded cannot be settled", re, at(-time.Second), se, false},
		{"late failure after payout", se, at(-time.Second), fa, true},
		{"captured cannot be canceled", ca, at(-time.Second), cn, false},
		{"no row is not a move", none, nil, ca, false},
		{"unknown target", au, nil, "paid", false},
		{"nothing enters created", cr, nil, cr, false},
		// The exception: a refund or a lost dispute is never stale against a
		// settlement.
		{"exception: refund older than the payout", se, at(time.Hour), re, true},
		{"exception: dispute older than the payout", se, at(time.Hour), cb, true},
		{"no exception: late failure older than the payout", se, at(time.Hour), fa, false},
		{"no exception: refund older than the capture", ca, at(time.Second), re, false},
		{"no exception: dispute older than the refund", re, at(time.Second), cb, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := guard.Allowed(c.cur, c.curAt, c.to, t0); got != c.want {
				t.Fatalf("Allowed(%q, %v, %q, t0) = %v, want %v", c.cur, c.curAt, c.to, got, c.want)
			}
			if got := models.Guard(c.cur, c.curAt, c.to, t0); got != c.want {
				t.Fatalf("models.Guard disagrees with Allowed")
			}
		})
	}
}

// designPredecessors is DESIGN section 2's table, read backwards.
var designPredecessors = map[models.State][]models.State{
	models.StateCreated:    nil,
	models.StateAuthorised: {"created"},
	models.StateCaptured:   {"created", "authorised"},
	models.StateSettled:    {"created", "authorised", "captured"},
	models.StateRefunded:   {"created", "authorised", "captured", "settled"},
	models.StateCanceled:   {"created", "authorised"},
	models.StateFailed:     {"created", "authorised", "captured", "settled"},
	models.StateChargeback: {"captured", "settled", "refunded"},
}

func TestGuardPredecessors(t *testing.T) {
	for _, s := range models.States {
		if got := guard.Predecessors(s); !reflect.DeepEqual(got, designPredecessors[s]) {
			t.Errorf("Predecessors(%s) = %v, want %v", s, got, designPredecessors[s])
		}
	}
	p := guard.Predecessors(models.StateRefunded)
	p[0] = "mutated"
	if models.Predecessors(models.StateRefunded)[0] != models.StateCreated {
		t.Fatal("Predecessors returned the shared slice")
	}
}

// noDB fails the test if a statement is sent.
type noDB struct{ t *testing.T }

func (d noDB) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	d.t.Fatal("a statement was sent")
	return nil, nil
}

func TestGuardUnknownStateIsAnError(t *testing.T) {
	for _, d := range []guard.Dialect{guard.Postgres, guard.SQLite} {
		for _, to := range []models.State{"paid", "", "Refunded"} {
			_, err := d.Advance(context.Background(), noDB{t}, "stripe", "pi_1", to, t0, 0)
			if !errors.Is(err, guard.ErrUnknownState) {
				t.Errorf("%s: Advance to %q: err = %v, want ErrUnknownState", d, to, err)
			}
		}
		if _, err := d.Advance(context.Background(), noDB{t}, "stripe", "pi_1", models.StateRefunded, time.Time{}, 0); err == nil {
			t.Errorf("%s: Advance at the zero time: no error", d)
		}
		if _, err := d.RecordSettlement(context.Background(), noDB{t}, "stripe", "pi_1", "po_1", time.Time{}); err == nil {
			t.Errorf("%s: RecordSettlement at the zero time: no error", d)
		}
		// Nothing enters created: no statement, no move.
		if moved, err := d.Advance(context.Background(), noDB{t}, "stripe", "pi_1", models.StateCreated, t0, 0); moved || err != nil {
			t.Errorf("%s: Advance to created = %v, %v", d, moved, err)
		}
	}
}

// row is the part of a payment the guard writes.
type row struct {
	State          string
	At             *time.Time
	AmountRefunded int64
	SettledAt      *time.Time
	PayoutID       *string
}

func (r row) String() string {
	f := func(t *time.Time) string {
		if t == nil {
			return "nil"
		}
		if d := t.Sub(t0); d < 0 {
			return "t0" + d.String()
		}
		return "t0+" + t.Sub(t0).String()
	}
	p := "nil"
	if r.PayoutID != nil {
		p = *r.PayoutID
	}
	return fmt.Sprintf("{%s at=%s refunded=%d settled=%s payout=%s}", r.State, f(r.At), r.AmountRefunded, f(r.SettledAt), p)
}

func same(a, b row) bool {
	eqT := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	eqS := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.State == b.State && eqT(a.At, b.At) && a.AmountRefunded == b.AmountRefunded && eqT(a.SettledAt, b.SettledAt) && eqS(a.PayoutID, b.PayoutID)
}

func insert(t *testing.T, tx *gorm.DB, id string, r row) {
	t.Helper()
	var a, s any
	if r.At != nil {
		a = r.At.UTC()
	}
	if r.SettledAt != nil {
		s = r.SettledAt.UTC()
	}
	if models.SQLite(tx) {
		norm := func(t *time.Time) any {
			if t == nil {
				return nil
			}
			return t.UTC().Format(time.RFC3339Nano)
		}
		if err := tx.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, amount_refunded, source_updated_at, settled_at, payout_id)
			VALUES ('stripe', ?, ?, 1000, 'eur', ?, strftime('%Y-%m-%d %H:%M:%f+00:00', ?), strftime('%Y-%m-%d %H:%M:%f+00:00', ?), ?)`,
			id, r.State, r.AmountRefunded, norm(r.At), norm(r.SettledAt), r.PayoutID).Error; err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := tx.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, amount_refunded, source_updated_at, settled_at, payout_id)
		VALUES ('stripe', ?, ?, 1000, 'eur', ?, ?, ?, ?)`, id, r.State, r.AmountRefunded, a, s, r.PayoutID).Error; err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, db *gorm.DB, ids []string) map[string]row {
	t.Helper()
	rows, err := db.Raw(`SELECT provider_id, state, source_updated_at, amount_refunded, settled_at, payout_id FROM payments WHERE provider = 'stripe'`).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		var a, s sql.NullTime
		var p sql.NullString
		if err := rows.Scan(&id, &r.State, &a, &r.AmountRefunded, &s, &p); err != nil {
			t.Fatal(err)
		}
		if a.Valid {
			r.At = &a.Time
		}
		if s.Valid {
			r.SettledAt = &s.Time
		}
		if p.Valid {
			r.PayoutID = &p.String
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			t.Fatalf("row %s is missing", id)
		}
	}
	return out
}

func str(s string) *string { return &s }

// A case is one row and one call of the guard.
type kase struct {
	name   string
	before row
	call   func(ctx context.Context, d guarder, db guard.Execer, id string) (bool, error)
	fn     func(db *gorm.DB, id string) (bool, error) // the SQL function's form
	want   row                                        // the row the rule leaves
}

func fnCall(db *gorm.DB, q string, args ...any) (bool, error) {
	var moved bool
	err := db.Raw(q, args...).Row().Scan(&moved)
	return moved, err
}

// cases enumerates every state, current time (unknown, older, equal, newer)
// and refund of a row against every target, and the refund and settlement
// calls likewise, with what the rule (Allowed) says the row becomes.
func cases() []kase {
	var out []kase
	times := []*time.Time{nil, at(-time.Second), at(0), at(time.Millisecond), at(time.Second)}
	for _, cur := range models.States {
		for _, curAt := range times {
			for _, to := range models.States {
				for _, curRefund := range []int64{0, 500} {
					for _, refund := range []int64{0, 300, 700} {
						before := row{State: string(cur), At: curAt, AmountRefunded: curRefund}
						want := before
						if guard.Allowed(cur, curAt, to, t0) {
							want.State, want.At = string(to), at(0)
							if to != models.StateCanceled && refund > want.AmountRefunded {
								want.AmountRefunded = refund
							}
						}
						out = append(out, kase{
							name:   fmt.Sprintf("advance %v to %s refund %d", before, to, refund),
							before: before,
							call: func(ctx context.Context, d guarder, db guard.Execer, id string) (bool, error) {
								return d.Advance(ctx, db, "stripe", id, to, t0, refund)
							},
							fn: func(db *gorm.DB, id string) (bool, error) {
								return fnCall(db, `SELECT reconciler_advance('stripe', ?, ?, ?, ?)`, id, string(to), t0, refund)
							},
							want: want,
						})
					}
				}
			}
		}
		for _, curRefund := range []int64{0, 500, 1000} {
			for _, amount := range []int64{0, 500, 700, 1000} {
				before := row{State: string(cur), At: at(0), AmountRefunded: curRefund}
				want := before
				if curRefund < amount && cur != models.StateCanceled {
					want.AmountRefunded = amount
				}
				out = append(out, kase{
					name:   fmt.Sprintf("raise refund %v to %d", before, amount),
					before: before,
					call: func(ctx context.Context, d guarder, db guard.Execer, id string) (bool, error) {
						return d.RaiseRefund(ctx, db, "stripe", id, amount)
					},
					fn: func(db *gorm.DB, id string) (bool, error) {
						return fnCall(db, `SELECT reconciler_raise_refund('stripe', ?, ?)`, id, amount)
					},
					want: want,
				})
			}
		}
		for _, settled := range []*time.Time{nil, at(-time.Second), at(0), at(time.Second)} {
			for _, payout := range []*string{nil, str("po_1"), str("po_2")} {
				for _, fact := range []string{"po_1", ""} {
					before := row{State: string(cur), At: at(time.Hour), AmountRefunded: 100, SettledAt: settled, PayoutID: payout}
					want := before
					if settled == nil || fact != "" && (payout == nil || *payout != fact) && !settled.After(t0) {
						want.SettledAt = at(0)
						if fact != "" {
							want.PayoutID = str(fact)
						}
					}
					out = append(out, kase{
						name:   fmt.Sprintf("record settlement %q at t0 on %v", fact, before),
						before: before,
						call: func(ctx context.Context, d guarder, db guard.Execer, id string) (bool, error) {
							return d.RecordSettlement(ctx, db, "stripe", id, fact, t0)
						},
						fn: func(db *gorm.DB, id string) (bool, error) {
							return fnCall(db, `SELECT reconciler_record_settlement('stripe', ?, ?, ?)`, id, fact, t0)
						},
						want: want,
					})
				}
			}
		}
	}
	return out
}

// runCases applies every case to its own row, through the package in
// dialect d and, when withFunctions, through the SQL functions on a twin
// row, and requires both to leave the row the rule says and to report a
// move exactly when the row changed.
// guarder is the guard's three statements: a Dialect's (the contract's
// names) or a Guard's (an application schema's).
type guarder interface {
	Advance(ctx context.Context, db guard.Execer, provider, providerID string, to models.State, at time.Time, amountRefunded int64) (bool, error)
	RaiseRefund(ctx context.Context, db guard.Execer, provider, providerID string, amount int64) (bool, error)
	RecordSettlement(ctx context.Context, db guard.Execer, provider, providerID, payoutID string, at time.Time) (bool, error)
}

func runCases(t *testing.T, db *gorm.DB, d guarder, withFunctions bool) {
	ctx := context.Background()
	cs := cases()
	var ids []string
	if err := db.Transaction(func(tx *gorm.DB) error {
		for i, c := range cs {
			insert(t, tx, fmt.Sprintf("go-%d", i), c.before)
			ids = append(ids, fmt.Sprintf("go-%d", i))
			if withFunctions {
				insert(t, tx, fmt.Sprintf("fn-%d", i), c.before)
				ids = append(ids, fmt.Sprintf("fn-%d", i))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var err error
	movedGo := make([]bool, len(cs))
	movedFn := make([]bool, len(cs))
	if err := db.Transaction(func(tx *gorm.DB) error {
		for i, c := range cs {
			// Inside the caller's gorm transaction, as a worker would.
			if movedGo[i], err = c.call(ctx, d, tx.Statement.ConnPool, fmt.Sprintf("go-%d", i)); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if withFunctions {
				if movedFn[i], err = c.fn(tx, fmt.Sprintf("fn-%d", i)); err != nil {
					return fmt.Errorf("%s (function): %w", c.name, err)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := read(t, db, ids)
	bad := 0
	for i, c := range cs {
		g := got[fmt.Sprintf("go-%d", i)]
		if !same(g, c.want) || movedGo[i] != !same(c.before, c.want) {
			t.Errorf("%s: package (%s) left %v moved=%v, want %v", c.name, d, g, movedGo[i], c.want)
			bad++
		}
		if withFunctions {
			f := got[fmt.Sprintf("fn-%d", i)]
			if !same(f, c.want) || movedFn[i] != !same(c.before, c.want) {
				t.Errorf("%s: SQL function left %v moved=%v, want %v", c.name, f, movedFn[i], c.want)
				bad++
			}
		}
		if bad > 20 {
			t.Fatal("too many differences")
		}
	}
	t.Logf("%d cases on %T (functions too: %v)", len(cs), d, withFunctions)
}

func TestGuardPostgresFunctionsMatchPackage(t *testing.T) {
	db := pgtest.New(t)
	runCases(t, db.DB, guard.Postgres, true)
}

func TestGuardSQLiteMatchesRule(t *testing.T) {
	db := pgtest.NewSQLite(t)
	runCases(t, db.DB, guard.SQLite, false)
}

// TestGuardMappedMatchesRule is the published Go guard over an application
// schema of its own (issue 18; pgtest's mapped layout: table orders, every
// column and state renamed, a column that needs quoting): every case
// decides as on the contract's tables, on both dialects. The tests' rows
// go in and come out through contract-named views; the guard writes the
// team's table in the team's words.
func TestGuardMappedMatchesRule(t *testing.T) {
	for _, c := range []struct {
		d    guard.Dialect
		open func(testing.TB) *pgtest.DB
	}{{guard.Postgres, pgtest.NewMapped}, {guard.SQLite, pgtest.NewSQLiteMapped}} {
		t.Run(c.d.String(), func(t *testing.T) {
			db := c.open(t)
			m := models.AppSchemaOf(db.DB)
			// On PostgreSQL the guard's functions too: migrate installed them in
			// the team's names and values (models.installMappedGuard).
			runCases(t, db.DB, guard.For(c.d, m), c.d == guard.Postgres)
			var n int64
			if err := db.Raw(m.SQL(`SELECT count(*) FROM {payments} WHERE {state} IN ('captured', 'settled', 'refunded')`)).Scan(&n).Error; err != nil || n != 0 {
				t.Fatalf("the team's table holds our state names: %d rows, %v", n, err)
			}
		})
	}
}

func TestGuardPostgresPredecessorsFunction(t *testing.T) {
	db := pgtest.New(t)
	for _, s := range models.States {
		var got []string
		if err := db.Raw(`SELECT unnest(reconciler_allowed_predecessors(?))`, string(s)).Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, p := range models.Predecessors(s) {
			want = append(want, string(p))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("reconciler_allowed_predecessors(%s) = %v, models.Predecessors = %v", s, got, want)
		}
	}
	for _, q := range []string{
		`SELECT reconciler_allowed_predecessors('paid')`,
		`SELECT reconciler_advance('stripe', 'pi_1', 'paid', now())`,
		`SELECT reconciler_advance('stripe', 'pi_1', NULL, now())`,
		`SELECT reconciler_advance('stripe', 'pi_1', 'refunded', NULL)`,
	} {
		err := db.Exec(q).Error
		if err == nil {
			t.Errorf("%s: no error", q)
		} else if strings.Contains(q, "paid") && !strings.Contains(err.Error(), "unknown state") {
			t.Errorf("%s: %v, want an unknown state error", q, err)
		}
	}
	var n int
	if err := db.Raw(`SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = current_schema() AND p.proname LIKE 'reconciler\_%' AND obj_description(p.oid, 'pg_proc') IS NOT NULL`).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d documented reconciler_ functions in the schema, want 4", n)
	}
}

// The README's SQL form, as a worker sends it: the default refund, a Unix
// time.
func TestGuardPostgresReadmeForm(t *testing.T) {
	db := pgtest.New(t)
	insert(t, db.DB, "pi_1", row{State: "settled", At: at(time.Hour), AmountRefunded: 0})
	sqlDB, err := db.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	var moved bool
	if err := sqlDB.QueryRow(`SELECT reconciler_advance('stripe', $1, 'refunded', to_timestamp($2))`, "pi_1", t0.Unix()).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	r := read(t, db.DB, []string{"pi_1"})["pi_1"]
	if !moved || r.State != "refunded" || !r.At.Equal(t0) {
		t.Fatalf("moved=%v row=%v: a refund older than the payout must apply", moved, r)
	}
}
