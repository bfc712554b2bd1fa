package verify_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/verify"
)

// hypergeometric0 is P(0 wrong in n draws | k wrong of N) by the plain
// product, the reference UpperBound is checked against.
func hypergeometric0(n, N, k int) float64 {
	p := 1.0
	for i := range n {
		p *= float64(N-k-i) / float64(N-i)
	}
	return max(p, 0)
}

func TestVerifyUpperBoundKnownValues(t *testing.T) {
	t.Parallel()
	// n = 1000 from a population much larger: 1 - 0.05^(1/1000), 0.299%
	// (the rule of three says about 3/n).
	b, _, ok := verify.UpperBound(1000, 1_000_000_000)
	require.True(t, ok)
	require.InDelta(t, 1-math.Pow(0.05, 1.0/1000), b, 1e-6)
	require.InDelta(t, 0.00299, b, 0.000005)
	require.Equal(t, "fewer than 0.3%", verify.Percent(b))

	// The whole population checked: nothing can be wrong.
	for _, n := range []int{1, 7, 48_213} {
		b, k, ok := verify.UpperBound(n, n)
		require.True(t, ok)
		require.Zero(t, b, n)
		require.Zero(t, k, n)
	}
	// More asked than there are: the same.
	b, _, _ = verify.UpperBound(500, 20)
	require.Zero(t, b)
	// One draw of 20: only 19 or more wrong makes 0 seen less likely than 5%.
	b, k, _ := verify.UpperBound(1, 20)
	require.Equal(t, 19, k)
	require.InDelta(t, 0.95, b, 1e-12)
	// 1,000 of the example's 48,213: a little below the rule of three (a
	// finite population, drawn without replacement).
	b, k, _ = verify.UpperBound(1000, 48_213)
	require.Less(t, b, 1-math.Pow(0.05, 1.0/1000))
	require.Greater(t, b, 0.0028)
	require.Equal(t, "fewer than 0.3%", verify.Percent(b))
	require.Equal(t, 142, k, "math.comb in Python: the largest K with C(N-K, n)/C(N, n) >= 0.05")
	require.GreaterOrEqual(t, hypergeometric0(1000, 48_213, k), 0.05, "K is still consistent with seeing none")
	require.Less(t, hypergeometric0(1000, 48_213, k+1), 0.05, "K+1 is not")
	_, _, ok = verify.UpperBound(0, 10)
	require.False(t, ok, "no sample, no bound")

	// Against the plain product over a grid: K is the largest count with
	// P(0 of n) >= 5%.
	for _, N := range []int{1, 2, 10, 37, 100, 1000} {
		for _, n := range []int{1, 2, 3, 5, 10, 30, 99, 100, 1000} {
			if n > N {
				continue
			}
			_, k, ok := verify.UpperBound(n, N)
			require.True(t, ok)
			require.GreaterOrEqual(t, hypergeometric0(n, N, k), 0.05, "n=%d N=%d k=%d", n, N, k)
			if k+1 <= N {
				require.Less(t, hypergeometric0(n, N, k+1), 0.05, "n=%d N=%d k+1=%d", n, N, k+1)
			}
		}
	}
}

func TestVerifyStatementAndPercent(t *testing.T) {
	t.Parallel()
	b, _, _ := verify.UpperBound(1000, 48_213)
	r := verify.Report{Population: 48_213, Checked: 1000, Sample: 1000, UpperBound: &b}
	require.Equal(t, "0 of 1,000 sampled differ: fewer than 0.3% of the 48,213 payments of the window are wrong (95% confidence)", verify.Statement(r))
	r = verify.Report{All: true, Population: 48_213, Checked: 48_213}
	require.Equal(t, "0 of 48,213 payments differ: none of the 48,213 payments of the window is wrong", verify.Statement(r))
	r = verify.Report{Population: 48_213, Checked: 1000, Sample: 1000, Differing: 3, Explained: 2}
	require.Equal(t, "3 of 1,000 sampled differ (2 explained by a drift item, 1 unexplained) among the 48,213 payments of the window", verify.Statement(r))
	require.Equal(t, "no payments in the window: nothing to check", verify.Statement(verify.Report{}))

	require.Equal(t, "at most 25%", verify.Percent(0.25))
	require.Equal(t, "at most 10%", verify.Percent(6.0/60), "no float noise")
	require.Equal(t, "fewer than 26%", verify.Percent(0.2501))
	require.Equal(t, "fewer than 0.0031%", verify.Percent(0.0000304))
	require.Equal(t, "at most 0%", verify.Percent(0))
	require.Equal(t, "1,000,000", verify.Count(1_000_000))
	require.Equal(t, "999", verify.Count(999))
}

