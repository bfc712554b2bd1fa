package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
)

// verifyJSON is the part of `verify -o json` the tests read.
type verifyJSON struct {
	OK          bool     `json:"ok"`
	Population  int      `json:"population"`
	Sample      int      `json:"sample"`
	Seed        *uint64  `json:"seed"`
	Checked     int      `json:"checked"`
	Differing   int      `json:"differing"`
	Explained   int      `json:"explained"`
	Unexplained int      `json:"unexplained"`
	UpperBound  *float64 `json:"upper_bound"`
	Reports     []struct {
		Provider    string  `json:"provider"`
		InWindow    int     `json:"in_window"`
		Population  int     `json:"population"`
		Seed        *uint64 `json:"seed"`
		RunID       int64   `json:"run_id"`
		Statement   string  `json:"statement"`
		Unexplained []struct {
			ProviderID string `json:"provider_id"`
			Field      string `json:"field"`
			Local      string `json:"local"`
			Provider   string `json:"provider"`
		} `json:"unexplained"`
	} `json:"reports"`
}

func TestVerifyBinaryExitCodes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.acct
	captured := a.CreatePayment(4200, "gbp", false, w.now.Add(-3*time.Hour))
	a.Capture(captured, w.now.Add(-3*time.Hour+time.Minute))
	refunded := a.CreatePayment(1800, "gbp", false, w.now.Add(-4*time.Hour))
	a.Capture(refunded, w.now.Add(-4*time.Hour+time.Minute))
	a.Refund(refunded, 0, w.now.Add(-2*time.Hour))
	canceled := a.CreatePayment(900, "gbp", true, w.now.Add(-5*time.Hour))
	a.Authorise(canceled, w.now.Add(-5*time.Hour+time.Minute))
	a.Cancel(canceled, w.now.Add(-time.Hour))

	// The run brings the rows in line with Stripe; verify then finds nothing.
	r := cli(t, w.env, "run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	runs := len(w.runs(t))

	r = cli(t, w.env, "verify", "--all")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, "the summary table and the statement, no differences table: %s", r.stdout)
	require.Equal(t, []string{"PROVIDER", "ACCOUNT", "POPULATION", "CHECKED", "SEED", "DIFFERING", "EXPLAINED", "UNEXPLAINED", "UPPER_BOUND"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"stripe", "platform", "3", "3", "-", "0", "0", "0", "-"}, strings.Fields(lines[1]))
	require.Equal(t, "stripe/platform: 0 of 3 payments differ: none of the 3 payments of the window is wrong.", lines[3])
	require.Contains(t, r.stderr, "verify stripe/platform: 3 checked, 0 differing, 0 explained, 0 unexplained (all 3 in window")
	require.Len(t, w.runs(t), runs+1, "verify records its run")
	vrun := w.runs(t)[runs]
	require.Equal(t, models.RunSucceeded, vrun.Status)
	require.True(t, vrun.DryRun)
	require.Equal(t, models.TriggerManual, vrun.Trigger)
	require.EqualValues(t, 3, vrun.Examined)
	require.Zero(t, vrun.Refused)
	require.Contains(t, r.stderr, fmt.Sprintf("recorded as run %d", vrun.ID))

	r = cli(t, w.env, "verify", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var out verifyJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.True(t, out.OK)
	require.Equal(t, 3, out.Checked, "the default sample of 100 covers the window")
	require.Equal(t, 3, out.Population)
	require.Equal(t, 100, out.Sample)
	require.NotNil(t, out.Seed, "a drawn seed is printed")
	require.NotNil(t, out.UpperBound)
	require.Zero(t, *out.UpperBound, "the whole window checked: nothing can be wrong")
	require.Contains(t, r.stderr, fmt.Sprintf("seed %d", *out.Seed))
	require.Equal(t, "0 of 3 sampled differ: none of the 3 payments of the window is wrong", out.Reports[0].Statement)

	// A row someone marked refunded by hand: exit 4, the table names it.
	require.NoError(t, w.db.Model(&models.Payment{}).Where("provider_id = ?", captured).Update("state", "refunded").Error)
	r = cli(t, w.env, "verify", "--all")
	require.Equal(t, 4, r.code, r.stderr)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 7, r.stdout)
	require.Equal(t, "stripe/platform: 1 of 3 payments differ (0 explained by a drift item, 1 unexplained) among the 3 payments of the window.", lines[3])
	require.Equal(t, []string{"PROVIDER", "ACCOUNT", "PROVIDER_ID", "FIELD", "LOCAL", "AT_PROVIDER"}, strings.Fields(lines[5]))
	require.Equal(t, []string{"stripe", "platform", captured, "state", "refunded", "captured", "(succeeded)"}, strings.Fields(lines[6]))
	require.Contains(t, r.stderr, "1 differing, 0 explained, 1 unexplained")
	// Recorded: a dry run refusing one payment, and its item.
	all := w.runs(t)
	vrun = all[len(all)-1]
	require.EqualValues(t, 3, vrun.Examined)
	require.EqualValues(t, 1, vrun.Refused)
	var items []models.DriftItem
	require.NoError(t, w.db.Where("run_id = ?", vrun.ID).Find(&items).Error)
	require.Len(t, items, 1)
	require.Equal(t, captured, items[0].ProviderID)
	require.Equal(t, models.KindConflict, items[0].Kind)
	require.Equal(t, models.ActionReported, items[0].Action)
	require.Contains(t, string(items[0].Detail), `"found_by": "verify"`)
	// Its item explains nothing: verify still exits 4.
	r = cli(t, w.env, "verify", "--all", "-o", "json")
	require.Equal(t, 4, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.Nil(t, out.Seed)
	require.Nil(t, out.UpperBound)
	require.Equal(t, 1, out.Differing)
	require.Equal(t, 1, out.Unexplained)

	r = cli(t, w.env, "verify", "--sample", "2", "--seed", "7", "-o", "json")
	require.Contains(t, []int{0, 4}, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.Equal(t, 2, out.Checked)
	require.Equal(t, uint64(7), *out.Seed)
	require.Equal(t, uint64(7), *out.Reports[0].Seed)
	require.Contains(t, r.stderr, "sample 2 of 3 in window, seed 7")
	// The same seed, the same sample: whether it holds the wrong row, and
	// the same answer, each time; a drawn seed repeats the same way.
	first := out
	for range 3 {
		r2 := cli(t, w.env, "verify", "--sample", "2", "--seed", "7", "-o", "json")
		require.Equal(t, r.code, r2.code, r2.stderr)
		var again verifyJSON
		require.NoError(t, json.Unmarshal([]byte(r2.stdout), &again), r2.stdout)
		require.Equal(t, first.Reports[0].Unexplained, again.Reports[0].Unexplained)
		require.Equal(t, first.Differing, again.Differing)
	}

	// Usage errors: exit 2, one line naming the flag, nothing touched.
	runs = len(w.runs(t))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--sample", "5", "--all"}, "--sample and --all are mutually exclusive"},
		{[]string{"verify", "--sample", "0"}, "--sample: 0 is not a positive number"},
		{[]string{"verify", "-o", "yaml"}, `-o: unknown output "yaml"`},
		{[]string{"verify", "--since", "yesterday"}, "--since"},
		{[]string{"verify", "--since", "2026-11-02", "--until", "2026-11-01"}, "must be before --until"},
		{[]string{"verify", "--provider", "paypal"}, `unknown provider "paypal"`},
		{[]string{"verify", "--account", "bogus"}, "--account"},
		{[]string{"verify", "--seed", "x"}, "--seed"},
		{[]string{"verify", "--seed", "5x"}, `--seed: "5x" is not an integer`},
		{[]string{"verify", "--seed", "-1"}, "--seed"},
		{[]string{"verify", "--seed", "9007199254740992"}, "--seed"},
		{[]string{"verify", "--seed", "7", "--all"}, "--seed repeats a --sample"},
		{[]string{"verify", "--sample", "abc"}, "-sample"},
		{[]string{"verify", "--sample", "2000000"}, "--sample"},
		{[]string{"verify", "--bogus"}, "verify: unknown flag --bogus (run reconciler verify --help"},
	} {
		r := cli(t, w.env, c.args...)
		require.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stderr, c.want, c.args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %q", r.stderr)
	}
	r = cli(t, w.with("STRIPE_API_KEY", ""), "verify")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "STRIPE_API_KEY")
	r = cli(t, w.with("DATABASE_URL", ""), "verify")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "DATABASE_URL")

	// The provider unreachable: exit 1.
	w.fake.SetFailureRate(http.StatusInternalServerError, 1)
	cfg := writeFile(t, "providers:\n  stripe:\n    max_retries: 1\n")
	require.Len(t, w.runs(t), runs, "a usage error writes no run")
	r = cli(t, w.env, "verify", "--config", cfg, "--all")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "HTTP 500")
	all = w.runs(t)
	require.Len(t, all, runs+1, "the failed verify is recorded")
	require.Equal(t, models.RunFailed, all[runs].Status)
	require.Contains(t, *all[runs].Error, "500")
}

