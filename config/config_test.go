package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeEnv is a map-backed getenv.
func fakeEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// fakeFS is a map-backed readFile; a missing name is fs.ErrNotExist, a name
// mapped to nil is a permission error.
func fakeFS(m map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		v, ok := m[name]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		if v == "\x00unreadable" {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
		return []byte(v), nil
	}
}

func asConfigError(t *testing.T, err error) *Error {
	t.Helper()
	require.Error(t, err)
	var ce *Error
	require.True(t, errors.As(err, &ce), "want *config.Error, got %T: %v", err, err)
	return ce
}

func TestLoad(t *testing.T) {
	const secret = "sk_test_s3cr3t"
	tests := []struct {
		name      string
		path      string
		mustExist bool
		env       map[string]string
		files     map[string]string
		check     func(t *testing.T, c Config)
		errKey    string   // expected *Error.Key; "" means no error
		errHas    []string // substrings of the error text
		errHasNot []string // never in the error text
	}{
		{
			name: "default file missing gives defaults",
			path: "config.yaml",
			check: func(t *testing.T, c Config) {
				want := Default()
				assert.Equal(t, want, c)
				assert.Equal(t, "", c.Providers.Stripe.APIKey())
				assert.False(t, c.Providers.Stripe.On())
			},
		},
		{
			name: "default file missing still applies the environment",
			path: "config.yaml",
			env:  map[string]string{"DATABASE_URL": "postgres://db/x", "STRIPE_API_KEY": secret, "STRIPE_API_BASE": "http://localhost:12111"},
			check: func(t *testing.T, c Config) {
				assert.Equal(t, "postgres://db/x", c.Database.URL)
				assert.Equal(t, secret, c.Providers.Stripe.APIKey())
				assert.Equal(t, "http://localhost:12111", c.Providers.Stripe.APIBase)
				assert.True(t, c.Providers.Stripe.On())
			},
		},
		{
			name:      "explicit missing file is an error naming --config",
			path:      "/etc/reconciler/nope.yaml",
			mustExist: true,
			errKey:    "--config",
			errHas:    []string{"--config", "nope.yaml"},
		},
		{
			name:   "unreadable default file is an error naming --config",
			path:   "config.yaml",
			files:  map[string]string{"config.yaml": "\x00unreadable"},
			errKey: "--config",
		},
		{
			name:  "empty file gives defaults",
			path:  "c.yaml",
			files: map[string]string{"c.yaml": ""},
			check: func(t *testing.T, c Config) { assert.Equal(t, Default(), c) },
		},
		{
			name:  "comments-only file gives defaults",
			path:  "c.yaml",
			files: map[string]string{"c.yaml": "# nothing here\n"},
			check: func(t *testing.T, c Config) { assert.Equal(t, Default(), c) },
		},
		{
			name:  "file values override defaults, unset keys keep defaults",
			path:  "c.yaml",
			files: map[string]string{"c.yaml": "run:\n  window: 90m\n  batch_size: 50\nlog:\n  level: debug\n"},
			check: func(t *testing.T, c Config) {
				assert.Equal(t, 90*time.Minute, c.Run.Window.D())
				assert.Equal(t, 50, c.Run.BatchSize)
				assert.Equal(t, "debug", c.Log.Level)
				assert.Equal(t, time.Hour, c.Run.Overlap.D(), "default kept")
				assert.Equal(t, "auto", c.Log.Format, "default kept")
			},
		},
		{
			name:  "${VAR} expansion",
			path:  "c.yaml",
			env:   map[string]string{"LEVEL": "warn", "RPS": "7.5"},
			files: map[string]string{"c.yaml": "log:\n  level: ${LEVEL}\nproviders:\n  stripe:\n    requests_per_second: ${RPS}\n"},
			check: func(t *testing.T, c Config) {
				assert.Equal(t, "warn", c.Log.Level)
				assert.Equal(t, 7.5, c.Providers.Stripe.RequestsPerSecond)
			},
		},
		{
			name:  "${VAR:-default} uses the default when unset",
			path:  "c.yaml",
			files: map[string]string{"c.yaml": "log:\n  level: ${LEVEL:-error}\n  format: ${FMT:-text}\n"},
			check: func(t *testing.T, c Config) {
				assert.Equal(t, "error", c.Log.Level)
				assert.Equal(t, "text", c.Log.Format)
			},
		},
		{
			name:  "${VAR:-default} uses the default when empty",
			path:  "c.yaml",
			env:   map[string]string{"LEVEL": ""},
			files: map[string]string{"c.yaml": "log:\n  level: ${LEVEL:-error}\n"},
			check: func(t *testing.T, c Config) { assert.Equal(t, "error", c.Log.Level) },
		},
		{
			name:  "${VAR:-default} uses the variable when set",
			path:  "c.yaml",
			env:   map[string]string{"LEVEL": "debug"},
			files: map[string]string{"c.yaml": "log:\n  level: ${LEVEL:-error}\n"},
			check: func(t *testing.T, c Config) { assert.Equal(t, "debug", c.Log.Level) },
		},
		{
			name:   "${VAR} unset without a default is an error naming the key and the variable",
			path:   "c.yaml",
			files:  map[string]string{"c.yaml": "database:\n  url: ${DATABASE_URL}\n"},
			errKey: "database.url",
			errHas: []string{"${DATABASE_URL} is not set", "${DATABASE_URL:-default}"},
		},
		{
			name:  "${VAR:-} allows it unset",
			path:  "c.yaml",
			files: map[string]string{"c.yaml": "database:\n  url: ${DATABASE_URL:-}\n"},
			check: func(t *testing.T, c Config) { assert.Equal(t, "", c.Database.URL) },
		},
		{
			name:  "env DATABASE_URL and STRIPE_API_BASE override the file",
			path:  "c.yaml",
			env:   map[string]string{"DATABASE_URL": "postgres://env/db", "STRIPE_API_BASE": "http://fake:1"},
			files: map[string]string{"c.yaml": "database:\n  url: postgres://file/db\nproviders:\n  stripe:\n    api_base: https://file.example\n"},
			check: func(t *testing.T, c Config) {
				assert.Equal(t, "postgres://env/db", c.Database.URL)
				assert.Equal(t, "http://fake:1", c.Providers.Stripe.APIBase)
			},
		},
		{
			name:  "file values kept when env is unset",
			path:  "c.yaml",
			files: map[string]string{"c.yaml": "database:\n  url: postgres://file/db\nproviders:\n  stripe:\n    api_base: https://file.example\n"},
			check: func(t *testing.T, c Config) {
				assert.Equal(t, "postgres://file/db", c.Database.URL)
				assert.Equal(t, "https://file.example", c.Providers.Stripe.APIBase)
			},
		},
		{
			name:  "STRIPE_API_KEY from env wins over the key file",
			path:  "c.yaml",
			env:   map[string]string{"STRIPE_API_KEY": secret},
			files: map[string]string{"c.yaml": "providers:\n  stripe:\n    api_key_file: /k\n", "/k": "sk_test_fromfile\n"},
			check: func(t *testing.T, c Config) {
				assert.Equal(t, secret, c.Providers.Stripe.APIKey())
				assert.True(t, c.Providers.Stripe.On())
			},
		},
		{
			name:  "STRIPE_API_KEY env set, key file unreadable is not read",
			path:  "c.yaml",
			env:   map[string]string{"STRIPE_API_KEY": secret},
			files: map[string]string{"c.yaml": "providers:\n  stripe:\n    api_key_file: /missing\n"},
			check: func(t *testing.T, c Config) { assert.Equal(t, secret, c.Providers.Stripe.APIKey()) },
		},
		{
			name:  "key from api_key_file, whitespace trimmed",
			path:  "c.yaml",
			files: map[string]string{"c.yaml": "providers:\n  stripe:\n    api_key_file: /var/run/secrets/k\n", "/var/run/secrets/k": "  \t" + secret + "\r\n\n"},
			check: func(t *testing.T, c Config) {
				assert.Equal(t, secret, c.Providers.Stripe.APIKey())
				assert.True(t, c.Providers.Stripe.On())
			},
		},
		{
			name:      "missing key file is an error naming api_key_file without the key",
			path:      "c.yaml",
			files:     map[string]string{"c.yaml": "providers:\n  stripe:\n    api_key_file: /var/run/secrets/k\n"},
			errKey:    "providers.stripe.api_key_file",
			errHas:    []string{"providers.stripe.api_key_file"},
			errHasNot: []string{secret},
		},
		{
			name:      "unreadable key file is an error naming api_key_file without the key",
			path:      "c.yaml",
			files:     map[string]string{"c.yaml": "providers:\n  stripe:\n    api_key_file: /k\n", "/k": "\x00unreadable"},
			errKey:    "providers.stripe.api_key_file",
			errHas:    []string{"providers.stripe.api_key_file"},
			errHasNot: []string{secret, "unreadable"},
		},
		{
			name:   "unknown key names the key",
			path:   "c.yaml",
			files:  map[string]string{"c.yaml": "run:\n  windw: 24h\n"},
			errKey: "run.windw",
			errHas: []string{"not a known key", "c.yaml line 2"},
		},
		{
			name:   "unknown top-level key names the key",
			path:   "c.yaml",
			files:  map[string]string{"c.yaml": "databse:\n  url: x\n"},
			errKey: "databse",
			errHas: []string{"not a known key"},
		},
		{
			name:   "bad duration names the key and the line",
			path:   "c.yaml",
			files:  map[string]string{"c.yaml": "# comment\nrun:\n  window: 24x\n"},
			errKey: "run.window",
			errHas: []string{"c.yaml line 3", `"24x"`, "not a duration", "24h"},
		},
		{
			name:      "bad duration after expansion",
			path:      "c.yaml",
			env:       map[string]string{"W": "tomorrow"},
			files:     map[string]string{"c.yaml": "run:\n  window: ${W}\n"},
			errKey:    "run.window",
			errHas:    []string{"line 2", "the value from ${W} is not a duration"},
			errHasNot: []string{"tomorrow"},
		},
		{
			name:   "wrong type",
			path:   "c.yaml",
			files:  map[string]string{"c.yaml": "run:\n  batch_size: lots\n"},
			errKey: "run.batch_size",
			errHas: []string{`"lots" is not a whole number`},
		},
		{
			name:   "malformed yaml",
			path:   "c.yaml",
			files:  map[string]string{"c.yaml": "run: [\n"},
			errKey: "c.yaml",
		},
		{
			name:  "explicit enabled false kept",
			path:  "c.yaml",
			env:   map[string]string{"STRIPE_API_KEY": secret},
			files: map[string]string{"c.yaml": "providers:\n  stripe:\n    enabled: false\n"},
			check: func(t *testing.T, c Config) {
				require.NotNil(t, c.Providers.Stripe.Enabled)
				assert.False(t, c.Providers.Stripe.On())
			},
		},
		{
			name:  "accounts replace the default list",
			path:  "c.yaml",
			files: map[string]string{"c.yaml": "providers:\n  stripe:\n    accounts: [\"\", acct_1]\n"},
			check: func(t *testing.T, c Config) {
				assert.Equal(t, []string{"", "acct_1"}, c.Providers.Stripe.Accounts)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.path, tc.mustExist, fakeEnv(tc.env), fakeFS(tc.files))
			if tc.errKey == "" {
				require.NoError(t, err)
				tc.check(t, c)
				return
			}
			ce := asConfigError(t, err)
			assert.Equal(t, tc.errKey, ce.Key)
			for _, s := range tc.errHas {
				assert.Contains(t, err.Error(), s)
			}
			for _, s := range tc.errHasNot {
				assert.NotContains(t, err.Error(), s)
			}
		})
	}
}

