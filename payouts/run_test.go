package payouts_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/payouts"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

var update = flag.Bool("update", false, "rewrite the golden files and docs/examples/payouts.csv")

// stores are the two databases every read must work on.
var stores = map[string]func(testing.TB) *pgtest.DB{"postgres": pgtest.New, "sqlite": pgtest.NewSQLite}

func seedRow(t *testing.T, db *pgtest.DB, provider, id string, amount int64, payout string, captured ...int64) {
	t.Helper()
	p := models.Payment{Provider: provider, ProviderID: id, State: models.StateSettled, Amount: amount, Currency: "gbp"}
	if payout != "" {
		p.PayoutID = &payout
	}
	if len(captured) > 0 {
		p.AmountCaptured = &captured[0]
	}
	require.NoError(t, db.Create(&p).Error)
}

func TestGormRows(t *testing.T) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			ctx := context.Background()
			seedRow(t, db, "stripe", "pi_a", 1000, "po_1")
			seedRow(t, db, "stripe", "pi_b", 500, "po_1", 300)
			seedRow(t, db, "stripe", "pi_c", 700, "po_2")
			seedRow(t, db, "stripe", "pi_d", 900, "")
			seedRow(t, db, "gocardless", "PM1", 100, "po_1") // another provider's
			rows := payouts.GormRows{DB: db.DB}
			got, err := rows.Naming(ctx, "stripe", "po_1")
			require.NoError(t, err)
			require.Equal(t, []payouts.Row{
				{ProviderID: "pi_a", Amount: 1000, Currency: "gbp", PayoutID: "po_1"},
				{ProviderID: "pi_b", Amount: 500, AmountCaptured: 300, Currency: "gbp", PayoutID: "po_1"},
			}, got)
			got, err = rows.ByIDs(ctx, "stripe", []string{"pi_c", "pi_d", "pi_none"})
			require.NoError(t, err)
			require.ElementsMatch(t, []payouts.Row{
				{ProviderID: "pi_c", Amount: 700, Currency: "gbp", PayoutID: "po_2"},
				{ProviderID: "pi_d", Amount: 900, Currency: "gbp"},
			}, got)
			got, err = rows.ByIDs(ctx, "stripe", nil)
			require.NoError(t, err)
			require.Empty(t, got)
		})
	}
}

// staticSource serves fixed payouts, and counts what Rows was asked.
type staticSource struct {
	name string
	pos  []payouts.Payout
	err  error
}

func (s staticSource) Name() string { return s.name }

func (s staticSource) ListPayouts(_ context.Context, _ payouts.Params, fn func(payouts.Payout) error) error {
	for _, po := range s.pos {
		if err := fn(po); err != nil {
			return err
		}
	}
	return s.err
}

type countingRows struct {
	payouts.Rows
	byIDs []int
}

func (c *countingRows) ByIDs(ctx context.Context, provider string, ids []string) ([]payouts.Row, error) {
	c.byIDs = append(c.byIDs, len(ids))
	return c.Rows.ByIDs(ctx, provider, ids)
}

// A payout of 1,200 payments reads its rows in queries of 500 ids, on both
// stores, and only those its naming query did not already return.
func TestRunReadsRowsInChunks(t *testing.T) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			po := payouts.Payout{ID: "po_big", Status: "paid", Currency: "gbp", Paid: true, Scale: 1, Listing: payouts.ListingComplete,
				Created: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
			var batch []models.Payment
			for i := range 1200 {
				id := fmt.Sprintf("pi_%04d", i)
				po.Lines = append(po.Lines, payouts.Line{Kind: payouts.KindCharge, Amount: 100, Net: 100, PaymentID: id, PaymentAmount: 100})
				po.Amount += 100
				p := models.Payment{Provider: "stripe", ProviderID: id, State: models.StateSettled, Amount: 100, Currency: "gbp"}
				if i >= 100 { // the first 100 rows name no payout
					s := "po_big"
					p.PayoutID = &s
				}
				batch = append(batch, p)
			}
			require.NoError(t, db.CreateInBatches(batch, 200).Error)
			rows := &countingRows{Rows: payouts.GormRows{DB: db.DB}}
			rep, err := payouts.Run(context.Background(), payouts.Options{Source: staticSource{name: "stripe", pos: []payouts.Payout{po}}, Rows: rows,
				Since: po.Created, Until: po.Created.Add(time.Hour)})
			require.NoError(t, err)
			require.Equal(t, []int{100}, rows.byIDs, "only the rows not naming it are read by id")
			r := rep.Results[0]
			require.True(t, r.Mismatch)
			require.Equal(t, 100, r.Counts[payouts.PaidUnrecorded])
			require.Equal(t, 1100, r.RowsNaming)

			po.Lines = append(po.Lines, payouts.Line{Kind: payouts.KindCharge, Amount: 1, Net: 1, PaymentID: "pi_x", PaymentAmount: 1})
			for i := range 1100 {
				po.Lines[i+100].PaymentID = fmt.Sprintf("pi_other_%04d", i)
			}
			rows.byIDs = nil
			_, err = payouts.Run(context.Background(), payouts.Options{Source: staticSource{name: "stripe", pos: []payouts.Payout{po}}, Rows: rows,
				Since: po.Created, Until: po.Created.Add(time.Hour)})
			require.NoError(t, err)
			require.Equal(t, []int{500, 500, 201}, rows.byIDs)
		})
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	db := pgtest.NewSQLite(t)
	rows := payouts.GormRows{DB: db.DB}
	since := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	_, err := payouts.Run(ctx, payouts.Options{Rows: rows, Since: since, Until: since.Add(time.Hour)})
	require.ErrorContains(t, err, "Source is nil")
	_, err = payouts.Run(ctx, payouts.Options{Source: staticSource{name: "stripe"}, Since: since, Until: since.Add(time.Hour)})
	require.ErrorContains(t, err, "Rows is nil")
	_, err = payouts.Run(ctx, payouts.Options{Source: staticSource{name: "stripe"}, Rows: rows, Since: since, Until: since})
	require.ErrorContains(t, err, "is empty")
	boom := errors.New("boom")
	_, err = payouts.Run(ctx, payouts.Options{Source: staticSource{name: "stripe", err: boom}, Rows: rows, Since: since, Until: since.Add(time.Hour)})
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "list stripe payouts: boom")
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	require.NoError(t, sqlDB.Close())
	_, err = payouts.Run(ctx, payouts.Options{Source: staticSource{name: "stripe", pos: []payouts.Payout{{ID: "po_1"}}}, Rows: rows,
		Since: since, Until: since.Add(time.Hour)})
	require.ErrorContains(t, err, "read the rows naming payout po_1")
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./payouts -run %s -update", t.Name())
	require.Equal(t, string(want), string(got), "%s differs: run go test ./payouts -run %s -update and review the diff", path, t.Name())
}