// TestVerifySampleBoundOverABiggerWindow: a sample of a window larger than
// it states the 95% bound, the drawn seed repeats the same payments, and
// neither touches a payment.
func TestVerifySampleBoundOverABiggerWindow(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for i := range 60 {
		pi := w.acct.CreatePayment(int64(1000+i), "gbp", false, w.now.Add(-3*time.Hour))
		w.acct.Capture(pi, w.now.Add(-3*time.Hour+time.Minute))
	}
	r := cli(t, w.env, "run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var before []models.Payment
	require.NoError(t, w.db.Order("id").Find(&before).Error)
	require.Len(t, before, 60)

	paths := func() map[string]int64 { return w.fake.RequestsByPath() }
	r = cli(t, w.env, "verify", "--sample", "20")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	row := strings.Fields(lines[1])
	seed := row[4]
	want := "stripe/platform: 0 of 20 sampled differ: at most 10% of the 60 payments of the window are wrong (95% confidence)."
	require.Equal(t, want, lines[3])
	require.Equal(t, []string{"stripe", "platform", "60", "20", seed, "0", "0", "0", "<=10%"}, row)
	require.Contains(t, r.stderr, "seed "+seed)

	// Which payments a seed checks: the fake counts each PaymentIntent read.
	before1 := paths()["/v1/payment_intents/{id}"]
	r = cli(t, w.env, "verify", "--sample", "20", "--seed", seed, "-o", "json", "--by-id")
	require.Equal(t, 0, r.code, r.stderr)
	var out verifyJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.Equal(t, 60, out.Population)
	require.Equal(t, 20, out.Sample)
	require.Equal(t, 20, out.Checked)
	require.Equal(t, seed, fmt.Sprint(*out.Seed))
	require.InDelta(t, 0.1, *out.UpperBound, 1e-12, "6 of 60: math.comb(54, 20)/math.comb(60, 20) >= 0.05 > math.comb(53, 20)/math.comb(60, 20)")
	require.Equal(t, int64(20), paths()["/v1/payment_intents/{id}"]-before1)

	// The seed's sample holds the row edited below iff it finds it: edit
	// every row, and the same seed finds exactly 20 differing.
	require.NoError(t, w.db.Model(&models.Payment{}).Where("provider = ?", "stripe").Update("amount_refunded", 1).Error)
	r = cli(t, w.env, "verify", "--sample", "20", "--seed", seed, "-o", "json")
	require.Equal(t, 4, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.Equal(t, 20, out.Unexplained)
	require.Nil(t, out.UpperBound, "differences found: no bound")
	var ids []string
	for _, d := range out.Reports[0].Unexplained {
		ids = append(ids, d.ProviderID)
	}
	r = cli(t, w.env, "verify", "--sample", "20", "--seed", seed, "-o", "json")
	require.Equal(t, 4, r.code, r.stderr)
	var again verifyJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &again), r.stdout)
	var ids2 []string
	for _, d := range again.Reports[0].Unexplained {
		ids2 = append(ids2, d.ProviderID)
	}
	require.Equal(t, ids, ids2, "--seed checks the same payments")
	other := cli(t, w.env, "verify", "--sample", "20", "--seed", seed+"1", "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(other.stdout), &again), other.stdout)
	ids2 = ids2[:0]
	for _, d := range again.Reports[0].Unexplained {
		ids2 = append(ids2, d.ProviderID)
	}
	require.NotEqual(t, ids, ids2, "another seed, another sample")

	var after []models.Payment
	require.NoError(t, w.db.Order("id").Find(&after).Error)
	for i := range before {
		before[i].AmountRefunded = 1
		before[i].UpdatedAt = after[i].UpdatedAt
	}
	require.Equal(t, before, after, "verify wrote no payment")
}
