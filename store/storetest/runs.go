package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// The run record (store.RunRecord) and its named reads (store/runs.go).

var runTests = []test{
	{"CreateRun", testCreateRun},
	{"GetRunNotFound", testGetRunNotFound},
	{"InterruptOthers", testInterruptOthers},
	{"FinishRun", testFinishRun},
	{"FinishRunChangesOnlyARunningRun", testFinishRunGuarded},
	{"FindRuns", testFindRuns},
	{"FindRunsOrdersByTheInstant", testFindRunsOrdersByTheInstant},
	{"NamedRuns", testNamedRuns},
	{"CheckpointIgnoresAWindowFromTheFuture", testCheckpointFuture},
	{"DriftCounts", testDriftCounts},
	{"ForgetCarry", testForgetCarry},
	{"ForgetDeadCarry", testForgetDeadCarry},
}

func testCreateRun(t *testing.T, e *env) {
	t0 := e.t0()
	r := models.Run{Provider: "stripe", Account: "acct_1", WindowStart: t0.Add(-25 * time.Hour), WindowEnd: t0, StartedAt: t0.Add(time.Second),
		Status: models.RunRunning, Trigger: models.TriggerAPI, TriggeredBy: "ops", DryRun: true, Mode: "test",
		Notes: models.JSON(`{"warning": "é\"", "caught_up_from": "2026-03-12"}`)}
	require.NoError(t, e.st.CreateRun(e.ctx, &r))
	require.Positive(t, r.ID)
	second := models.Run{Provider: "gocardless", WindowStart: t0, WindowEnd: t0, StartedAt: t0, Status: models.RunRunning,
		Trigger: models.TriggerSchedule, Notes: models.JSON(`{}`)}
	require.NoError(t, e.st.CreateRun(e.ctx, &second))
	require.Greater(t, second.ID, r.ID)

	got, err := e.st.GetRun(e.ctx, r.ID)
	require.NoError(t, err)
	want := normalRun(r)
	require.Equal(t, want, normalRun(got))
	require.Equal(t, want, e.getRun(r.ID))
}

