package main_test

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

// marker is in every secret the bad-input tests hand the binary: no output
// may ever contain it.
const marker = "SECRET-MARKER-"

// freshSchema is an empty schema (no migration) in the test server, and a
// DATABASE_URL for it whose password carries a secret marker (the
// throwaway server trusts every password). tables counts the tables in it,
// runs the rows of reconciliation_runs (0 when the table does not exist).
type freshSchema struct {
	url   string
	admin *gorm.DB
	name  string
}

var schemaSeq int

func newFreshSchema(t *testing.T) *freshSchema {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("DATABASE_URL is unset in CI; run the tests through scripts/test.sh")
		}
		t.Skip("DATABASE_URL is unset; run the tests through scripts/test.sh")
	}
	admin, err := gorm.Open(postgres.Open(base), &gorm.Config{Logger: logger.Discard})
	require.NoError(t, err)
	schemaSeq++
	name := fmt.Sprintf("bad_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, schemaSeq)
	require.NoError(t, admin.Exec(`CREATE SCHEMA `+name).Error)
	t.Cleanup(func() {
		_ = admin.Exec(`DROP SCHEMA ` + name + ` CASCADE`).Error
		if sqlDB, err := admin.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	u, err := url.Parse(pgtest.WithSchema(t, base, name))
	require.NoError(t, err)
	user := "postgres"
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, marker+"dbpassword")
	return &freshSchema{url: u.String(), admin: admin, name: name}
}

func (s *freshSchema) tables(t *testing.T) []string {
	var names []string
	require.NoError(t, s.admin.Raw(`SELECT table_name FROM information_schema.tables WHERE table_schema = ?`, s.name).Scan(&names).Error)
	return names
}

func (s *freshSchema) runRows(t *testing.T) int64 {
	var n int64
	if !strings.Contains(strings.Join(s.tables(t), ","), "reconciliation_runs") {
		return 0
	}
	require.NoError(t, s.admin.Raw(`SELECT count(*) FROM `+s.name+`.reconciliation_runs`).Scan(&n).Error)
	return n
}

// badEnv is an environment full of secrets, every one carrying marker.
func badEnv(dbURL, stripeBase string) map[string]string {
	return map[string]string{
		"DATABASE_URL":                 dbURL,
		"STRIPE_API_KEY":               "sk_test_" + marker + "stripe",
		"STRIPE_API_BASE":              stripeBase,
		"GOCARDLESS_ACCESS_TOKEN":      "sandbox_" + marker + "gocardless",
		"GOCARDLESS_API_BASE":          "http://127.0.0.1:9",
		"RECONCILER_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/" + marker + "slack",
		"RECONCILER_API_TOKENS":        "ops:" + marker + "token",
	}
}

// badCase is one bad input: the command line, the config file (passed
// with --config when not empty), extra environment ("" deletes), and
// what the one stderr line must name.
type badCase struct {
	name   string
	args   []string
	config string
	env    map[string]string
	want   string
	// noFix: the message is another room's and names no fix yet.
	noFix bool
}

func badCases(t *testing.T) []badCase {
	long := "acct_" + strings.Repeat("A", 100000)
	accountsFile := func(body string) string {
		p := filepath.Join(t.TempDir(), "accounts.txt")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	run := func(args ...string) []string { return append([]string{"run"}, args...) }
	stripeAcct := func(a string) []string { return run("--provider", "stripe", "--account", a) }
	cfg := func(key, value string) string { return yamlAt(key, value) }
	cases := []badCase{
		// --batch-size and the other integer flags.
		{name: "batch-size huge", args: run("--batch-size", "999999999999"), want: "--batch-size"},
		{name: "batch-size 0", args: run("--batch-size", "0"), want: "--batch-size"},
		{name: "batch-size negative", args: run("--batch-size", "-1"), want: "--batch-size"},
		{name: "batch-size above max", args: run("--batch-size", "100001"), want: "--batch-size"},
		{name: "batch-size fraction", args: run("--batch-size", "1.5"), want: "-batch-size"},
		{name: "batch-size word", args: run("--batch-size", "lots"), want: "-batch-size"},
		{name: "batch-size overflow", args: run("--batch-size", "99999999999999999999999"), want: "-batch-size"},
		{name: "concurrency 0", args: run("--concurrency", "0"), want: "--concurrency"},
		{name: "concurrency 65", args: run("--concurrency", "65"), want: "--concurrency"},
		{name: "concurrency negative", args: run("--concurrency", "-3"), want: "--concurrency"},
		{name: "concurrency huge", args: run("--concurrency", "1000000"), want: "--concurrency"},
		// Durations on the command line.
		{name: "lock-wait negative", args: run("--lock-wait", "-5s"), want: "--lock-wait"},
		{name: "lock-wait huge", args: run("--lock-wait", "100000h"), want: "--lock-wait"},
		{name: "lock-wait word", args: run("--lock-wait", "soon"), want: "--lock-wait"},
		{name: "lock-wait empty", args: run("--lock-wait", ""), want: "--lock-wait"},
		{name: "window 0s", args: run("--window", "0s"), want: "--window"},
		{name: "window negative", args: run("--window", "-5s"), want: "--window"},
		{name: "window huge", args: run("--window", "100000h"), want: "--window"},
		{name: "window NaN", args: run("--window", "NaN"), want: "--window"},
		{name: "window no unit", args: run("--window", "1"), want: "--window"},
		{name: "window below a minute", args: run("--window", "30s"), want: "--window"},
		{name: "window empty", args: run("--window", ""), want: "--window"},
		// Times.
		{name: "since year 1", args: run("--since", "0001-01-01"), want: "--since"},
		{name: "since 1999", args: run("--since", "1999-12-31"), want: "--since"},
		{name: "since epoch", args: run("--since", "1970-01-01T00:00:00Z"), want: "--since"},
		{name: "since words", args: run("--since", "last tuesday"), want: "--since"},
		{name: "since month 13", args: run("--since", "2026-13-01"), want: "--since"},
		{name: "since with newline", args: run("--since", "2026-11-01\nFAKE LOG LINE"), want: "--since"},
		{name: "until year 1", args: run("--until", "0001-01-01"), want: "--until"},
		{name: "until year 10000", args: run("--until", "10000-01-01"), want: "--until"},
		{name: "since after until", args: run("--since", "2026-11-02", "--until", "2026-11-01"), want: "--since"},
		{name: "since equals until", args: run("--since", "2026-11-01", "--until", "2026-11-01"), want: "--since"},
		// Other flags.
		{name: "format pdf", args: run("--format", "pdf"), want: "--format"},
		{name: "format with newline", args: run("--format", "md\nFAKE LOG LINE"), want: "--format"},
		{name: "format empty", args: run("--format", ""), want: "--format"},
		{name: "trigger unknown", args: run("--trigger", "cron"), want: "--trigger"},
		{name: "provider unknown", args: run("--provider", "paypal"), want: "--provider"},
		{name: "provider with newline", args: run("--provider", "stripe\nFAKE LOG LINE"), want: "--provider"},
		{name: "unknown flag", args: run("--bogus"), want: "-bogus"},
		{name: "positional argument", args: run("extra"), want: "unexpected argument"},
		{name: "shard out of range", args: run("--shard", "9/8"), want: "--shard"},
		{name: "shard words", args: run("--shard", "half"), want: "--shard"},
		{name: "accounts-from missing file", args: run("--accounts-from", "/nonexistent/accounts.txt"), want: "--accounts-from"},
		{name: "accounts-from SQL", args: run("--accounts-from", accountsFile("acct_1'; DROP TABLE payments; --\n")), want: "--accounts-from"},
		{name: "accounts-from too long", args: run("--accounts-from", accountsFile(long+"\n")), want: "--accounts-from"},
		{name: "accounts-from empty", args: run("--accounts-from", accountsFile("# none\n")), want: "--accounts-from"},
		{name: "accounts-from and account", args: run("--provider", "stripe", "--accounts-from", accountsFile("acct_1\n"), "--account", "acct_2"), want: "--accounts-from"},
		// Account ids.
		{name: "account newline", args: stripeAcct("acct_1\nFAKE LOG LINE"), want: "--account"},
		{name: "account CRLF", args: stripeAcct("acct_1\r\nFAKE LOG LINE"), want: "--account"},
		{name: "account SQL", args: stripeAcct("acct_1'; DROP TABLE payments; --"), want: "--account"},
		{name: "account RLO", args: stripeAcct("acct_1\u202egnp.exe"), want: "--account"},
		{name: "account 100000 characters", args: stripeAcct(long), want: "--account"},
		{name: "account 65 characters", args: stripeAcct("acct_" + strings.Repeat("a", 65)), want: "--account"},
		{name: "account prefix only", args: stripeAcct("acct_"), want: "--account"},
		{name: "account customer id", args: stripeAcct("cus_123"), want: "--account"},
		{name: "account upper prefix", args: stripeAcct("ACCT_1"), want: "--account"},
		{name: "account leading space", args: stripeAcct(" acct_1"), want: "--account"},
		{name: "account dash", args: stripeAcct("acct_1-2"), want: "--account"},
		{name: "account accent", args: stripeAcct("acct_é"), want: "--account"},
		{name: "account tab", args: stripeAcct("acct_1\t"), want: "--account"},
		{name: "account ANSI escape", args: stripeAcct("acct_1\x1b[2J"), want: "--account"},
		{name: "account for gocardless", args: run("--provider", "gocardless", "--account", "acct_1"), want: "--account"},
		// Configuration keys: ranges, NaN, types.
		{name: "cfg batch_size fraction", config: cfg("run.batch_size", "1.5"), want: "run.batch_size"},
		{name: "cfg batch_size 0", config: cfg("run.batch_size", "0"), want: "run.batch_size"},
		{name: "cfg batch_size above max", config: cfg("run.batch_size", "100001"), want: "run.batch_size"},
		{name: "cfg batch_size word", config: cfg("run.batch_size", "lots"), want: "run.batch_size"},
		{name: "cfg window 0s", config: cfg("run.window", "0s"), want: "run.window"},
		{name: "cfg window negative", config: cfg("run.window", "-5s"), want: "run.window"},
		{name: "cfg window huge", config: cfg("run.window", "100000h"), want: "run.window"},
		{name: "cfg window unset variable", config: cfg("run.window", "${UNSET}"), want: "run.window"},
		{name: "cfg window word", config: cfg("run.window", "yesterday"), want: "run.window"},
		{name: "cfg overlap negative", config: cfg("run.overlap", "-1s"), want: "run.overlap"},
		{name: "cfg overlap huge", config: cfg("run.overlap", "1000h"), want: "run.overlap"},
		{name: "cfg stuck_after 0s", config: cfg("run.stuck_after", "0s"), want: "run.stuck_after"},
		{name: "cfg stuck_limit huge", config: cfg("run.stuck_limit", "2000000000"), want: "run.stuck_limit"},
		{name: "cfg stuck_limit -2", config: cfg("run.stuck_limit", "-2"), want: "run.stuck_limit"},
		{name: "cfg shutdown_grace 0s", config: cfg("run.shutdown_grace", "0s"), want: "run.shutdown_grace"},
		{name: "cfg shutdown_grace negative", config: cfg("run.shutdown_grace", "-5s"), want: "run.shutdown_grace"},
		{name: "cfg shutdown_grace huge", config: cfg("run.shutdown_grace", "2h"), want: "run.shutdown_grace"},
		{name: "cfg lock_wait negative", config: cfg("run.lock_wait", "-1s"), want: "run.lock_wait"},
		{name: "cfg lock_wait huge", config: cfg("run.lock_wait", "48h"), want: "run.lock_wait"},
		{name: "cfg max_open_conns huge", config: cfg("database.max_open_conns", "1000000"), want: "database.max_open_conns"},
		{name: "cfg max_open_conns 1", config: cfg("database.max_open_conns", "1"), want: "database.max_open_conns"},
		{name: "cfg stripe rps nan", config: cfg("providers.stripe.requests_per_second", ".nan"), want: "providers.stripe.requests_per_second"},
		{name: "cfg stripe rps inf", config: cfg("providers.stripe.requests_per_second", ".inf"), want: "providers.stripe.requests_per_second"},
		{name: "cfg stripe rps -inf", config: cfg("providers.stripe.requests_per_second", "-.inf"), want: "providers.stripe.requests_per_second"},
		{name: "cfg stripe rps 0", config: cfg("providers.stripe.requests_per_second", "0"), want: "providers.stripe.requests_per_second"},
		{name: "cfg stripe rps 5000", config: cfg("providers.stripe.requests_per_second", "5000"), want: "providers.stripe.requests_per_second"},
		{name: "cfg stripe max_retries huge", config: cfg("providers.stripe.max_retries", "1000000000"), want: "providers.stripe.max_retries"},
		{name: "cfg stripe max_retries negative", config: cfg("providers.stripe.max_retries", "-1"), want: "providers.stripe.max_retries"},
		{name: "cfg stripe timeout huge", config: cfg("providers.stripe.timeout", "100000h"), want: "providers.stripe.timeout"},
		{name: "cfg stripe timeout 0s", config: cfg("providers.stripe.timeout", "0s"), want: "providers.stripe.timeout"},
		{name: "cfg gocardless rps nan", config: cfg("providers.gocardless.requests_per_second", ".nan"), want: "providers.gocardless.requests_per_second"},
		{name: "cfg gocardless max_retries huge", config: cfg("providers.gocardless.max_retries", "1000000000"), want: "providers.gocardless.max_retries"},
		{name: "cfg gocardless timeout huge", config: cfg("providers.gocardless.timeout", "100000h"), want: "providers.gocardless.timeout"},
		{name: "cfg gocardless working days 0", config: cfg("providers.gocardless.stuck_after_working_days", "0"), want: "providers.gocardless.stuck_after_working_days"},
		{name: "cfg gocardless working days 61", config: cfg("providers.gocardless.stuck_after_working_days", "61"), want: "providers.gocardless.stuck_after_working_days"},
		{name: "cfg gocardless retention negative", config: cfg("providers.gocardless.event_retention", "-1h"), want: "providers.gocardless.event_retention"},
		{name: "cfg account newline", config: cfg("providers.stripe.accounts", `["acct_1\nFAKE LOG LINE"]`), args: run("--provider", "stripe"), want: "providers.stripe.accounts[0]"},
		{name: "cfg account customer", config: cfg("providers.stripe.accounts", `["cus_1"]`), want: "providers.stripe.accounts[0]"},
		{name: "cfg accounts not a list", config: cfg("providers.stripe.accounts", "acct_1"), want: "providers.stripe.accounts"},
		{name: "cfg enabled maybe", config: cfg("providers.stripe.enabled", "maybe"), want: "providers.stripe.enabled"},
		{name: "cfg log level unknown", config: cfg("log.level", "verbose"), want: "log.level"},
		{name: "cfg log format unknown", config: cfg("log.format", "xml"), want: "log.format"},
		{name: "cfg schedule bad", config: cfg("serve.schedule", `"every tuesday"`), want: "serve.schedule"},
		{name: "cfg time zone unknown", config: cfg("serve.time_zone", "Mars/Olympus"), want: "serve.time_zone"},
		{name: "cfg http addr no port", config: cfg("serve.http_addr", "localhost"), want: "serve.http_addr"},
		{name: "cfg pushgateway not http", config: cfg("metrics.pushgateway_url", "ftp://x"), want: "metrics.pushgateway_url"},
		{name: "cfg stripe api_base not http", config: cfg("providers.stripe.api_base", "not-a-url"), env: map[string]string{"STRIPE_API_BASE": ""}, want: "providers.stripe.api_base"},
		{name: "cfg unknown key", config: "run:\n  windw: 24h\n", want: "run.windw"},
		{name: "cfg unknown top-level key", config: "databse:\n  url: x\n", want: "databse"},
		{name: "cfg malformed", config: "run: [\n", want: "config.yaml"},
		{name: "cfg run not a mapping", config: "run: 5\n", want: "run"},
		{name: "cfg database url unset variable", config: cfg("database.url", "${UNSET_DB}"), want: "database.url"},
		{name: "cfg holidays file missing", config: cfg("providers.gocardless.holidays_file", "/nonexistent/holidays.txt"), args: run("--provider", "gocardless"), want: "providers.gocardless.holidays_file"},
		{name: "cfg key file missing", config: cfg("providers.stripe.api_key_file", "/nonexistent/key"), env: map[string]string{"STRIPE_API_KEY": ""}, want: "providers.stripe.api_key_file"},
		// Secrets placed where they do not belong: named, never printed.
		{name: "secret DATABASE_URL in a duration", config: cfg("run.window", "${DATABASE_URL}"), want: "run.window: the value from ${DATABASE_URL} is not a duration"},
		{name: "secret STRIPE_API_KEY in log.level", config: cfg("log.level", "${STRIPE_API_KEY}"), want: "log.level: unknown level the value from ${STRIPE_API_KEY}"},
		{name: "secret STRIPE_API_KEY in batch_size", config: cfg("run.batch_size", "${STRIPE_API_KEY}"), want: "run.batch_size"},
		{name: "secret token in log.format", config: cfg("log.format", "${GOCARDLESS_ACCESS_TOKEN}"), want: "log.format"},
		{name: "secret key in schedule", config: cfg("serve.schedule", "${STRIPE_API_KEY}"), want: "serve.schedule"},
		{name: "secret slack url in time zone", config: cfg("serve.time_zone", "${RECONCILER_SLACK_WEBHOOK_URL}"), want: "serve.time_zone"},
		{name: "secret tokens in rps", config: cfg("providers.stripe.requests_per_second", "${RECONCILER_API_TOKENS}"), want: "providers.stripe.requests_per_second"},
		{name: "secret key in enabled", config: cfg("providers.stripe.enabled", "${STRIPE_API_KEY}"), want: "providers.stripe.enabled"},
		{name: "secret key in account", config: cfg("providers.stripe.accounts", `["${STRIPE_API_KEY}"]`), want: "providers.stripe.accounts[0]"},
		{name: "secret url in pushgateway", config: cfg("metrics.pushgateway_url", "${DATABASE_URL}"), want: "metrics.pushgateway_url"},
		// The environment.
		{name: "env stripe base not http", env: map[string]string{"STRIPE_API_BASE": "ftp://" + marker + "base"}, want: "providers.stripe.api_base"},
		{name: "env gocardless base not http", env: map[string]string{"GOCARDLESS_API_BASE": "ftp://" + marker + "base"}, want: "providers.gocardless.api_base"},
		{name: "env http addr", env: map[string]string{"RECONCILER_HTTP_ADDR": marker + "addr"}, want: "serve.http_addr"},
		{name: "env pushgateway", env: map[string]string{"RECONCILER_PUSHGATEWAY_URL": "ftp://" + marker + "push"}, want: "metrics.pushgateway_url"},
		{name: "env slack not http", env: map[string]string{"RECONCILER_SLACK_WEBHOOK_URL": "ftp://" + marker + "slack"}, want: "RECONCILER_SLACK_WEBHOOK_URL"},
		{name: "env publishable key", env: map[string]string{"STRIPE_API_KEY": "pk_test_" + marker + "pk"}, want: "STRIPE_API_KEY"},
		{name: "env no stripe key", args: run("--provider", "stripe"), env: map[string]string{"STRIPE_API_KEY": ""}, want: "STRIPE_API_KEY"},
		{name: "env no gocardless token", args: run("--provider", "gocardless"), env: map[string]string{"GOCARDLESS_ACCESS_TOKEN": ""}, want: "GOCARDLESS_ACCESS_TOKEN"},
		{name: "env no provider at all", env: map[string]string{"STRIPE_API_KEY": "", "GOCARDLESS_ACCESS_TOKEN": ""}, want: "providers"},
		{name: "env config missing", env: map[string]string{"RECONCILER_CONFIG": "/nonexistent/config.yaml"}, want: "--config"},
		{name: "config flag missing", args: run("--config", "/nonexistent/config.yaml"), want: "--config"},
		// Other commands.
		{name: "report history 1001", args: []string{"report", "--history", "1001"}, want: "--history"},
		{name: "report history negative", args: []string{"report", "--history", "-1"}, want: "--history"},
		{name: "report run negative", args: []string{"report", "--run", "-5"}, want: "--run"},
		{name: "report nothing", args: []string{"report"}, want: "--run"},
		{name: "report format", args: []string{"report", "--last", "--format", "pdf"}, want: "--format"},
		{name: "report account without provider", args: []string{"report", "--last", "--account", "acct_1"}, want: "--account"},
		{name: "report bad config", args: []string{"report", "--last"}, config: cfg("run.window", "${DATABASE_URL}"), want: "run.window"},
		{name: "verify sample 0", args: []string{"verify", "--sample", "0"}, want: "--sample"},
		{name: "verify sample huge", args: []string{"verify", "--sample", "2000000"}, want: "--sample"},
		{name: "verify sample and all", args: []string{"verify", "--all", "--sample", "5"}, want: "--sample"},
		{name: "verify output yaml", args: []string{"verify", "-o", "yaml"}, want: "-o"},
		{name: "verify seed negative", args: []string{"verify", "--seed", "-1"}, want: "--seed"},
		{name: "verify since year 1", args: []string{"verify", "--since", "0001-01-01"}, want: "--since"},
		{name: "verify account newline", args: []string{"verify", "--provider", "stripe", "--account", "acct_1\nFAKE LOG LINE"}, want: "--account"},
		{name: "verify bad config", args: []string{"verify"}, config: cfg("run.shutdown_grace", "0s"), want: "run.shutdown_grace"},
		{name: "demo payments negative", args: []string{"demo", "--payments", "-1"}, want: "--payments"},
		{name: "demo payments huge", args: []string{"demo", "--payments", "999999999999"}, want: "--payments"},
		{name: "demo seed negative", args: []string{"demo", "--seed", "-1"}, want: "--seed"},
		{name: "migrate bad config", args: []string{"migrate"}, config: cfg("run.window", "${UNSET}"), want: "run.window"},
		{name: "migrate argument", args: []string{"migrate", "now"}, want: "unexpected argument"},
		{name: "unknown command", args: []string{"frobnicate"}, want: "unknown command"},
	}
	return cases
}

// yamlAt writes value at the dotted key.
func yamlAt(key, value string) string {
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i == len(parts)-1 {
			b.WriteString(" " + value)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestBadInputsExit2WithOneLineTouchNothingAndEchoNoSecret is issue 12
// from outside: every bad input exits 2 with exactly one stderr line that
// names the key or flag and the fix, creates no table and writes no row
// in a fresh schema, and no output holds a secret.
func TestBadInputsExit2WithOneLineTouchNothingAndEchoNoSecret(t *testing.T) {
	t.Parallel()
	schema := newFreshSchema(t)
	fake := stripefake.New(stripefake.Options{Seed: 1})
	stripeBase := fake.Start()
	t.Cleanup(fake.Close)
	cases := badCases(t)
	require.GreaterOrEqual(t, len(cases), 100)
	fix := []string{"(", "use ", "write ", "set ", "export ", "give ", "run ", "pass ", "swap", "list "}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := badEnv(schema.url, stripeBase)
			for k, v := range c.env {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			args := c.args
			if len(args) == 0 {
				args = []string{"run"}
			}
			if c.config != "" {
				args = append([]string{args[0], "--config", writeFile(t, c.config)}, args[1:]...)
			}
			r := cli(t, env, args...)
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			require.Equal(t, 2, r.code, "%s: exit %d\n%s", c.name, r.code, r.stderr)
			require.Len(t, lines, 1, "%s: one stderr line:\n%s", c.name, r.stderr)
			line := lines[0]
			require.True(t, strings.HasPrefix(line, "reconciler: "), "%s: %s", c.name, line)
			require.Contains(t, line, c.want, c.name)
			require.Less(t, len(line), 600, "%s: %s", c.name, line)
			if !c.noFix {
				hasFix := false
				for _, f := range fix {
					hasFix = hasFix || strings.Contains(line, f)
				}
				require.True(t, hasFix, "%s names no fix: %s", c.name, line)
			}
			require.NotContains(t, r.stdout+r.stderr, marker, "%s: a secret was printed", c.name)
			require.NotContains(t, r.stdout+r.stderr, "\u202e", c.name)
			require.NotContains(t, r.stdout+r.stderr, "\x1b", c.name)
			require.Empty(t, r.stdout, c.name)
			require.Empty(t, schema.tables(t), "%s: created a table", c.name)
		})
	}
	t.Logf("%d bad inputs: each exit 2, one line, nothing written, no secret", len(cases))
}

// A window ending in the future is exit 2 before anything touches the
// database (the command checks the clock's part of the engine's window
// check first): no table, no run row.
func TestBadInputsWindowTheEngineRefusesWritesNoRun(t *testing.T) {
	t.Parallel()
	schema := newFreshSchema(t)
	fake := stripefake.New(stripefake.Options{Seed: 1})
	stripeBase := fake.Start()
	t.Cleanup(fake.Close)
	env := badEnv(schema.url, stripeBase)
	delete(env, "GOCARDLESS_ACCESS_TOKEN")
	delete(env, "RECONCILER_SLACK_WEBHOOK_URL")
	for _, until := range []string{time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339), "9999-12-31"} {
		r := cli(t, env, "run", "--until", until)
		require.Equal(t, 2, r.code, "--until %s: %s", until, r.stderr)
		require.Contains(t, r.stderr, "--until")
		require.NotContains(t, r.stdout+r.stderr, marker)
		require.Empty(t, schema.tables(t), "--until %s created a table", until)
	}
	// In mode events, a window wholly before the provider's event
	// retention is the engine's to refuse (it knows the horizon): exit 2,
	// and no run row, though the migrations ran first. (Mode auto lists it.)
	r := cli(t, env, "run", "--since", "2006-01-01", "--until", "2016-01-01", "--mode", "events")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "window")
	require.NotContains(t, r.stdout+r.stderr, marker)
	require.Zero(t, schema.runRows(t), "an inverted window wrote a run row")
}

