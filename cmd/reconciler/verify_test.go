package main_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
)

// verifyJSON is the part of `verify -o json` the tests read.
type verifyJSON struct {
	OK          bool `json:"ok"`
	Checked     int  `json:"checked"`
	Unexplained int  `json:"unexplained"`
	Reports     []struct {
		Provider    string `json:"provider"`
		InWindow    int    `json:"in_window"`
		Unexplained []struct {
			ProviderID, Field, Local, Provider string
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
	require.Empty(t, r.stdout, "no unexplained difference: no table")
	require.Contains(t, r.stderr, "verify stripe/platform: 3 checked, 0 differing, 0 explained, 0 unexplained (all 3 in window")

	r = cli(t, w.env, "verify", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var out verifyJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.True(t, out.OK)
	require.Equal(t, 3, out.Checked, "the default sample of 100 covers the window")

	// A row someone marked refunded by hand: exit 4, the table names it.
	require.NoError(t, w.db.Model(&models.Payment{}).Where("provider_id = ?", captured).Update("state", "refunded").Error)
	r = cli(t, w.env, "verify", "--all")
	require.Equal(t, 4, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	require.Equal(t, []string{"PROVIDER", "ACCOUNT", "PROVIDER_ID", "FIELD", "LOCAL", "AT_PROVIDER"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"stripe", "platform", captured, "state", "refunded", "captured", "(succeeded)"}, strings.Fields(lines[1]))
	require.Contains(t, r.stderr, "1 differing, 0 explained, 1 unexplained")

	r = cli(t, w.env, "verify", "--sample", "2", "--seed", "7", "-o", "json")
	require.Contains(t, []int{0, 4}, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.Equal(t, 2, out.Checked)
	require.Contains(t, r.stderr, "sample 2 of 3 in window, seed 7")

	// Usage errors: exit 2, one line naming the flag, nothing touched.
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
		{[]string{"verify", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		r := cli(t, w.env, c.args...)
		require.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stderr, c.want, c.args)
		if c.args[1] != "--bogus" { // the flag package prints the flags after its own line, as for every command
			require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %q", r.stderr)
		}
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
	r = cli(t, w.env, "verify", "--config", cfg, "--all")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "HTTP 500")

	require.Len(t, w.runs(t), runs, "verify writes no run")
}