// TestLoadRealFS checks Load against the real filesystem errors.
func TestLoadRealFS(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir+"/absent.yaml", false, fakeEnv(nil), os.ReadFile)
	require.NoError(t, err, "a missing default file is not an error")
	_, err = Load(dir+"/absent.yaml", true, fakeEnv(nil), os.ReadFile)
	assert.Equal(t, "--config", asConfigError(t, err).Key)
}

func TestRepositoryConfigYAML(t *testing.T) {
	b, err := os.ReadFile("../config.yaml")
	require.NoError(t, err)
	files := map[string]string{"config.yaml": string(b)}
	for _, env := range []map[string]string{
		{"DATABASE_URL": "postgres://reconciler:pw@db:5432/reconciler?sslmode=disable"},
		{"DATABASE_URL": "host=db user=reconciler password=pw dbname=reconciler sslmode=disable"},
		{},
	} {
		t.Run(fmt.Sprintf("DATABASE_URL=%q", env["DATABASE_URL"]), func(t *testing.T) {
			c, err := Load("config.yaml", true, fakeEnv(env), fakeFS(files))
			require.NoError(t, err)
			require.NoError(t, c.Validate())
			assert.Equal(t, env["DATABASE_URL"], c.Database.URL)
			// The example states the defaults.
			want := Default()
			want.Database.URL = env["DATABASE_URL"]
			want.sources, want.origins, want.db = c.sources, c.origins, c.db // where the values came from
			assert.Equal(t, want, c)
			// ${DATABASE_URL:-} allows it unset: then no database is
			// configured, and the embedded store is picked, saying why.
			reason, embedded := c.EmbeddedStore()
			assert.Equal(t, env["DATABASE_URL"] == "", embedded)
			if embedded {
				assert.Equal(t, "no database configured (database.url is ${DATABASE_URL:-}, unset)", reason)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		key    string
	}{
		{"database url with unexpanded reference", func(c *Config) { c.Database.URL = "postgres://${DB_HOST}/x" }, "database.url"},
		{"max_open_conns 1", func(c *Config) { c.Database.MaxOpenConns = 1 }, "database.max_open_conns"},
		{"window zero", func(c *Config) { c.Run.Window = 0 }, "run.window"},
		{"window negative", func(c *Config) { c.Run.Window = Duration(-time.Hour) }, "run.window"},
		{"overlap negative", func(c *Config) { c.Run.Overlap = Duration(-time.Second) }, "run.overlap"},
		{"batch_size zero", func(c *Config) { c.Run.BatchSize = 0 }, "run.batch_size"},
		{"batch_size too big", func(c *Config) { c.Run.BatchSize = 100001 }, "run.batch_size"},
		{"stuck_after zero", func(c *Config) { c.Run.StuckAfter = 0 }, "run.stuck_after"},
		{"stuck_limit -2", func(c *Config) { c.Run.StuckLimit = -2 }, "run.stuck_limit"},
		{"log level", func(c *Config) { c.Log.Level = "verbose" }, "log.level"},
		{"log level empty", func(c *Config) { c.Log.Level = "" }, "log.level"},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, "log.format"},
		{"api_base not http", func(c *Config) { c.Providers.Stripe.APIBase = "api.stripe.com" }, "providers.stripe.api_base"},
		{"requests_per_second zero", func(c *Config) { c.Providers.Stripe.RequestsPerSecond = 0 }, "providers.stripe.requests_per_second"},
		{"requests_per_second too big", func(c *Config) { c.Providers.Stripe.RequestsPerSecond = 1000.5 }, "providers.stripe.requests_per_second"},
		{"max_retries negative", func(c *Config) { c.Providers.Stripe.MaxRetries = -1 }, "providers.stripe.max_retries"},
		{"timeout zero", func(c *Config) { c.Providers.Stripe.Timeout = 0 }, "providers.stripe.timeout"},
		{"account not acct_", func(c *Config) { c.Providers.Stripe.Accounts = []string{"cus_1"} }, "providers.stripe.accounts[0]"},
		{"second account not acct_", func(c *Config) { c.Providers.Stripe.Accounts = []string{"", "acct_1", "ba_2"} }, "providers.stripe.accounts[2]"},
		{"publishable key", func(c *Config) { c.Providers.Stripe.apiKey = "pk_live_abc" }, "STRIPE_API_KEY"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(&c)
			err := c.Validate()
			ce := asConfigError(t, err)
			assert.Equal(t, tc.key, ce.Key)
			assert.NotEmpty(t, ce.Msg)
			assert.NotEmpty(t, ce.Hint)
			assert.Contains(t, err.Error(), tc.key)
			assert.NotContains(t, err.Error(), "pk_live_abc", "the key never appears in the error")
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"defaults", func(*Config) {}},
		{"boundaries", func(c *Config) {
			c.Database.MaxOpenConns = 2
			c.Run.Overlap = 0
			c.Run.BatchSize = 1
			c.Run.StuckLimit = -1
			c.Providers.Stripe.RequestsPerSecond = 1000
			c.Providers.Stripe.MaxRetries = 0
		}},
		{"batch_size max", func(c *Config) { c.Run.BatchSize = 100000 }},
		{"http base and accounts", func(c *Config) {
			c.Providers.Stripe.APIBase = "http://localhost:12111"
			c.Providers.Stripe.Accounts = []string{"", "acct_1Abc"}
		}},
		{"secret and restricted keys", func(c *Config) { c.Providers.Stripe.apiKey = "rk_test_x" }},
		{"no accounts", func(c *Config) { c.Providers.Stripe.Accounts = nil }},
		{"database url", func(c *Config) { c.Database.URL = "postgres://u:p@h/db" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(&c)
			assert.NoError(t, c.Validate())
		})
	}
}

func TestPath(t *testing.T) {
	tests := []struct {
		name         string
		flag         string
		env          map[string]string
		want         string
		wantExplicit bool
	}{
		{"flag wins", "/etc/r/flag.yaml", map[string]string{"RECONCILER_CONFIG": "/etc/r/env.yaml"}, "/etc/r/flag.yaml", true},
		{"flag alone", "flag.yaml", nil, "flag.yaml", true},
		{"env", "", map[string]string{"RECONCILER_CONFIG": "/etc/r/env.yaml"}, "/etc/r/env.yaml", true},
		{"default", "", nil, "config.yaml", false},
		{"empty env is unset", "", map[string]string{"RECONCILER_CONFIG": ""}, "config.yaml", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, explicit := Path(tc.flag, fakeEnv(tc.env))
			assert.Equal(t, tc.want, p)
			assert.Equal(t, tc.wantExplicit, explicit)
		})
	}
}

func TestParseTime(t *testing.T) {
	tests := []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"2026-11-01T00:00:00Z", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), false},
		{"2026-11-01T12:34:56.789Z", time.Date(2026, 11, 1, 12, 34, 56, 789000000, time.UTC), false},
		{"2026-11-01T02:00:00+02:00", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), false},
		{"2026-10-31T20:30:00-05:00", time.Date(2026, 11, 1, 1, 30, 0, 0, time.UTC), false},
		{"2026-11-01", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), false},
		{"2024-02-29", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), false},
		{"yesterday", time.Time{}, true},
		{"", time.Time{}, true},
		{"2026-11-01 00:00:00", time.Time{}, true},
		{"2026-13-01", time.Time{}, true},
		{"01/11/2026", time.Time{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTime(tc.in)
			if tc.err {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "RFC 3339")
				assert.Contains(t, err.Error(), "date")
				assert.Contains(t, err.Error(), "2026-11-01T00:00:00Z")
				assert.Contains(t, err.Error(), "(2026-11-01)")
				assert.True(t, got.IsZero())
				return
			}
			require.NoError(t, err)
			assert.True(t, tc.want.Equal(got), "got %v want %v", got, tc.want)
			assert.Equal(t, time.UTC, got.Location())
		})
	}
}