func testGetRunNotFound(t *testing.T, e *env) {
	r := e.run(models.Run{})
	_, err := e.st.GetRun(e.ctx, r.ID+1)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = e.st.GetRun(e.ctx, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testInterruptOthers(t *testing.T, e *env) {
	dead := e.run(models.Run{})
	dead2 := e.run(models.Run{Trigger: models.TriggerSchedule})
	me := e.run(models.Run{})
	succeeded := e.run(models.Run{Status: models.RunSucceeded, FinishedAt: ptr(e.t0())})
	otherAccount := e.run(models.Run{Account: "acct_1"})
	otherProvider := e.run(models.Run{Provider: "gocardless"})
	at := e.t0().Add(time.Hour)
	n, err := e.st.InterruptOthers(e.ctx, "stripe", "", me.ID, at, "its process died")
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	for _, r := range []*models.Run{&dead, &dead2} {
		r.Status, r.FinishedAt, r.Error = models.RunInterrupted, &at, ptr("its process died")
	}
	for _, r := range []models.Run{dead, dead2, me, succeeded, otherAccount, otherProvider} {
		require.Equal(t, normalRun(r), e.getRun(r.ID))
	}
	n, err = e.st.InterruptOthers(e.ctx, "stripe", "", me.ID, at, "again")
	require.NoError(t, err)
	require.Zero(t, n)
}

func testFinishRun(t *testing.T, e *env) {
	r := e.run(models.Run{})
	other := e.run(models.Run{})
	e.tx(e.st, func(tx store.Tx) {
		require.NoError(t, tx.AddCounts(e.ctx, r.ID, store.Progress{Counts: store.Counts{Examined: 5, Repaired: 2}, APIRequests: 3}))
	})
	want := e.getRun(r.ID)
	at := e.t0().Add(time.Hour)
	// The batch counters are AddCounts's: FinishRun writes status,
	// finished_at, error and api_requests only.
	changed, err := e.st.FinishRun(e.ctx, models.Run{ID: r.ID, Status: models.RunFailed, FinishedAt: &at, Error: ptr("provider: HTTP 500"),
		APIRequests: 42, Examined: 999, Repaired: 999, Provider: "changed"})
	require.NoError(t, err)
	require.True(t, changed)
	want.Status, want.FinishedAt, want.Error, want.APIRequests = models.RunFailed, &at, ptr("provider: HTTP 500"), 42
	require.Equal(t, want, e.getRun(r.ID))

	s := e.run(models.Run{})
	want = e.getRun(s.ID)
	later := at.Add(time.Minute)
	changed, err = e.st.FinishRun(e.ctx, models.Run{ID: s.ID, Status: models.RunSucceeded, FinishedAt: &later, APIRequests: 43})
	require.NoError(t, err)
	require.True(t, changed)
	want.Status, want.FinishedAt, want.Error, want.APIRequests = models.RunSucceeded, &later, nil, 43
	require.Equal(t, want, e.getRun(s.ID))
	require.Equal(t, normalRun(other), e.getRun(other.ID))
}

// A run another one marked interrupted (it lost its lock and the other took
// it) keeps that record: FinishRun changes only a running run, and says so.
func testFinishRunGuarded(t *testing.T, e *env) {
	a := e.run(models.Run{})
	b := e.run(models.Run{})
	n, err := e.st.InterruptOthers(e.ctx, "stripe", "", b.ID, e.t0(), "did not finish; found by run b")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	want := e.getRun(a.ID)
	require.Equal(t, models.RunInterrupted, want.Status)
	at := e.t0().Add(time.Hour)
	for _, status := range []string{models.RunSucceeded, models.RunFailed, models.RunInterrupted} {
		changed, err := e.st.FinishRun(e.ctx, models.Run{ID: a.ID, Status: status, FinishedAt: &at, APIRequests: 7})
		require.NoError(t, err)
		require.False(t, changed, status)
		require.Equal(t, want, e.getRun(a.ID), "an interrupted run is not flipped to %s", status)
	}
	// An ended run is not ended again either.
	changed, err := e.st.FinishRun(e.ctx, models.Run{ID: b.ID, Status: models.RunSucceeded, FinishedAt: &at})
	require.NoError(t, err)
	require.True(t, changed)
	wantB := e.getRun(b.ID)
	changed, err = e.st.FinishRun(e.ctx, models.Run{ID: b.ID, Status: models.RunFailed, FinishedAt: &at, Error: ptr("late")})
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, wantB, e.getRun(b.ID))
	// A run that does not exist changes nothing and is no error.
	changed, err = e.st.FinishRun(e.ctx, models.Run{ID: b.ID + 1000, Status: models.RunSucceeded, FinishedAt: &at})
	require.NoError(t, err)
	require.False(t, changed)
}

// fixtureRuns are the runs FindRuns and the named reads choose from; the
// comment on each is what the queries below rely on.
func (e *env) fixtureRuns() map[int]models.Run {
	t0 := e.t0()
	h := time.Hour
	fin := func(d time.Duration) *time.Time { return ptr(t0.Add(d)) }
	runs := []models.Run{
		1: {Status: models.RunSucceeded, Trigger: models.TriggerSchedule, WindowEnd: t0.Add(h), FinishedAt: fin(7 * h)},
		2: {Status: models.RunSucceeded, Trigger: models.TriggerManual, TriggeredBy: "alice", DryRun: true, WindowEnd: t0.Add(2 * h), FinishedAt: fin(2 * h)},
		3: {Status: models.RunFailed, Trigger: models.TriggerAPI, TriggeredBy: "bob", WindowEnd: t0.Add(3 * h), FinishedAt: fin(h)},
		4: {Account: "acct_1", Status: models.RunSucceeded, Trigger: models.TriggerSchedule, WindowEnd: t0, FinishedAt: fin(4 * h)},
		5: {Provider: "gocardless", Status: models.RunRunning, Trigger: models.TriggerSchedule, WindowEnd: t0.Add(5 * h)},
		6: {Status: models.RunRunning, Trigger: models.TriggerAPI, TriggeredBy: "bob", WindowEnd: t0.Add(4 * h)},
		// Ties run 1 on both times.
		7: {Status: models.RunInterrupted, Trigger: models.TriggerSchedule, WindowEnd: t0.Add(h), FinishedAt: fin(7 * h)},
		// The furthest window, finished before run 1 (and not before its
		// window's end: Checkpoint ignores a run that did).
		8: {Status: models.RunSucceeded, Trigger: models.TriggerSchedule, WindowEnd: t0.Add(6 * h), FinishedAt: fin(6 * h)},
	}
	out := map[int]models.Run{}
	for i := 1; i < len(runs); i++ {
		out[i] = e.run(runs[i])
	}
	return out
}

func testFindRuns(t *testing.T, e *env) {
	runs := e.fixtureRuns()
	id := func(ns ...int) []int64 {
		out := make([]int64, len(ns))
		for i, n := range ns {
			out[i] = runs[n].ID
		}
		return out
	}
	for _, c := range []struct {
		name string
		q    store.RunQuery
		want []int64
	}{
		{"everything, newest first", store.RunQuery{}, id(8, 7, 6, 5, 4, 3, 2, 1)},
		{"a provider's platform account", store.RunQuery{Provider: "stripe"}, id(8, 7, 6, 3, 2, 1)},
		{"a provider's connected account", store.RunQuery{Provider: "stripe", Account: "acct_1"}, id(4)},
		{"any account", store.RunQuery{Provider: "stripe", AnyAccount: true}, id(8, 7, 6, 4, 3, 2, 1)},
		{"an account without a provider is ignored", store.RunQuery{Account: "acct_1"}, id(8, 7, 6, 5, 4, 3, 2, 1)},
		{"status", store.RunQuery{Status: models.RunSucceeded}, id(8, 4, 2, 1)},
		{"not status", store.RunQuery{NotStatus: models.RunRunning}, id(8, 7, 4, 3, 2, 1)},
		{"trigger", store.RunQuery{Trigger: models.TriggerAPI}, id(6, 3)},
		{"triggered by", store.RunQuery{TriggeredBy: "bob"}, id(6, 3)},
		{"not dry run", store.RunQuery{NotDryRun: true}, id(8, 7, 6, 5, 4, 3, 1)},
		{"ascending", store.RunQuery{Ascending: true}, id(1, 2, 3, 4, 5, 6, 7, 8)},
		{"limit", store.RunQuery{Limit: 2}, id(8, 7)},
		{"an unknown order is by id", store.RunQuery{Order: "bogus"}, id(8, 7, 6, 5, 4, 3, 2, 1)},
		// Ties by id in the same direction; runs not finished come last
		// whichever the direction.
		{"finished, descending", store.RunQuery{Provider: "stripe", Order: store.OrderFinished}, id(7, 1, 8, 2, 3, 6)},
		{"finished, ascending", store.RunQuery{Provider: "stripe", Order: store.OrderFinished, Ascending: true}, id(3, 2, 8, 1, 7, 6)},
		{"window end, descending", store.RunQuery{Provider: "stripe", Order: store.OrderWindowEnd}, id(8, 6, 3, 2, 7, 1)},
		{"window end, ascending, limit", store.RunQuery{Provider: "stripe", Order: store.OrderWindowEnd, Ascending: true, Limit: 3}, id(1, 7, 2)},
		{"combined", store.RunQuery{Provider: "stripe", Status: models.RunSucceeded, NotDryRun: true}, id(8, 1)},
		{"another provider", store.RunQuery{Provider: "gocardless", Status: models.RunRunning}, id(5)},
		{"nothing matches", store.RunQuery{Provider: "stripe", Status: models.RunRunning, Trigger: models.TriggerSchedule}, nil},
	} {
		got, err := e.st.FindRuns(e.ctx, c.q)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, nilIfEmpty(ids(got)), c.name)
	}
	// The rows come back whole.
	got, err := e.st.FindRuns(e.ctx, store.RunQuery{Provider: "stripe", Account: "acct_1"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, normalRun(runs[4]), normalRun(got[0]))
}

func nilIfEmpty(s []int64) []int64 {
	if len(s) == 0 {
		return nil
	}
	return s
}

// testFindRunsOrdersByTheInstant: runs written with times in other zones
// than UTC still sort by the instant.
func testFindRunsOrdersByTheInstant(t *testing.T, e *env) {
	t0 := e.t0()
	west, east := time.FixedZone("UTC-5", -5*3600), time.FixedZone("UTC+9", 9*3600)
	create := func(end time.Time, finished time.Time) models.Run {
		r := models.Run{Provider: "stripe", WindowStart: end.Add(-time.Hour), WindowEnd: end, StartedAt: end, FinishedAt: &finished,
			Status: models.RunSucceeded, Trigger: models.TriggerSchedule, Notes: models.JSON(`{}`)}
		require.NoError(t, e.st.CreateRun(e.ctx, &r))
		return r
	}
	later := create(t0.Add(time.Hour).In(west), t0.Add(2*time.Hour).In(west))
	earlier := create(t0.In(east), t0.Add(time.Hour).In(east))
	utcRun := create(t0.Add(30*time.Minute), t0.Add(90*time.Minute))
	for _, order := range []string{store.OrderWindowEnd, store.OrderFinished} {
		got, err := e.st.FindRuns(e.ctx, store.RunQuery{Provider: "stripe", Order: order})
		require.NoError(t, err)
		require.Equal(t, []int64{later.ID, utcRun.ID, earlier.ID}, ids(got), order)
	}
	c, ok, err := store.Checkpoint(e.ctx, e.st, "stripe", "")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, later.ID, c.ID)

	// The same through FinishRun and InterruptOthers.
	running := models.Run{Provider: "gocardless", WindowStart: t0, WindowEnd: t0, StartedAt: t0, Status: models.RunRunning,
		Trigger: models.TriggerSchedule, Notes: models.JSON(`{}`)}
	require.NoError(t, e.st.CreateRun(e.ctx, &running))
	dead := models.Run{Provider: "gocardless", WindowStart: t0, WindowEnd: t0, StartedAt: t0, Status: models.RunRunning,
		Trigger: models.TriggerSchedule, Notes: models.JSON(`{}`)}
	require.NoError(t, e.st.CreateRun(e.ctx, &dead))
	changed, err := e.st.FinishRun(e.ctx, models.Run{ID: running.ID, Status: models.RunSucceeded, FinishedAt: ptr(t0.Add(time.Hour).In(west))})
	require.NoError(t, err)
	require.True(t, changed)
	_, err = e.st.InterruptOthers(e.ctx, "gocardless", "", running.ID, t0.Add(30*time.Minute).In(east), "died")
	require.NoError(t, err)
	got, err := e.st.FindRuns(e.ctx, store.RunQuery{Provider: "gocardless", Order: store.OrderFinished})
	require.NoError(t, err)
	require.Equal(t, []int64{running.ID, dead.ID}, ids(got))
}

