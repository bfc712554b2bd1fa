package main_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/payouts"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
)

// payoutsWorld is the Stripe payout story (internal/scenario) in the fake
// the binary reads, with the rows `reconciler run` made from it.
func payoutsWorld(t *testing.T) (*world, *scenario.Payouts) {
	t.Helper()
	w := newWorld(t)
	w.env["STRIPE_API_KEY"] = "sk_test_" + marker + "payouts"
	s := scenario.NewStripePayouts(w.acct, w.now)
	r := cli(t, w.env, "run", "--since", s.Since.Add(-24*time.Hour).Format(time.RFC3339), "--until", w.now.Format(time.RFC3339), "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	return w, s
}

func csvRows(t *testing.T, out string) [][]string {
	t.Helper()
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err, out)
	require.Equal(t, payouts.CSVHeader, recs[0])
	return recs[1:]
}

func TestPayoutsBinaryExitCodes(t *testing.T) {
	t.Parallel()
	w, s := payoutsWorld(t)
	require.NoError(t, s.MisnameRow(context.Background(), w.db.DB))
	var before []models.Payment
	require.NoError(t, w.db.Order("id").Find(&before).Error)
	runs := len(w.runs(t))
	since := s.Since.Format(time.RFC3339)

	// A wrong amount and a row naming another payout: exit 4, both first.
	r := cli(t, w.env, "payouts", "--provider", "stripe", "--since", since, "-o", "csv")
	require.Equal(t, 4, r.code, r.stderr)
	rows := csvRows(t, r.stdout)
	require.Len(t, rows, 2+len(s.Reconciled)+1)
	require.Equal(t, s.WrongAmount, rows[0][2])
	require.Equal(t, s.WrongRows, rows[1][2])
	require.Equal(t, []string{"mismatch", "mismatch"}, []string{rows[0][3], rows[1][3]})
	for _, row := range rows[2:] {
		require.Equal(t, "false", row[4], row)
	}
	require.Contains(t, r.stderr, "payouts stripe/platform: 7 payouts, 2 mismatching, 1 in progress, 0 with items unavailable; ")
	// One payout list and one page of transactions for each automatic payout.
	require.Contains(t, r.stderr, "; 8 API requests")
	var after []models.Payment
	require.NoError(t, w.db.Order("id").Find(&after).Error)
	require.Equal(t, before, after, "no row changed")
	require.Len(t, w.runs(t), runs, "no run recorded")

	// JSON and text say the same.
	r = cli(t, w.env, "payouts", "--provider", "stripe", "--since", since, "-o", "json")
	require.Equal(t, 4, r.code, r.stderr)
	var rep payouts.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Equal(t, 2, rep.Mismatches)
	require.Equal(t, s.WrongAmount, rep.Results[0].PayoutID)
	require.Equal(t, []payouts.Finding{{Problem: payouts.PaidElsewhere, ProviderID: s.Misnamed, LocalPayoutID: s.Outside}}, rep.Results[1].Findings)
	r = cli(t, w.env, "payouts", "--provider", "stripe", "--since", since)
	require.Equal(t, 4, r.code, r.stderr)
	require.Contains(t, r.stdout, "Payouts of stripe/platform created ")
	require.Contains(t, r.stdout, "To look at:\n  mismatch Payout "+s.WrongAmount+" of 50.00 GBP does not reconcile: its amount is 5.00 GBP more than")
	for _, out := range []string{r.stdout, r.stderr} {
		require.NotContains(t, out, marker, "no secret is printed")
	}

	// A window of payouts that all reconcile: exit 0.
	last := s.Reconciled[len(s.Reconciled)-1]
	r = cli(t, w.env, "payouts", "--provider", "stripe", "--since", w.now.Add(-35*time.Hour).Format(time.RFC3339), "-o", "csv")
	require.Equal(t, 0, r.code, r.stderr)
	rows = csvRows(t, r.stdout)
	require.Len(t, rows, 1)
	require.Equal(t, []string{last, "reconciled"}, rows[0][2:4])

	// An empty window: exit 0, the header only.
	r = cli(t, w.env, "payouts", "--provider", "stripe", "--since", "2020-01-01", "--until", "2020-01-02", "-o", "csv")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, csvRows(t, r.stdout))

	r = cli(t, w.env, "payouts", "-h") // help goes to stdout, as cobra's does
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "Exit codes: 0 no payout mismatches, 4 one does")
	require.Empty(t, r.stderr)
	r = cli(t, w.env, "help")
	require.Contains(t, r.stdout, "reconciler payouts --provider NAME")
	require.Contains(t, r.stdout, "(payouts) a payout mismatches")
}

