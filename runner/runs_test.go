package runner

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

func ptr(s string) *string { return &s }

func TestRunsAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := dbopen.Store(pgtest.NewSQLite(t).DB, nil)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	add := func(provider, account, status, trigger string, dry bool) int64 {
		t.Helper()
		r := models.Run{Provider: provider, Account: account, Status: status, Trigger: trigger, DryRun: dry,
			WindowStart: at, WindowEnd: at.Add(time.Hour), StartedAt: at, Notes: models.JSON("[]")}
		if status != models.RunRunning {
			f := at.Add(time.Minute)
			r.FinishedAt = &f
		}
		require.NoError(t, st.CreateRun(ctx, &r))
		return r.ID
	}
	r1 := add("stripe", "", models.RunSucceeded, models.TriggerManual, false)
	r2 := add("stripe", "acct_1A", models.RunFailed, models.TriggerSchedule, false)
	r3 := add("gocardless", "", models.RunSucceeded, models.TriggerAPI, true)
	r4 := add("stripe", "acct_1A", models.RunSucceeded, models.TriggerAPI, false)
	r5 := add("gocardless", "", models.RunRunning, models.TriggerSchedule, false)
	runs := Runs{Record: st}

	got, err := runs.Get(ctx, r2)
	require.NoError(t, err)
	require.Equal(t, "acct_1A", got.Account)
	_, err = runs.Get(ctx, 999)
	require.ErrorIs(t, err, store.ErrNotFound)

	r, ok, err := runs.LatestFinished(ctx, "", "")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r4, r.ID, "the newest run that is not running, of any provider")
	r, ok, err = runs.LatestFinished(ctx, "gocardless", "")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r3, r.ID)
	_, ok, err = runs.LatestFinished(ctx, "stripe", "acct_1None")
	require.NoError(t, err)
	require.False(t, ok)
	r, ok, err = runs.Running(ctx, "gocardless", "")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r5, r.ID)
	r, ok, err = runs.LastSucceeded(ctx, "gocardless", "")
	require.NoError(t, err)
	require.False(t, ok, "a dry run is not a success to catch up from: %v", r.ID)
	r, ok, err = runs.LastSucceeded(ctx, "stripe", "acct_1A")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r4, r.ID)

	ids := func(f Filter) []int64 {
		t.Helper()
		rs, err := runs.List(ctx, f)
		require.NoError(t, err)
		out := []int64{}
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	require.Equal(t, []int64{r5, r4, r3, r2, r1}, ids(Filter{}), "newest first")
	require.Equal(t, []int64{r5, r4}, ids(Filter{Limit: 2}))
	require.Equal(t, []int64{r4, r2, r1}, ids(Filter{Provider: ptr("stripe")}), "a provider's runs, every account")
	require.Equal(t, []int64{r4, r2}, ids(Filter{Provider: ptr("stripe"), Account: ptr("acct_1A")}))
	require.Equal(t, []int64{r4, r2}, ids(Filter{Account: ptr("acct_1A")}), "an account without a provider")
	require.Equal(t, []int64{r5, r3, r1}, ids(Filter{Account: ptr("")}), "the platforms of every provider")
	require.Equal(t, []int64{r5, r3}, ids(Filter{Account: ptr(""), Limit: 2}))
	require.Equal(t, []int64{r4, r3}, ids(Filter{Trigger: ptr(models.TriggerAPI)}))
	require.Equal(t, []int64{r4, r3, r1}, ids(Filter{Status: ptr(models.RunSucceeded)}))
	require.Equal(t, []int64{r3}, ids(Filter{Status: ptr(models.RunSucceeded), Account: ptr(""), Trigger: ptr(models.TriggerAPI)}))
	for _, f := range []Filter{{Provider: ptr("")}, {Status: ptr("")}, {Trigger: ptr("")}, {Provider: ptr("paypal")}, {Status: ptr("bogus")}} {
		require.Empty(t, ids(f), "a value no run has selects none")
	}
}