func TestStripeOn(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name    string
		enabled *bool
		key     string
		want    bool
	}{
		{"nil, no key", nil, "", false},
		{"nil, key", nil, "sk_test_x", true},
		{"true, no key", &yes, "", true},
		{"true, key", &yes, "sk_test_x", true},
		{"false, key", &no, "sk_test_x", false},
		{"false, no key", &no, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Stripe{Enabled: tc.enabled, apiKey: tc.key}
			assert.Equal(t, tc.want, s.On())
			assert.Equal(t, tc.key, s.APIKey())
		})
	}
}

func TestErrorString(t *testing.T) {
	assert.Equal(t, "k: bad (fix it)", (&Error{Key: "k", Msg: "bad", Hint: "fix it"}).Error())
	assert.Equal(t, "k: bad", (&Error{Key: "k", Msg: "bad"}).Error())
}

func TestDurationD(t *testing.T) {
	assert.Equal(t, 90*time.Minute, Duration(90*time.Minute).D())
}

// A value from the environment is data, never YAML: passwords full of YAML
// syntax load as they are.
func TestExpansionIsNotYAML(t *testing.T) {
	for _, v := range []string{"host=db password=a: b", "'quoted", "*x", "- item", "# not a comment", "{a: 1}", "7.5x"} {
		env := map[string]string{"DATABASE_URL_FILEVAL": v}
		cfg, err := Load("c.yaml", true, func(k string) string { return env[k] },
			func(string) ([]byte, error) { return []byte("database:\n  url: ${DATABASE_URL_FILEVAL}\n"), nil })
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if cfg.Database.URL != v {
			t.Fatalf("%q loaded as %q", v, cfg.Database.URL)
		}
	}
}

