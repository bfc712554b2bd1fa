package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/guard"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// TestGuardEquivalence is the proof of "one guard, published" (DESIGN
// section 2): the engine's batched statements (store.applySteps,
// store.raiseRefunds and store.recordSettlements) and the published guard
// (the PostgreSQL functions reconciler_advance, reconciler_raise_refund and
// reconciler_record_settlement, and package guard's SQL on both stores) are driven through the same random sequences of facts, from
// the same random rows, and must leave identical rows and report the same
// moves after every fact. Set GUARD_EQUIV_SEED to replay a failure.
func TestGuardEquivalence(t *testing.T) {
	for _, name := range []string{"postgres", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var db *pgtest.DB
			if name == "sqlite" {
				db = pgtest.NewSQLite(t)
			} else {
				db = pgtest.New(t)
			}
			seed := uint64(time.Now().UnixNano())
			if s := os.Getenv("GUARD_EQUIV_SEED"); s != "" {
				v, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					t.Fatalf("GUARD_EQUIV_SEED: %v", err)
				}
				seed = v
			}
			t.Logf("seed %d (GUARD_EQUIV_SEED=%d replays it)", seed, seed)
			equivRun(t, db.DB, seed, 400)
		})
	}
}

var equivT0 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

// equivFact is one fact: a move to To (with a refund); or, when To is
// StateNone, a raise of amount_refunded to Refund, or, when Payout is
// non-nil, the payout *Payout ("": unknown) at At.
type equivFact struct {
	To     models.State
	At     time.Time
	Refund int64
	Payout *string
}

func equivAt(t *time.Time) string {
	if t == nil {
		return "nil"
	}
	return fmt.Sprintf("t0%+.3fs", t.Sub(equivT0).Seconds())
}

func (f equivFact) String() string {
	switch {
	case f.Payout != nil:
		return fmt.Sprintf("payout %q at %s", *f.Payout, equivAt(&f.At))
	case f.To == models.StateNone:
		return fmt.Sprintf("raise refund to %d", f.Refund)
	}
	return fmt.Sprintf("%s at %s refund %d", f.To, equivAt(&f.At), f.Refund)
}

type equivRow struct {
	State          string
	At             *time.Time
	AmountRefunded int64
	SettledAt      *time.Time
	PayoutID       *string
}

func (r equivRow) String() string {
	p := "nil"
	if r.PayoutID != nil {
		p = *r.PayoutID
	}
	return fmt.Sprintf("{%s at=%s refunded=%d settled=%s payout=%s}", r.State, equivAt(r.At), r.AmountRefunded, equivAt(r.SettledAt), p)
}

var equivPayouts = []string{"po_1", "po_2", "po_3", ""}

// equivTime is a time within a few seconds of t0, often on a whole second
// (so equal times are common, as with Stripe), sometimes in a zone other
// than UTC.
func equivTime(rng *rand.Rand) time.Time {
	t := equivT0.Add(time.Duration(rng.IntN(7)-3) * time.Second)
	if rng.IntN(2) == 0 {
		t = t.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
	}
	if rng.IntN(4) == 0 {
		t = t.In(time.FixedZone("UTC+2", 2*3600))
	}
	return t
}

func equivRefund(rng *rand.Rand) int64 { return int64(rng.IntN(11)) * 100 }

type equivSeq struct {
	start equivRow
	facts []equivFact
}

func equivSeqs(seed uint64, n int) []equivSeq {
	out := make([]equivSeq, n)
	for i := range out {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		r := equivRow{State: string(models.States[rng.IntN(len(models.States))]), AmountRefunded: equivRefund(rng)}
		if rng.IntN(5) != 0 {
			at := equivTime(rng)
			r.At = &at
		}
		if rng.IntN(2) == 0 {
			at := equivTime(rng)
			r.SettledAt = &at
		}
		if k := rng.IntN(3); k < 2 {
			r.PayoutID = &equivPayouts[k]
		}
		out[i].start = r
		for range 1 + rng.IntN(8) {
			f := equivFact{At: equivTime(rng), Refund: equivRefund(rng)}
			switch k := rng.IntN(10); {
			case k < 7:
				f.To = models.States[rng.IntN(len(models.States))]
			case k < 8:
				f.Payout = &equivPayouts[rng.IntN(len(equivPayouts))]
			}
			out[i].facts = append(out[i].facts, f)
		}
	}
	return out
}