// runs reads the runs and drift items of the schema.
func runsAndItems(t *testing.T, db *pgtest.DB) ([]models.Run, []models.DriftItem) {
	t.Helper()
	var runs []models.Run
	require.NoError(t, db.Order("id").Find(&runs).Error)
	var items []models.DriftItem
	require.NoError(t, db.Order("id").Find(&items).Error)
	return runs, items
}

// TestVerifyRecordsADryRunAndItsItems: with Record, verify leaves one dry
// run and an item per unexplained difference, and writes no payment; a
// second verify is not explained by the first one's items.
func TestVerifyRecordsADryRunAndItsItems(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	wrong := w.acct.CreatePayment(5000, "gbp", false, w.ago(3*time.Hour))
	w.acct.Capture(wrong, w.ago(3*time.Hour))
	seed(t, w.db, stripe.Name, wrong, models.StateRefunded, 5000, 0)
	right := w.acct.CreatePayment(700, "gbp", false, w.ago(3*time.Hour))
	w.acct.Capture(right, w.ago(3*time.Hour))
	seed(t, w.db, stripe.Name, right, models.StateCaptured, 700, 0)
	explained := w.acct.CreatePayment(900, "gbp", false, w.ago(3*time.Hour))
	w.acct.Capture(explained, w.ago(3*time.Hour))
	seed(t, w.db, stripe.Name, explained, models.StateCaptured, 800, 0)
	driftItem(t, w.db, stripe.Name, explained, models.KindMismatch, models.ActionReported)
	var before []models.Payment
	require.NoError(t, w.db.Order("id").Find(&before).Error)
	runsBefore, itemsBefore := runsAndItems(t, w.db)

	rep := w.run(t, verify.Options{All: true, Record: true, Source: w.p})
	require.NotZero(t, rep.RunID)
	require.Equal(t, 3, rep.Checked)
	require.Equal(t, 2, rep.Differing)
	require.Equal(t, 1, rep.Explained)
	require.Nil(t, rep.UpperBound, "--all states counts, not a bound")
	require.Nil(t, rep.Seed)

	runs, items := runsAndItems(t, w.db)
	require.Len(t, runs, len(runsBefore)+1, "one run recorded")
	run := runs[len(runs)-1]
	require.Equal(t, rep.RunID, run.ID)
	require.Equal(t, models.RunSucceeded, run.Status)
	require.Equal(t, models.TriggerManual, run.Trigger)
	require.True(t, run.DryRun)
	require.Equal(t, "test", run.Mode)
	require.True(t, run.WindowStart.Equal(w.ago(verify.DefaultLookback)), "%s", run.WindowStart)
	require.True(t, run.WindowEnd.Equal(w.now))
	require.NotNil(t, run.FinishedAt)
	require.Nil(t, run.Error)
	require.EqualValues(t, 3, run.Examined)
	require.EqualValues(t, 1, run.Refused, "refused: the unexplained payments")
	require.EqualValues(t, 0, run.Repaired)
	require.Positive(t, run.APIRequests)
	var notes map[string]any
	require.NoError(t, json.Unmarshal(run.Notes, &notes))
	require.Equal(t, "verify", notes["command"])
	require.EqualValues(t, 3, notes["population"])
	require.EqualValues(t, 1, notes["unexplained"])

	mine := items[len(itemsBefore):]
	require.Len(t, mine, 1, "one item per unexplained difference: %+v", mine)
	it := mine[0]
	require.Equal(t, run.ID, it.RunID)
	require.Equal(t, wrong, it.ProviderID)
	require.Equal(t, models.KindConflict, it.Kind)
	require.Equal(t, models.ActionReported, it.Action)
	require.Equal(t, "refunded", *it.LocalState)
	require.Equal(t, "captured (succeeded)", *it.ProviderState)
	var detail map[string]any
	require.NoError(t, json.Unmarshal(it.Detail, &detail))
	require.Equal(t, "state", detail["field"])
	require.Equal(t, "refunded", detail["local"])
	require.Equal(t, "captured (succeeded)", detail["provider"])
	require.Equal(t, "verify", detail["found_by"])
	require.Contains(t, detail["explanation"], "Found by verify")

	var after []models.Payment
	require.NoError(t, w.db.Order("id").Find(&after).Error)
	require.Equal(t, before, after, "no payment written")
	var events int64
	require.NoError(t, w.db.Model(&models.WebhookEvent{}).Count(&events).Error)
	require.Zero(t, events, "no webhook event written")

	// The first verify's item explains nothing: the second finds the same.
	rep = w.run(t, verify.Options{All: true, Record: true, Source: w.p})
	require.Equal(t, 1, rep.Differing-rep.Explained)
	require.Equal(t, []verify.Difference{{ProviderID: wrong, Field: verify.FieldState, Local: "refunded", Provider: "captured (succeeded)"}}, rep.Unexplained)

	// Without Record nothing is written at all.
	runsNow, itemsNow := runsAndItems(t, w.db)
	w.run(t, verify.Options{All: true})
	runsAfter, itemsAfter := runsAndItems(t, w.db)
	require.Len(t, runsAfter, len(runsNow))
	require.Len(t, itemsAfter, len(itemsNow))
}