// Bad input: one line naming the flag and the fix, exit 2, nothing on
// stdout, no request and nothing written.
func TestPayoutsBinaryBadInput(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.env["STRIPE_API_KEY"] = "sk_test_" + marker + "bad"
	for _, c := range []struct {
		args []string
		env  map[string]string
		says string
	}{
		{[]string{"--since", "2026-11-01"}, nil, "--provider is required: give --provider stripe or --provider gocardless"},
		{[]string{"--provider", "stripe"}, nil, "--since is required: give the first day of the payouts, e.g. --since 2026-11-01"},
		{[]string{"--provider", "stripe", "--since", "2026-11-01", "-o", "xml"}, nil, `-o: unknown output "xml" (use csv, json or text)`},
		{[]string{"--provider", "stripe", "--since", "yesterday"}, nil, "--since: "},
		{[]string{"--provider", "stripe", "--since", "2026-11-01", "--until", "2026-10-01"}, nil, `--since "2026-11-01" is not before --until`},
		{[]string{"--provider", "adyen", "--since", "2026-11-01"}, nil, `--provider: unknown provider "adyen"`},
		{[]string{"--provider", "gocardless", "--account", "acct_1X", "--since", "2026-11-01"}, map[string]string{"GOCARDLESS_ACCESS_TOKEN": "sandbox_" + marker},
			"--account: gocardless has no connected accounts"},
		{[]string{"--provider", "stripe", "--account", "acct_1; DROP TABLE payments", "--since", "2026-11-01"}, nil, "--account: "},
		{[]string{"--provider", "stripe", "--since", "2026-11-01", "extra"}, nil, `payouts: unexpected argument "extra"`},
		{[]string{"--provider", "stripe", "--since", "2026-11-01", "--bogus"}, nil, "payouts: unknown flag --bogus (run reconciler payouts --help for its flags)"},
		{[]string{"--provider", "gocardless", "--since", "2026-11-01"}, nil, "GOCARDLESS_ACCESS_TOKEN: is not set"},
		{[]string{"--provider", "stripe", "--since", "2026-11-01"}, map[string]string{"STRIPE_API_KEY": ""}, "STRIPE_API_KEY: is not set"},
	} {
		env := w.with()
		for k, v := range c.env {
			if v == "" {
				delete(env, k)
			} else {
				env[k] = v
			}
		}
		r := cli(t, env, append([]string{"payouts"}, c.args...)...)
		require.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		require.Empty(t, r.stdout, c.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "%v: one line: %q", c.args, r.stderr)
		require.Contains(t, r.stderr, c.says, c.args)
		require.NotContains(t, r.stderr, marker)
	}
	require.Zero(t, w.fake.Requests(), "no request reached the provider")
	require.Empty(t, w.runs(t))

	// No database configured and no embedded store: exit 2, and no file is
	// made.
	dir := t.TempDir()
	cmd := exec.Command(binary, "payouts", "--provider", "stripe", "--since", "2026-11-01")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "STRIPE_API_KEY=sk_test_x", "STRIPE_API_BASE=" + w.env["STRIPE_API_BASE"]}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.ExitCode(), se.String())
	require.Contains(t, se.String(), "DATABASE_URL: is not set and the embedded store reconciler.db does not exist")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no file is created")
	_, err = os.Stat(filepath.Join(dir, "reconciler.db"))
	require.True(t, os.IsNotExist(err))
}

// The provider fails: exit 1, one line, no secret.
func TestPayoutsBinaryProviderFails(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	down := httptestServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"Invalid API Key provided."}}`))
	})
	r := cli(t, w.with("STRIPE_API_KEY", "sk_test_"+marker+"down", "STRIPE_API_BASE", down), "payouts", "--provider", "stripe", "--since", "2026-11-01")
	require.Equal(t, 1, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "list stripe payouts: stripe: HTTP 401 invalid_request_error: Invalid API Key provided.")
	require.NotContains(t, r.stderr, marker)
}

// GoCardless: a wrong amount and a row naming another payout come first
// (exit 4); a payout older than six months is "items unavailable", no
// failure.
func TestPayoutsBinaryGoCardless(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	now := time.Now().UTC()
	fake := gcfake.New(gcfake.Options{Seed: 2})
	url := fake.Start()
	t.Cleanup(fake.Close)
	s := scenario.NewGoCardlessPayouts(fake, now)
	env := w.with("STRIPE_API_KEY", "", "GOCARDLESS_ACCESS_TOKEN", "sandbox_"+marker, "GOCARDLESS_API_BASE", url)
	r := cli(t, env, "run", "--provider", "gocardless", "--since", s.Since.Add(-24*time.Hour).Format(time.RFC3339), "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, s.MisnameRow(context.Background(), w.db.DB))

	r = cli(t, env, "payouts", "--provider", "gocardless", "--since", s.Since.Format(time.RFC3339), "-o", "csv")
	require.Equal(t, 4, r.code, r.stderr)
	rows := csvRows(t, r.stdout)
	require.Equal(t, []string{s.WrongAmount, s.WrongRows}, []string{rows[0][2], rows[1][2]})
	var unjudged []string
	for _, row := range rows[2:] {
		require.NotEqual(t, "mismatch", row[3], row)
		if row[2] == s.Unjudged {
			unjudged = row
		}
	}
	require.Equal(t, "items_unavailable", unjudged[3], unjudged)
	require.Contains(t, r.stderr, "payouts gocardless/platform: 6 payouts, 2 mismatching, 0 in progress, 1 with items unavailable; 7 API requests")
	require.NotContains(t, r.stdout+r.stderr, marker)
}
