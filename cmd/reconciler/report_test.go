package main_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/internal/signedlink"
	"github.com/reconciler/reconciler/report"
)

// The report command renders past runs in every format, with items needing
// a human first, and no personal data of the provider's objects in any.
func TestReportCommandAllFormatsNoPersonalData(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := scenario.NewStripe(w.acct, w.now, scenario.Options{Payments: 150, Seed: 4, MissEvery: 7})
	require.NoError(t, s.SeedLocal(context.Background(), w.db.DB, w.now))
	r := cli(t, w.env, "run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	id := rep.Runs[0].ID
	kinds := map[string]bool{}
	for _, it := range rep.Runs[0].Items {
		kinds[it.Kind] = true
	}
	for _, k := range []string{"missing_local", "behind", "conflict", "stale", "mismatch", "unknown_status"} {
		require.True(t, kinds[k], "the scenario produces %s", k)
	}
	require.True(t, rep.Runs[0].Items[0].NeedsHuman(), "items needing a human come first")

	// Personal data the fake put in its objects: customer names and e-mails.
	pii := map[string]bool{}
	emailRE := regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[a-z]{2,}`)
	nameRE := regexp.MustCompile(`"(?:name|customer_name)":"([^"]+)"`)
	for _, d := range s.Deliveries {
		for _, m := range emailRE.FindAllString(string(d.Payload), -1) {
			pii[m] = true
		}
		for _, m := range nameRE.FindAllStringSubmatch(string(d.Payload), -1) {
			pii[m[1]] = true
		}
	}
	require.NotEmpty(t, pii, "the fake's objects carry personal data to leak")

	dir := t.TempDir()
	for _, f := range report.Formats {
		out := filepath.Join(dir, "report."+f)
		r := cli(t, w.env, "report", "--run", itoa(id), "--format", f, "--output", out)
		require.Equal(t, 0, r.code, r.stderr)
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		require.NotEmpty(t, b)
		for p := range pii {
			require.NotContains(t, string(b), p, "personal data in the %s report", f)
		}
		require.Contains(t, string(b), s.Conflict, f)
	}
	rows, err := csv.NewReader(mustOpen(t, filepath.Join(dir, "report.csv"))).ReadAll()
	require.NoError(t, err)
	items := 0
	for _, row := range rows[1:] {
		if row[4] != "" { // totals rows have no provider_id
			items++
		}
	}
	require.Equal(t, len(rep.Runs[0].Items), items, "one CSV row per item besides the totals")
	r = cli(t, w.env, "report", "--last", "--format", "md")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "## Run "+itoa(id))
	r = cli(t, w.env, "report", "--history", "5", "--format", "html")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "<svg")
	r = cli(t, w.env, "report", "--run", "999")
	require.Equal(t, 2, r.code)
	r = cli(t, w.env, "report")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "exactly one of")
}

func mustOpen(t *testing.T, p string) io.Reader {
	f, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// The summary reaches the chat exactly once across a receiver that answered
// 500 first, the run, and a rerun of the delivery for the same run id.
func TestNotificationExactlyOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pi := w.acct.CreatePayment(100, "gbp", false, w.now.Add(-time.Hour))
	w.acct.Capture(pi, w.now.Add(-time.Hour))
	var mu sync.Mutex
	var received []string
	calls := 0
	hook := httptestServer(t, func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			rw.WriteHeader(http.StatusInternalServerError)
			return
		}
		received = append(received, string(b))
		rw.WriteHeader(http.StatusOK)
	})
	env := w.with("RECONCILER_SLACK_WEBHOOK_URL", hook+"/services/T000/B000/SECRETwebhook")
	r := cli(t, env, "run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	id := rep.Runs[0].ID
	r2 := cli(t, env, "report", "--run", itoa(id), "--notify")
	require.Equal(t, 0, r2.code, r2.stderr)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, calls, "one 500, one delivery; the rerun sent nothing")
	require.Len(t, received, 1)
	require.Contains(t, received[0], "repaired")
	require.NotContains(t, r.stderr+r2.stderr, "SECRETwebhook")
	var status string
	require.NoError(t, w.db.Raw(`SELECT status FROM sent_notifications WHERE run_id = ?`, id).Scan(&status).Error)
	require.Equal(t, "sent", status)
}