func testNamedRuns(t *testing.T, e *env) {
	runs := e.fixtureRuns()
	for _, c := range []struct {
		name string
		get  func() (models.Run, bool, error)
		want int // 0: none
	}{
		{"Latest", func() (models.Run, bool, error) { return store.Latest(e.ctx, e.st, store.RunQuery{Provider: "stripe"}) }, 8},
		{"Latest failed", func() (models.Run, bool, error) {
			return store.Latest(e.ctx, e.st, store.RunQuery{Provider: "stripe", Status: models.RunFailed})
		}, 3},
		{"Latest overrides the order", func() (models.Run, bool, error) {
			return store.Latest(e.ctx, e.st, store.RunQuery{Provider: "stripe", Order: store.OrderWindowEnd, Ascending: true})
		}, 8},
		{"LastSucceeded: finished last, not dry", func() (models.Run, bool, error) { return store.LastSucceeded(e.ctx, e.st, "stripe", "") }, 1},
		{"Checkpoint: the furthest window", func() (models.Run, bool, error) { return store.Checkpoint(e.ctx, e.st, "stripe", "") }, 8},
		{"LastWriting", func() (models.Run, bool, error) { return store.LastWriting(e.ctx, e.st, "stripe", "") }, 8},
		{"Running", func() (models.Run, bool, error) { return store.Running(e.ctx, e.st, "stripe", "") }, 6},
		{"Running of another account", func() (models.Run, bool, error) { return store.Running(e.ctx, e.st, "stripe", "acct_1") }, 0},
		{"LastSucceeded of an account", func() (models.Run, bool, error) { return store.LastSucceeded(e.ctx, e.st, "stripe", "acct_1") }, 4},
		{"nothing", func() (models.Run, bool, error) { return store.Latest(e.ctx, e.st, store.RunQuery{Provider: "adyen"}) }, 0},
	} {
		r, ok, err := c.get()
		require.NoError(t, err, c.name)
		if c.want == 0 {
			require.False(t, ok, c.name)
			require.Zero(t, r.ID, c.name)
			continue
		}
		require.True(t, ok, c.name)
		require.Equal(t, normalRun(runs[c.want]), normalRun(r), c.name)
	}
}

