package config

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

const h18cSecret = "h18cs3cr3tvalue"

// describeFixture loads a configuration with every secret set and a few
// values from each layer.
func describeFixture(t *testing.T) Config {
	t.Helper()
	env := map[string]string{
		"DATABASE_URL":                 "postgres://reconciler:" + h18cSecret + "@db:5432/payments?sslmode=disable",
		"STRIPE_API_KEY":               "sk_live_" + h18cSecret,
		"GOCARDLESS_ACCESS_TOKEN":      "sandbox_" + h18cSecret,
		"RECONCILER_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/" + h18cSecret,
		"RECONCILER_RUN_BATCH_SIZE":    "250",
		"LEVEL":                        "debug",
		"PUSH":                         "http://push:" + h18cSecret + "@pushgateway:9091",
	}
	files := map[string]string{
		"/etc/c.yaml": "run:\n  window: 90m\nlog:\n  level: ${LEVEL}\nmetrics:\n  pushgateway_url: ${PUSH}\n" +
			"notify:\n  report_link_key_file: /k\n  report_url: https://r.example/runs/{id}/report.html\n",
		"/k": "k" + h18cSecret + strings.Repeat("x", 32),
	}
	c, err := LoadEnv("/etc/c.yaml", true, lookupOf(env), fakeFS(files))
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	c.Run.LockWait = Duration(30e9)
	c.FromFlag("run.lock_wait", "--lock-wait")
	return c
}

func TestDescribeSourcesAndMasking(t *testing.T) {
	c := describeFixture(t)
	got := map[string]Setting{}
	for _, s := range c.Describe() {
		got[s.Key] = s
	}
	for _, f := range Fields() {
		assert.Contains(t, got, f.Key, "every key is described")
	}
	for key, want := range map[string]Setting{
		"database.url":                      {Value: "postgres://reconciler:****@db:5432/payments?sslmode=disable", Source: "DATABASE_URL"},
		"run.batch_size":                    {Value: 250, Source: "RECONCILER_RUN_BATCH_SIZE"},
		"run.window":                        {Value: "1h30m", Source: "/etc/c.yaml line 2"},
		"run.overlap":                       {Value: "1h", Source: "default"},
		"run.lock_wait":                     {Value: "30s", Source: "flag --lock-wait"},
		"log.level":                         {Value: "debug", Source: "${LEVEL} in /etc/c.yaml line 4"},
		"metrics.pushgateway_url":           {Value: "http://push:****@pushgateway:9091", Source: "${PUSH} in /etc/c.yaml line 6"},
		"providers.stripe.enabled":          {Value: nil, Source: "default"},
		"providers.stripe.accounts":         {Value: []string{""}, Source: "default"},
		"providers.stripe.api_key":          {Value: "sk_live_**** (23 characters)", Source: "STRIPE_API_KEY"},
		"providers.gocardless.access_token": {Value: "sandbox_**** (23 characters)", Source: "GOCARDLESS_ACCESS_TOKEN"},
		"notify.slack_webhook_url":          {Value: "**** (54 characters)", Source: "RECONCILER_SLACK_WEBHOOK_URL"},
		"notify.report_link_key":            {Value: "**** (48 characters)", Source: "the file named by notify.report_link_key_file"},
	} {
		want.Key = key
		assert.Equal(t, want, got[key], key)
	}
}

// No secret is in either output, wherever it was written.
func TestWriteNeverPrintsASecret(t *testing.T) {
	c := describeFixture(t)
	// Secrets pasted into the wrong keys (Describe validates nothing).
	c.Log.Format = "sk_live_" + h18cSecret
	c.Serve.Schedule = "xoxb-" + h18cSecret
	c.Providers.Stripe.Accounts = []string{"", "rk_test_" + h18cSecret}
	c.Notify.ReportURL = "https://r.example/?token=" + c.Providers.GoCardless.accessToken
	c.Providers.Stripe.APIKeyFile = "host=db password='" + h18cSecret + "' dbname=x"
	for _, format := range []string{"yaml", "json"} {
		var b bytes.Buffer
		require.NoError(t, c.Write(&b, format))
		assert.NotContains(t, b.String(), h18cSecret, format)
		assert.Contains(t, b.String(), "****", format)
	}
}

func TestWriteYAMLAndJSON(t *testing.T) {
	c := describeFixture(t)
	var y bytes.Buffer
	require.NoError(t, c.Write(&y, "yaml"))
	out := y.String()
	assert.Contains(t, out, "  batch_size: 250 # from RECONCILER_RUN_BATCH_SIZE\n")
	assert.Contains(t, out, "  overlap: 1h # default\n")
	assert.Contains(t, out, "  window: 1h30m # from /etc/c.yaml line 2\n")
	assert.Contains(t, out, "# Store: PostgreSQL\n")
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(y.Bytes(), &doc), "the output is YAML")
	assert.Equal(t, 250, doc["run"].(map[string]any)["batch_size"])

	var j bytes.Buffer
	require.NoError(t, c.Write(&j, "json"))
	var settings []Setting
	require.NoError(t, json.Unmarshal(j.Bytes(), &settings))
	require.NotEmpty(t, settings)
	assert.Equal(t, "database.url", settings[0].Key)
	assert.Equal(t, "DATABASE_URL", settings[0].Source)

	// The embedded store says so, and why.
	d, err := LoadEnv("c.yaml", false, lookupOf(nil), fakeFS(nil))
	require.NoError(t, err)
	y.Reset()
	require.NoError(t, d.Write(&y, "yaml"))
	assert.Contains(t, y.String(), "# Store: the embedded SQLite file reconciler.db (no database configured)\n")
}

func TestMask(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@db/x":                "postgres://u:****@db/x",
		"postgres://u@db/x":                   "postgres://u@db/x",
		"host=db password=pw dbname=x":        "host=db password=**** dbname=x",
		"host=db password='p w' dbname=x":     "host=db password=**** dbname=x",
		"postgres://db/x?password=pw&a=b":     "postgres://db/x?password=****&a=b",
		"postgres://u:p%zz@db/x":              "****",
		"sk_test_abc":                         "****",
		"https://hooks.slack.com/services/x":  "****",
		"https://api.stripe.com":              "https://api.stripe.com",
		"30 2 * * *":                          "30 2 * * *",
		"contains a known h18cknownsecret ok": "****",
	} {
		assert.Equal(t, want, mask(in, []string{"h18cknownsecret"}), in)
	}
}