// A dry run and then a real run of the same scenario, rendered by the
// report command: the dry run's every format says it would repair and
// nothing was marked; the real run's says it repaired; both carry the
// window's totals, flagged before any item when the rows differ.
func TestReportCommandDryRunSaysWouldRepair(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := scenario.NewStripe(w.acct, w.now, scenario.Options{Payments: 60, Seed: 9, MissEvery: 5})
	require.NoError(t, s.SeedLocal(context.Background(), w.db.DB, w.now))
	ids := map[bool]int64{}
	for _, dry := range []bool{true, false} {
		args := []string{"run", "--format", "json"}
		if dry {
			args = append(args, "--dry-run")
		}
		r := cli(t, w.env, args...)
		require.Equal(t, 0, r.code, r.stderr)
		var rep report.Report
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
		require.Equal(t, dry, rep.Runs[0].DryRun)
		require.NotNil(t, rep.Runs[0].Totals)
		require.NotEmpty(t, rep.Runs[0].Totals.Rows, "the scenario's rows are in the window")
		require.Positive(t, rep.Runs[0].Repaired, "the scenario has webhooks missed")
		for _, it := range rep.Runs[0].Items {
			require.Equal(t, dry, it.DryRun, "item %s", it.ProviderID)
		}
		ids[dry] = rep.Runs[0].ID
	}
	dir := t.TempDir()
	for _, dry := range []bool{true, false} {
		for _, f := range report.Formats {
			out := filepath.Join(dir, fmt.Sprintf("%v.%s", dry, f))
			r := cli(t, w.env, "report", "--run", itoa(ids[dry]), "--format", f, "--output", out)
			require.Equal(t, 0, r.code, r.stderr)
			b, err := os.ReadFile(out)
			require.NoError(t, err)
			page := string(b)
			name := fmt.Sprintf("%s, dry run %v", f, dry)
			switch f {
			case "json":
				require.Contains(t, page, `"measured":true`, name)
			case "csv":
				require.Contains(t, page, ",total_captured,provider,", name)
			case "text":
				require.Contains(t, page, "provider-rows", name)
			default:
				require.Contains(t, page, "as the provider has it", name)
			}
			if dry {
				require.Contains(t, page, "totals differ from the provider", "%s: a dry run's repairs leave the rows behind", name)
				require.Less(t, strings.Index(page, "totals differ from the provider"), strings.Index(page, s.Conflict), name)
				require.NotContains(t, page, "the payment was marked", name)
				require.NotContains(t, page, "it was created as", name)
				switch f {
				case "text", "md", "html":
					require.Contains(t, page, "would repair", name)
				default:
					require.Contains(t, page, "Would repair (dry run, nothing was changed): ", name)
				}
			} else {
				require.NotContains(t, page, "would repair", name)
				require.NotContains(t, page, "Would repair", name)
			}
		}
		rows, err := csv.NewReader(mustOpen(t, filepath.Join(dir, fmt.Sprintf("%v.csv", dry)))).ReadAll()
		require.NoError(t, err)
		col := slices.Index(rows[0], "dry_run") // columns are added at the end
		require.GreaterOrEqual(t, col, 0, "a dry_run column")
		for _, row := range rows[1:] {
			require.Equal(t, fmt.Sprint(dry), row[col])
		}
	}
}