// goldenReport is every outcome, and a provider's text that tries to drive
// a terminal and a spreadsheet.
func goldenReport() payouts.Report {
	ok, local := stripePayout(), agreeing()
	wrong := stripePayout()
	wrong.ID, wrong.Amount = "po_2", 1311
	gone := payouts.Payout{ID: "=HYPERLINK(\"x\")\x1b[31m", Status: "paid", Amount: 100, Currency: "gbp", Created: created, Paid: true,
		Listing: payouts.ListingUnavailable, Note: "GoCardless serves payout items only for payouts created in the last six months (410 Gone)"}
	rep := payouts.Report{Provider: "stripe", Since: created.Add(-24 * time.Hour), Until: created.Add(24 * time.Hour)}
	for _, r := range []payouts.Result{
		payouts.Check("stripe", "", ok, local),
		payouts.Check("stripe", "", wrong, payouts.Local{Paid: map[string]payouts.Row{}}),
		payouts.Check("stripe", "", gone, payouts.Local{}),
	} {
		rep.Results = append(rep.Results, r)
		if r.Mismatch {
			rep.Mismatches++
		}
		if r.Outcome == payouts.OutcomeItemsUnavailable {
			rep.Unavailable++
		}
	}
	rep.Payouts = len(rep.Results)
	payouts.Sort(rep.Results)
	return rep
}

func TestOutputGolden(t *testing.T) {
	for _, format := range payouts.Formats {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, payouts.Write(&buf, format, goldenReport()))
			golden(t, filepath.Join("testdata", "report."+format+".golden"), buf.Bytes())
			require.NotContains(t, buf.String(), "\x1b", "no escape code reaches the output")
		})
	}
	require.Error(t, payouts.Write(&bytes.Buffer{}, "xml", goldenReport()))
	require.False(t, payouts.ValidFormat("html"))
}

// The failing writer gets all or nothing.
type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) { f.n++; return 0, errors.New("disk full") }

func TestWriteOnce(t *testing.T) {
	for _, format := range payouts.Formats {
		w := &failWriter{}
		require.ErrorContains(t, payouts.Write(w, format, goldenReport()), "disk full")
		require.Equal(t, 1, w.n, format)
	}
}

// TestExampleCSV produces docs/examples/payouts.csv (under -update) from the
// scenario stories of both providers, reconciled by the real engine over
// HTTP into the embedded store, and checks that the file still is what the
// code writes. Regenerate it with:
//
//	go test ./payouts -run TestExampleCSV -update
func TestExampleCSV(t *testing.T) {
	ctx := context.Background()
	var reps []payouts.Report

	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	sfake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 11})
	surl := sfake.Start()
	t.Cleanup(sfake.Close)
	ss := scenario.NewStripePayouts(sfake.Account(""), now)
	sp, err := stripe.New(stripe.Config{APIKey: "sk_test_example", BaseURL: surl})
	require.NoError(t, err)

	gnow := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	gfake := gcfake.New(gcfake.Options{Now: func() time.Time { return gnow }, Seed: 11})
	gurl := gfake.Start()
	t.Cleanup(gfake.Close)
	gs := scenario.NewGoCardlessPayouts(gfake, gnow)
	gp, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_example", BaseURL: gurl})
	require.NoError(t, err)

	db := pgtest.NewSQLite(t)
	for _, c := range []struct {
		p   reconcile.Provider
		s   *scenario.Payouts
		now time.Time
	}{{sp, ss, now}, {gp, gs, gnow}} {
		res, err := reconcile.Run(ctx, reconcile.Options{DB: db.DB, Provider: c.p, Since: c.s.Since.Add(-10 * 24 * time.Hour), Until: c.now,
			Now: func() time.Time { return c.now }, StuckLimit: -1})
		require.NoError(t, err)
		require.Equal(t, models.RunSucceeded, res.Run.Status)
		require.NoError(t, c.s.MisnameRow(ctx, db.DB))
		rep, err := payouts.Run(ctx, payouts.Options{Source: c.p.(payouts.Source), Rows: payouts.GormRows{DB: db.DB}, Since: c.s.Since, Until: c.s.Until})
		require.NoError(t, err)
		require.Equal(t, 2, rep.Mismatches)
		reps = append(reps, rep)
	}
	var buf bytes.Buffer
	require.NoError(t, payouts.WriteCSV(&buf, reps...))
	golden(t, filepath.Join("..", "docs", "examples", "payouts.csv"), buf.Bytes())
}
