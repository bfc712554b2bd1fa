package main_test

// The fault suite's binary half: the built binary killed with SIGKILL at
// random points, its database connection cut in the middle of a batch, and
// half its provider requests answered 429. Every loop has a count and a
// deadline; the whole file runs in well under a minute.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/report"
)

// faultAccount generates payments over the last 20 hours and seeds the
// database as the webhooks left it, a fifth of them missed. It returns how
// many synthetic events a run must record (missed deliveries of the listed
// types) and how many webhook_events rows the deliveries made.
func faultAccount(t *testing.T, w *world, payments int, seed int64) (wantSynthetic, delivered int) {
	t.Helper()
	w.acct.Generate(stripefake.GenOptions{Payments: payments, Start: w.now.Add(-20 * time.Hour), End: w.now.Add(-time.Hour), Seed: seed})
	ds := webhooksim.Stripe(w.acct.Deliveries())
	missed := map[string]bool{}
	delivered, _, err := webhooksim.Seed(context.Background(), w.db.DB, "stripe", ds, w.now,
		func(i int, d webhooksim.Delivery) bool {
			if i%5 == 2 {
				missed[d.EventID] = true
				return false
			}
			return true
		})
	require.NoError(t, err)
	for _, d := range ds {
		if missed[d.EventID] && containsStr(stripe.EventTypes, d.EventType) {
			wantSynthetic++
		}
	}
	require.Positive(t, wantSynthetic)
	return wantSynthetic, delivered
}

func installForbidBackwards(t *testing.T, db *gorm.DB) { pgtest.ForbidBackwards(t, db) }

// assertEventsOnce: every missed event of a listed type is recorded exactly
// once, and nothing else was added.
func assertEventsOnce(t *testing.T, w *world, wantSynthetic, delivered int) {
	t.Helper()
	var synthetic, total int64
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM webhook_events WHERE synthetic`).Scan(&synthetic).Error)
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM webhook_events`).Scan(&total).Error)
	require.Equal(t, int64(wantSynthetic), synthetic, "each missed event recorded exactly once")
	require.Equal(t, int64(delivered+wantSynthetic), total)
}

// assertBatchesWhole: every run's counters equal what it wrote. Counters
// are updated in each batch's transaction, so a half-written batch shows as
// items or events without their counts (or the reverse).
func assertBatchesWhole(t *testing.T, w *world) {
	t.Helper()
	var runs []struct {
		ID                 int64
		Counted, Items     int64
		Synthetic, Written int64
	}
	require.NoError(t, w.db.Raw(`SELECT r.id, r.repaired + r.refused + r.reported AS counted,
		(SELECT count(*) FROM drift_items d WHERE d.run_id = r.id) AS items,
		r.synthetic_events AS synthetic, (SELECT count(*) FROM webhook_events e WHERE e.run_id = r.id) AS written
		FROM reconciliation_runs r`).Scan(&runs).Error)
	for _, r := range runs {
		require.Equal(t, r.Counted, r.Items, "run %d: drift items counted vs written", r.ID)
		require.Equal(t, r.Synthetic, r.Written, "run %d: synthetic events counted vs written", r.ID)
	}
}

func (w *world) maxRunID(t *testing.T) int64 {
	var id int64
	require.NoError(t, w.db.Raw(`SELECT coalesce(max(id), 0) FROM reconciliation_runs`).Scan(&id).Error)
	return id
}

// examinedAfter is the examined count of the newest run after id (-1: none yet).
func (w *world) examinedAfter(t *testing.T, id int64) int64 {
	var n int64
	require.NoError(t, w.db.Raw(`SELECT coalesce(max(examined), -1) FROM reconciliation_runs WHERE id > ?`, id).Scan(&n).Error)
	return n
}

func startBinary(t *testing.T, env map[string]string, stderr *bytes.Buffer, args ...string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return cmd, done
}

func fastConfig(t *testing.T, extra string) string {
	return writeFile(t, "providers:\n  stripe:\n    requests_per_second: 1000\n"+extra)
}