// A run whose window ends after it finished read only up to when it ran:
// it is no checkpoint, whatever its window end says (issue 12: one --until
// in the future disabled catch-up until that date).
func testCheckpointFuture(t *testing.T, e *env) {
	t0 := e.t0()
	h := time.Hour
	fin := func(d time.Duration) *time.Time { return ptr(t0.Add(d)) }
	read := e.run(models.Run{Status: models.RunSucceeded, WindowEnd: t0, FinishedAt: fin(h)})
	e.run(models.Run{Status: models.RunSucceeded, WindowEnd: t0.Add(100 * 24 * 365 * h), FinishedAt: fin(2 * h)})
	e.run(models.Run{Status: models.RunSucceeded, WindowEnd: t0.Add(3 * h), FinishedAt: fin(2*h + time.Minute)})
	edge := e.run(models.Run{Status: models.RunSucceeded, WindowEnd: t0.Add(-h), FinishedAt: fin(-h)})
	c, ok, err := store.Checkpoint(e.ctx, e.st, "stripe", "")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, read.ID, c.ID, "the furthest window a run finished reading")

	got, err := e.st.FindRuns(e.ctx, store.RunQuery{Provider: "stripe", WindowRead: true, Order: store.OrderWindowEnd})
	require.NoError(t, err)
	require.Equal(t, []int64{read.ID, edge.ID}, ids(got), "a window ending as its run finished was read")
}