// An explicit report --notify says what came of it: exit 1 naming the
// cause when the chat refused (the report is still written), and a line on
// stderr with exit 0 when it skipped a dry run or a run already posted.
func TestReportNotifyExitsOneOnFailureAndSaysWhenItSkips(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pi := w.acct.CreatePayment(100, "gbp", false, w.now.Add(-time.Hour))
	w.acct.Capture(pi, w.now.Add(-time.Hour))
	var failing atomic.Bool
	failing.Store(true)
	var posts atomic.Int64
	hook := httptestServer(t, func(rw http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		if failing.Load() {
			http.Error(rw, "internal error at "+r.URL.Path, http.StatusInternalServerError)
		}
	})
	const secretPath = "/services/T000/B000/SECRETreportnotify"
	chat := w.with("RECONCILER_SLACK_WEBHOOK_URL", hook+secretPath)
	runID := func(r result) string {
		t.Helper()
		require.Equal(t, 0, r.code, r.stderr)
		var rep report.Report
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
		return itoa(rep.Runs[0].ID)
	}

	// A run posted by nobody, then an explicit --notify to a chat answering 500.
	quiet := runID(cli(t, w.env, "run", "--format", "json"))
	r := cli(t, chat, "report", "--run", quiet, "--notify")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "slack answered 500")
	require.NotContains(t, r.stderr, "SECRETreportnotify")
	require.Contains(t, r.stdout, "## Run "+quiet, "the report is written all the same")
	require.Equal(t, int64(5), posts.Load(), "5xx is retried up to the attempts allowed")
	r = cli(t, chat, "report", "--run", quiet, "--notify")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "delivery attempts exhausted")
	require.Equal(t, int64(5), posts.Load())

	// Posted by its run: --notify says so and posts nothing.
	failing.Store(false)
	posted := runID(cli(t, chat, "run", "--format", "json"))
	require.Equal(t, int64(6), posts.Load())
	r = cli(t, chat, "report", "--run", posted, "--notify")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `already posted to slack on \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC; not posted again`, r.stderr)
	require.Equal(t, int64(6), posts.Load())

	// A dry run is never posted, and --notify says why.
	dry := runID(cli(t, chat, "run", "--dry-run", "--format", "json"))
	r = cli(t, chat, "report", "--run", dry, "--notify")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "not posted: run "+dry+" is a dry run (dry runs are never posted)")
	require.Equal(t, int64(6), posts.Load())

	// No chat configured: a configuration error, nothing written.
	r = cli(t, w.env, "report", "--run", posted, "--notify")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "RECONCILER_SLACK_WEBHOOK_URL")
	require.Empty(t, r.stdout)
}

// report --link prints a fresh signed link to the report, which opens it
// until notify.report_link_ttl; a link key that is too short is a
// configuration error (exit 2) of run, serve and report alike, naming the
// key and never showing it.
func TestReportLinkAndLinkKeyErrors(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const key = "0123456789abcdef0123456789abcdef-cli-link-key"
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("notify:\n  report_url: https://reconciler.example/runs/{id}/report.html\n  report_link_ttl: 24h\n"), 0o600))
	r := cli(t, w.env, "run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	id := rep.Runs[0].ID

	env := w.with("RECONCILER_REPORT_LINK_KEY", key, "RECONCILER_CONFIG", cfg)
	before := time.Now()
	r = cli(t, env, "report", "--run", itoa(id), "--link")
	require.Equal(t, 0, r.code, r.stderr)
	u, err := url.Parse(strings.TrimSpace(r.stdout))
	require.NoError(t, err)
	require.Equal(t, "https://reconciler.example/runs/"+itoa(id)+"/report.html", u.Scheme+"://"+u.Host+u.Path)
	require.NoError(t, signedlink.Verify([]byte(key), id, u.Query(), before.Add(23*time.Hour)))
	var expired *signedlink.ExpiredError
	require.ErrorAs(t, signedlink.Verify([]byte(key), id, u.Query(), before.Add(25*time.Hour)), &expired)
	require.NotContains(t, r.stdout+r.stderr, key)

	r = cli(t, w.with("RECONCILER_CONFIG", cfg), "report", "--run", itoa(id), "--link")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "RECONCILER_REPORT_LINK_KEY")

	const short = "short-s3cr3t-key"
	for _, args := range [][]string{{"report", "--run", itoa(id), "--link"}, {"run", "--dry-run"}, {"serve"}} {
		r = cli(t, w.with("RECONCILER_REPORT_LINK_KEY", short, "RECONCILER_CONFIG", cfg), args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "RECONCILER_REPORT_LINK_KEY: the report link key is 16 bytes; at least 32 are needed", args)
		require.NotContains(t, r.stderr+r.stdout, short, args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %q", r.stderr)
	}
	keyFile := filepath.Join(t.TempDir(), "absent-link-key")
	bad := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("notify:\n  report_link_key_file: "+keyFile+"\n"), 0o600))
	r = cli(t, w.with("RECONCILER_CONFIG", bad), "serve")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "notify.report_link_key_file: cannot read the key file")
}