// The binary is killed with SIGKILL ten times at random points (a
// deterministic seed: some before its first batch, some in the middle of
// the stream); one clean run then converges, every missed event is
// recorded exactly once, every killed run is marked interrupted, and a
// rerun repairs nothing.
func TestFaultSIGKILLAtRandomPointsThenOneCleanRunConverges(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	wantSynthetic, delivered := faultAccount(t, w, 800, 31)
	installForbidBackwards(t, w.db.DB)
	w.fake.SetLatency(15 * time.Millisecond)
	cfg := fastConfig(t, "")
	// An explicit window: a run that happens to finish does not shrink the
	// next one to the overlap after its checkpoint.
	args := []string{"run", "--config", cfg, "--batch-size", "25", "--lock-wait", "20s",
		"--since", w.now.Add(-21 * time.Hour).Format(time.RFC3339)}

	rng := rand.New(rand.NewPCG(2026, 7))
	deadline := time.Now().Add(75 * time.Second)
	const kills, attempts = 10, 14
	preBatch, midStream, finished := 0, 0, 0
	for k := 0; k < attempts && preBatch+midStream < kills; k++ {
		require.True(t, time.Now().Before(deadline), "kill %d: out of time", k)
		last := w.maxRunID(t)
		var se bytes.Buffer
		cmd, done := startBinary(t, w.env, &se, args...)
		if k%3 == 0 {
			// Early: while the process starts, connects, takes the lock or
			// reads its first page.
			time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
		} else {
			// In the stream: after the run has examined a random number of
			// payments, plus a random moment more.
			threshold := int64(1 + rng.IntN(250))
			until := time.Now().Add(20 * time.Second)
		wait:
			for w.examinedAfter(t, last) < threshold && time.Now().Before(until) {
				select {
				case <-done:
					break wait
				case <-time.After(2 * time.Millisecond):
				}
			}
			time.Sleep(time.Duration(rng.IntN(25)) * time.Millisecond)
		}
		examined := w.examinedAfter(t, last)
		select {
		case <-done:
			finished++ // it completed before the kill (possible when a resumed run has little left)
			t.Logf("kill %d: the run finished first (exit %d)", k, cmd.ProcessState.ExitCode())
			continue
		default:
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("kill %d: the process did not die", k)
		}
		if examined > 0 {
			midStream++
		} else {
			preBatch++
		}
		t.Logf("kill %d: examined %d when killed", k, examined)
	}
	require.GreaterOrEqual(t, preBatch, 2, "some kills before the first batch")
	require.GreaterOrEqual(t, midStream, 4, "some kills in the middle of the stream")
	require.Equal(t, kills, preBatch+midStream, "%d runs finished before their kill", finished)

	w.fake.SetLatency(0)
	r := cli(t, w.env, append(args, "--format", "json")...)
	require.Equal(t, 0, r.code, r.stderr)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Runs, 1)
	require.Equal(t, models.RunSucceeded, rep.Runs[0].Status)

	runs := w.runs(t)
	var ids []int64
	for i, run := range runs {
		ids = append(ids, run.ID)
		if i == len(runs)-1 {
			require.Equal(t, models.RunSucceeded, run.Status)
			continue
		}
		if run.Status == models.RunSucceeded {
			continue // one of the runs that finished before its kill
		}
		require.Equal(t, models.RunInterrupted, run.Status, "run %d", run.ID)
		require.NotNil(t, run.Error)
	}
	require.GreaterOrEqual(t, len(runs), midStream+1, "every killed run that wrote a batch has a row")
	wrong := assertProviderStates(t, w, ids...)
	assertEventsOnce(t, w, wantSynthetic, delivered)
	assertBatchesWhole(t, w)
	t.Logf("%d runs killed (%d before a batch, %d mid-stream, %d finished first), %d payments left for a human",
		preBatch+midStream, preBatch, midStream, finished, wrong)

	r = cli(t, w.env, append(args, "--format", "json")...)
	require.Equal(t, 0, r.code, r.stderr)
	rep = report.Report{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Zero(t, rep.Runs[0].Repaired, "a rerun repairs nothing")
	require.Zero(t, rep.Runs[0].SyntheticEvents)
	requireVerifiedAll(t, w, verifyClean(t, w.env, w.firstEvent().Add(-time.Hour), w.now.Add(time.Hour), "--config", cfg))
}

var appSeq atomic.Int64