// equivRun applies n sequences, one fact of each per round: the engine's
// copy of each row in one batch per round (as the engine applies one step
// per payment per batch), the published guard's copies one call each.
func equivRun(t *testing.T, db *gorm.DB, seed uint64, n int) {
	ctx := context.Background()
	sqlite := models.SQLite(db)
	seqs := equivSeqs(seed, n)
	// Copies: e the engine, g package guard; on PostgreSQL also f the
	// SQL functions.
	copies := []string{"e", "g"}
	if !sqlite {
		copies = append(copies, "f")
	}
	id := func(c string, i int) string { return fmt.Sprintf("%s-%d", c, i) }
	if err := db.Transaction(func(tx *gorm.DB) error {
		for i, s := range seqs {
			for _, c := range copies {
				if err := equivInsert(tx, id(c, i), s.start); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g := guard.Postgres
	if sqlite {
		g = guard.SQLite
	}
	st := dbopen.Store(db, nil)
	facts, moves := 0, 0
	for round := 0; ; round++ {
		var steps []store.Step
		var refunds []store.Refund
		var settles []store.Settlement
		for i, s := range seqs {
			if round >= len(s.facts) {
				continue
			}
			f := s.facts[round]
			if f.Payout != nil {
				settles = append(settles, store.Settlement{ProviderID: id("e", i), At: f.At, PayoutID: *f.Payout})
				continue
			}
			if f.To == models.StateNone {
				refunds = append(refunds, store.Refund{ProviderID: id("e", i), Amount: f.Refund})
				continue
			}
			refund := f.Refund
			if f.To == models.StateCanceled {
				refund = 0 // decide never carries a refund on a cancel
			}
			steps = append(steps, store.Step{ProviderID: id("e", i), To: f.To, At: f.At, Refund: refund})
		}
		if len(steps)+len(refunds)+len(settles) == 0 {
			break
		}
		movedGo := map[int]bool{}
		movedFn := map[int]bool{}
		movedEngine := map[string]bool{}
		if err := st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			moved, err := tx.ApplySteps(ctx, "stripe", steps)
			for _, r := range moved {
				movedEngine[r.ProviderID] = true
			}
			if err != nil {
				return err
			}
			if _, err := tx.RaiseRefunds(ctx, "stripe", refunds); err != nil {
				return err
			}
			_, err = tx.RecordSettlements(ctx, "stripe", settles)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		err := db.Transaction(func(tx *gorm.DB) error {
			var err error
			conn := tx.Statement.ConnPool
			for i, s := range seqs {
				if round >= len(s.facts) {
					continue
				}
				f := s.facts[round]
				if f.Payout != nil {
					if _, err := g.RecordSettlement(ctx, conn, "stripe", id("g", i), *f.Payout, f.At); err != nil {
						return err
					}
					if !sqlite {
						if err := tx.Exec(`SELECT reconciler_record_settlement('stripe', ?, ?, ?)`, id("f", i), *f.Payout, f.At).Error; err != nil {
							return err
						}
					}
					continue
				}
				if f.To == models.StateNone {
					if _, err := g.RaiseRefund(ctx, conn, "stripe", id("g", i), f.Refund); err != nil {
						return err
					}
					if !sqlite {
						if err := tx.Exec(`SELECT reconciler_raise_refund('stripe', ?, ?)`, id("f", i), f.Refund).Error; err != nil {
							return err
						}
					}
					continue
				}
				if movedGo[i], err = g.Advance(ctx, conn, "stripe", id("g", i), f.To, f.At, f.Refund); err != nil {
					return err
				}
				if !sqlite {
					var m bool
					if err := tx.Raw(`SELECT reconciler_advance('stripe', ?, ?, ?, ?)`, id("f", i), string(f.To), f.At, f.Refund).Row().Scan(&m); err != nil {
						return err
					}
					movedFn[i] = m
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("seed %d round %d: %v", seed, round, err)
		}
		rows := equivRead(t, db)
		bad := 0
		for i, s := range seqs {
			if round >= len(s.facts) {
				continue
			}
			facts++
			f := s.facts[round]
			e := rows[id("e", i)]
			var diffs []string
			for _, c := range copies[1:] {
				if r := rows[id(c, i)]; r != e {
					diffs = append(diffs, fmt.Sprintf("%s (%s) %q", c, map[string]string{"g": "package guard", "f": "SQL function"}[c], r))
				}
			}
			if f.To != models.StateNone && f.Payout == nil {
				if movedEngine[id("e", i)] {
					moves++
				}
				if movedGo[i] != movedEngine[id("e", i)] {
					diffs = append(diffs, fmt.Sprintf("package guard moved=%v, engine moved=%v", movedGo[i], movedEngine[id("e", i)]))
				}
				if !sqlite && movedFn[i] != movedEngine[id("e", i)] {
					diffs = append(diffs, fmt.Sprintf("SQL function moved=%v, engine moved=%v", movedFn[i], movedEngine[id("e", i)]))
				}
			}
			if len(diffs) > 0 {
				bad++
				var hist []string
				for _, h := range s.facts[:round+1] {
					hist = append(hist, h.String())
				}
				t.Errorf("seed %d sequence %d: from %v after [%s]: engine left %q; %s",
					seed, i, s.start, strings.Join(hist, "; "), e, strings.Join(diffs, "; "))
				if bad >= 10 {
					t.FailNow()
				}
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("%d sequences, %d facts, %d moves: engine and published guard agree", n, facts, moves)
}

func equivInsert(tx *gorm.DB, id string, r equivRow) error {
	norm := func(t *time.Time) any {
		switch {
		case t == nil:
			return nil
		case models.SQLite(tx):
			return t.UTC().Format(time.RFC3339Nano)
		}
		return t.UTC()
	}
	q := `INSERT INTO payments (provider, provider_id, state, amount, currency, amount_refunded, source_updated_at, settled_at, payout_id)
		VALUES ('stripe', ?, ?, 1000, 'eur', ?, ?, ?, ?)`
	if models.SQLite(tx) {
		q = `INSERT INTO payments (provider, provider_id, state, amount, currency, amount_refunded, source_updated_at, settled_at, payout_id)
		VALUES ('stripe', ?, ?, 1000, 'eur', ?, strftime('%Y-%m-%d %H:%M:%f+00:00', ?), strftime('%Y-%m-%d %H:%M:%f+00:00', ?), ?)`
	}
	return tx.Exec(q, id, r.State, r.AmountRefunded, norm(r.At), norm(r.SettledAt), r.PayoutID).Error
}

// equivRead reads every row, the times as the stored text, so that the
// stores' own representations must agree too (on SQLite, the normalised
// text).
func equivRead(t *testing.T, db *gorm.DB) map[string]string {
	t.Helper()
	rows, err := db.Raw(`SELECT provider_id, state, CAST(source_updated_at AS TEXT), amount_refunded, CAST(settled_at AS TEXT), payout_id
		FROM payments WHERE provider = 'stripe'`).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, state string
		var at, settled, payout sql.NullString
		var refunded int64
		if err := rows.Scan(&id, &state, &at, &refunded, &settled, &payout); err != nil {
			t.Fatal(err)
		}
		str := func(s sql.NullString) string {
			if !s.Valid {
				return "NULL"
			}
			return strconv.Quote(s.String)
		}
		out[id] = fmt.Sprintf("%s at=%s refunded=%d settled=%s payout=%s", state, str(at), refunded, str(settled), str(payout))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