// TestVerifyRecordsAFailedRun: the provider failing mid-check leaves the
// run failed with its error.
func TestVerifyRecordsAFailedRun(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	pi := w.acct.CreatePayment(5000, "gbp", false, w.ago(3*time.Hour))
	w.acct.Capture(pi, w.ago(3*time.Hour))
	seed(t, w.db, stripe.Name, pi, models.StateCaptured, 5000, 0)
	w.fake.SetFailureRate(http.StatusInternalServerError, 1)
	rep, err := verify.Run(context.Background(), verify.Options{DB: w.db.DB, Provider: stripe.Name, Reader: w.p.Verifier(), All: true,
		Record: true, Source: w.p, Now: func() time.Time { return w.now }})
	require.Error(t, err)
	runs, _ := runsAndItems(t, w.db)
	require.Len(t, runs, 1)
	require.Equal(t, rep.RunID, runs[0].ID)
	require.Equal(t, models.RunFailed, runs[0].Status)
	require.NotNil(t, runs[0].Error)
	require.Contains(t, *runs[0].Error, "500")
	require.True(t, runs[0].DryRun)
}

// TestVerifySeedRepeatsTheSample: the same seed checks the same payments,
// the seed is in the report, and a sample that found nothing carries its
// bound.
func TestVerifySeedRepeatsTheSample(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	for i := range 40 {
		pi := w.acct.CreatePayment(int64(100+i), "gbp", false, w.ago(3*time.Hour))
		w.acct.Capture(pi, w.ago(3*time.Hour))
		seed(t, w.db, stripe.Name, pi, models.StateCaptured, int64(100+i), 0)
	}
	draw := func(s *uint64) (verify.Report, []string) {
		rec := &recorder{r: w.p.Verifier()}
		rep := w.run(t, verify.Options{Sample: 8, Seed: s, Reader: rec, PageSize: 3})
		return rep, rec.ids()
	}
	s := uint64(123456)
	rep, ids := draw(&s)
	require.Equal(t, s, *rep.Seed)
	require.Len(t, distinct(ids), 8)
	_, again := draw(&s)
	require.Equal(t, ids, again, "--seed repeats the draw exactly")
	other := s + 1
	_, diff := draw(&other)
	require.NotEqual(t, ids, diff)

	rep, ids = draw(nil)
	require.NotNil(t, rep.Seed, "a drawn seed is reported")
	_, again = draw(rep.Seed)
	require.Equal(t, ids, again, "the reported seed repeats it")

	require.Equal(t, 40, rep.Population)
	require.NotNil(t, rep.UpperBound)
	want, _, _ := verify.UpperBound(8, 40)
	require.Equal(t, want, *rep.UpperBound)
	require.Contains(t, rep.Statement, "0 of 8 sampled differ: ")
	require.Contains(t, rep.Statement, " of the 40 payments of the window are wrong (95% confidence)")

	// A difference found: no bound.
	require.NoError(t, w.db.Model(&models.Payment{}).Where("provider_id IN ?", ids).Update("state", "refunded").Error)
	rep, _ = draw(rep.Seed)
	require.Equal(t, 8, rep.Differing)
	require.Nil(t, rep.UpperBound)
}