// The database connections of a run are terminated in the middle of a
// batch (pg_terminate_backend on the run's application_name, while one of
// them is inside a transaction): the run fails cleanly with exit code 1 and
// a clear error, the batch in flight leaves nothing behind, and the rerun
// marks it (if it stayed running) interrupted and converges.
func TestFaultDatabaseConnectionCutMidBatch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	wantSynthetic, delivered := faultAccount(t, w, 600, 41)
	installForbidBackwards(t, w.db.DB)
	w.fake.SetLatency(10 * time.Millisecond)
	app := fmt.Sprintf("faulttest-%d-%d", os.Getpid(), appSeq.Add(1))
	env := w.with("DATABASE_URL", w.db.URL+"&application_name="+app)
	cfg := fastConfig(t, "")

	var se bytes.Buffer
	cmd, done := startBinary(t, env, &se, "run", "--config", cfg, "--batch-size", "25")
	deadline := time.Now().Add(30 * time.Second)
	for w.examinedAfter(t, 0) <= 0 {
		require.True(t, time.Now().Before(deadline), "no batch committed in time: %s", se.String())
		time.Sleep(2 * time.Millisecond)
	}
	// Wait for a backend of the run inside a transaction (a batch being
	// written), then cut every connection the run has, lock included.
	var cut []bool
	for len(cut) == 0 {
		require.True(t, time.Now().Before(deadline), "never caught a batch in flight")
		select {
		case <-done:
			t.Fatalf("the run finished before a batch could be cut: %s", se.String())
		default:
		}
		require.NoError(t, w.db.Raw(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = ?
			AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = ? AND a.xact_start IS NOT NULL
			            AND a.state IN ('active', 'idle in transaction') AND a.query NOT LIKE '%pg_try_advisory_lock%')`, app, app).
			Scan(&cut).Error)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not exit after its connections were cut")
	}
	require.Equal(t, 1, cmd.ProcessState.ExitCode(), se.String())
	require.Regexp(t, `terminating connection|conn closed|unexpected EOF|connection reset|broken pipe`, se.String())
	require.Contains(t, se.String(), "write batch", "the error says which write failed")
	t.Logf("cut %d connections; stderr tail: %s", len(cut), tail(se.String(), 400))
	t.Logf("the cut run is recorded %s", w.runs(t)[0].Status)

	runs := w.runs(t)
	require.Len(t, runs, 1)
	cutRun := runs[0]
	// Failed when the cut hit a batch's statement; interrupted when it hit
	// the lock's connection first (the batch checks it holds the lock
	// before it commits); running when the final record could not be
	// written either. Each is the truth.
	require.Contains(t, []string{models.RunFailed, models.RunInterrupted, models.RunRunning}, cutRun.Status)
	if cutRun.Status != models.RunRunning {
		require.NotNil(t, cutRun.Error)
	}
	assertBatchesWhole(t, w)

	w.fake.SetLatency(0)
	r := cli(t, w.env, "run", "--config", cfg, "--batch-size", "25", "--lock-wait", "20s", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	runs = w.runs(t)
	require.Len(t, runs, 2)
	if cutRun.Status == models.RunRunning {
		require.Equal(t, models.RunInterrupted, runs[0].Status, "the next run marks a run left running interrupted")
	} else {
		require.Equal(t, cutRun.Status, runs[0].Status, "an ended run's record is never rewritten")
	}
	require.Equal(t, models.RunSucceeded, runs[1].Status)
	assertProviderStates(t, w, runs[0].ID, runs[1].ID)
	assertEventsOnce(t, w, wantSynthetic, delivered)
	assertBatchesWhole(t, w)
	requireVerifiedAll(t, w, verifyClean(t, w.env, w.firstEvent().Add(-time.Hour), w.now.Add(time.Hour), "--config", cfg))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// Half the provider's requests answered 429, with max_retries high enough:
// the binary's run succeeds, converges and counts every request.
func TestFaultHalfTheRequestsRateLimitedBinary(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// A small account: the transport's real backoff (250 ms doubling) runs.
	wantSynthetic, delivered := faultAccount(t, w, 60, 51)
	installForbidBackwards(t, w.db.DB)
	cfg := fastConfig(t, "    max_retries: 30\n")
	w.fake.SetFailureRate(429, 0.5)
	start := time.Now()
	r := cli(t, w.env, "run", "--config", cfg, "--format", "json")
	w.fake.SetFailureRate(429, 0)
	require.Equal(t, 0, r.code, r.stderr)
	by := w.fake.RequestsByStatus()
	require.Positive(t, by[429], "the fake answered 429s")
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, models.RunSucceeded, rep.Runs[0].Status)
	require.Equal(t, w.fake.Requests(), rep.Runs[0].APIRequests, "retries are counted")
	assertProviderStates(t, w, w.runs(t)[0].ID)
	assertEventsOnce(t, w, wantSynthetic, delivered)
	requireVerifiedAll(t, w, verifyClean(t, w.env, w.firstEvent().Add(-time.Hour), w.now.Add(time.Hour), "--config", cfg))
	t.Logf("%d requests, %d answered 429, %v", w.fake.Requests(), by[429], time.Since(start).Round(time.Millisecond))
}