func testDriftCounts(t *testing.T, e *env) {
	r1, r2, empty := e.run(models.Run{}), e.run(models.Run{}), e.run(models.Run{})
	e.tx(e.st, func(tx store.Tx) {
		require.NoError(t, tx.InsertItems(e.ctx, r1.ID, "stripe", []store.Item{
			{ProviderID: "pi_1", Kind: models.KindConflict, Action: models.ActionRefused},
			{ProviderID: "pi_2", Kind: models.KindMismatch, Action: models.ActionReported},
			{ProviderID: "pi_3", Kind: models.KindConflict, Action: models.ActionRefused},
			{ProviderID: "pi_4", Kind: models.KindBehind, Action: models.ActionRepaired},
			{ProviderID: "pi_5", Kind: models.KindBehind, Action: models.ActionDelivered},
		}))
		require.NoError(t, tx.InsertItems(e.ctx, r2.ID, "stripe", []store.Item{{ProviderID: "pi_1", Kind: models.KindStale, Action: models.ActionRefused}}))
	})
	got, err := e.st.DriftCounts(e.ctx, r1.ID)
	require.NoError(t, err)
	require.Equal(t, []store.DriftCount{
		{Kind: models.KindBehind, Action: models.ActionDelivered, N: 1},
		{Kind: models.KindBehind, Action: models.ActionRepaired, N: 1},
		{Kind: models.KindConflict, Action: models.ActionRefused, N: 2},
		{Kind: models.KindMismatch, Action: models.ActionReported, N: 1},
	}, got)
	got, err = e.st.DriftCounts(e.ctx, empty.ID)
	require.NoError(t, err)
	require.Empty(t, got)
}