// The defaults come from the engine's and the providers' constants; their
// values are pinned here so that moving them never changes one.
func TestDefaultValues(t *testing.T) {
	c := Default()
	assert.Equal(t, Run{Window: Duration(24 * time.Hour), Overlap: Duration(time.Hour), BatchSize: 1000,
		StuckAfter: Duration(72 * time.Hour), StuckLimit: 100, ShutdownGrace: Duration(25 * time.Second)}, c.Run)
	assert.Equal(t, Stripe{APIBase: "https://api.stripe.com", RequestsPerSecond: 20, MaxRetries: 8,
		Timeout: Duration(30 * time.Second), RequestDeadline: Duration(3 * time.Minute), Accounts: []string{""}}, c.Providers.Stripe)
	assert.Equal(t, GoCardless{RequestsPerSecond: 10, MaxRetries: 8, Timeout: Duration(30 * time.Second),
		RequestDeadline: Duration(3 * time.Minute), StuckAfterWorkingDays: 5}, c.Providers.GoCardless)
	assert.Equal(t, Database{MaxOpenConns: 10, AutoMigrate: true, SQLitePath: "reconciler.db"}, c.Database)
	assert.Equal(t, Log{Level: "info", Format: "auto"}, c.Log)
	assert.Equal(t, Serve{Schedule: "30 2 * * *", TimeZone: "UTC", HTTPAddr: ":8080"}, c.Serve)
	assert.Zero(t, c.Metrics)
	assert.Equal(t, Notify{ReportLinkTTL: Duration(30 * 24 * time.Hour)}, c.Notify)
}