// A report that cannot be written is a failed command, whatever its
// format: --report /dev/full, --output /dev/full and stdout on a full disk.
func TestReportToAFullDiskFails(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	t.Parallel()
	w := newWorld(t)
	pi := w.acct.CreatePayment(4200, "gbp", false, w.now.Add(-3*time.Hour))
	w.acct.Capture(pi, w.now.Add(-3*time.Hour+time.Minute))
	for _, format := range []string{"md", "text", "json", "csv", "html"} {
		r := cli(t, w.env, "run", "--report", "/dev/full", "--format", format)
		require.Equal(t, 1, r.code, "run --report /dev/full --format %s: %s", format, r.stderr)
		require.Contains(t, r.stderr, "report", format)
	}
	runs := w.runs(t)
	require.NotEmpty(t, runs)
	id := fmt.Sprint(runs[0].ID)
	for _, format := range []string{"md", "text", "json", "csv", "html"} {
		r := cli(t, w.env, "report", "--run", id, "--output", "/dev/full", "--format", format)
		require.Equal(t, 1, r.code, "report --output /dev/full --format %s: %s", format, r.stderr)
		r = cli(t, w.env, "report", "--history", "5", "--output", "/dev/full", "--format", format)
		require.Equal(t, 1, r.code, "report --history --output /dev/full --format %s: %s", format, r.stderr)

		full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		require.NoError(t, err)
		cmd := exec.Command(binary, "report", "--run", id, "--format", format)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range w.env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Stdout = full
		err = cmd.Run()
		full.Close()
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "report to a full stdout in %s exits non-zero: %v", format, err)
		require.Equal(t, 1, ee.ExitCode(), format)
	}
}