func (e *env) saveCarry(runID int64, ids ...string) {
	e.t.Helper()
	var rows []store.Carry
	for _, id := range ids {
		rows = append(rows, store.Carry{ProviderID: id, State: json.RawMessage(`{"run": 1}`)})
	}
	e.tx(e.st, func(tx store.Tx) { require.NoError(e.t, tx.SaveCarry(e.ctx, runID, rows, nil)) })
}

func testForgetCarry(t *testing.T, e *env) {
	r1, r2 := e.run(models.Run{}), e.run(models.Run{})
	e.saveCarry(r1.ID, "pi_a", "pi_b")
	e.saveCarry(r2.ID, "pi_a")
	require.NoError(t, e.st.ForgetCarry(e.ctx, r1.ID))
	e.requireCarries(carry{r2.ID, "pi_a", `{"run": 1}`})
	require.NoError(t, e.st.ForgetCarry(e.ctx, r1.ID), "nothing left is not an error")
}

func testForgetDeadCarry(t *testing.T, e *env) {
	me := e.run(models.Run{})
	failed := e.run(models.Run{Status: models.RunFailed, FinishedAt: ptr(e.t0())})
	succeeded := e.run(models.Run{Status: models.RunSucceeded, FinishedAt: ptr(e.t0())})
	interrupted := e.run(models.Run{Status: models.RunInterrupted, FinishedAt: ptr(e.t0())})
	alive := e.run(models.Run{})
	otherAccount := e.run(models.Run{Account: "acct_1", Status: models.RunFailed})
	otherProvider := e.run(models.Run{Provider: "gocardless", Status: models.RunFailed})
	for _, r := range []models.Run{me, failed, succeeded, interrupted, alive, otherAccount, otherProvider} {
		e.saveCarry(r.ID, "pi_a")
	}
	require.NoError(t, e.st.ForgetDeadCarry(e.ctx, "stripe", "", me.ID))
	e.requireCarries(carry{me.ID, "pi_a", `{"run": 1}`}, carry{alive.ID, "pi_a", `{"run": 1}`},
		carry{otherAccount.ID, "pi_a", `{"run": 1}`}, carry{otherProvider.ID, "pi_a", `{"run": 1}`})

	// The caller's own carry survives even once its run has ended.
	changed, err := e.st.FinishRun(e.ctx, models.Run{ID: me.ID, Status: models.RunSucceeded, FinishedAt: ptr(e.t0())})
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, e.st.ForgetDeadCarry(e.ctx, "stripe", "", me.ID))
	e.requireCarries(carry{me.ID, "pi_a", `{"run": 1}`}, carry{alive.ID, "pi_a", `{"run": 1}`},
		carry{otherAccount.ID, "pi_a", `{"run": 1}`}, carry{otherProvider.ID, "pi_a", `{"run": 1}`})
}
