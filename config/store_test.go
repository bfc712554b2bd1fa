package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The store is never picked by guessing: the embedded file only when
// database.embedded says so or no database is configured at all; a
// configured URL that is empty or not PostgreSQL's is an error naming where
// it was configured and the fix, and never printing the URL.
func TestStoreNeverGuesses(t *testing.T) {
	const pw = "h18cpassword"
	for _, tc := range []struct {
		name   string
		file   string // "" : no config file
		env    map[string]string
		reason string // the embedded store's reason; "" with errKey or for PostgreSQL
		errKey string
		errHas string
	}{
		{name: "nothing configured", reason: "no database configured"},
		{name: "a file without a url key", file: "run:\n  batch_size: 5\n", reason: "no database configured"},
		{name: "${DATABASE_URL:-} unset", file: "database:\n  url: ${DATABASE_URL:-}\n",
			reason: "no database configured (database.url is ${DATABASE_URL:-}, unset)"},
		{name: "embedded: true", file: "database:\n  embedded: true\n", reason: "database.embedded is true"},
		{name: "embedded: true with ${DATABASE_URL:-} unset", file: "database:\n  embedded: true\n  url: ${DATABASE_URL:-}\n", reason: "database.embedded is true"},
		{name: "RECONCILER_DATABASE_EMBEDDED", env: map[string]string{"RECONCILER_DATABASE_EMBEDDED": "true"}, reason: "database.embedded is true"},
		{name: "a PostgreSQL URL", env: map[string]string{"DATABASE_URL": "postgres://u:" + pw + "@db/x"}},
		{name: "a postgresql URL in the file", file: "database:\n  url: postgresql://db/x\n"},
		{name: "a DSN", env: map[string]string{"RECONCILER_DATABASE_URL": "host=db password=" + pw + " dbname=x"}},

		{name: "DATABASE_URL set but empty", env: map[string]string{"DATABASE_URL": ""},
			errKey: "DATABASE_URL", errHas: "DATABASE_URL: is set but empty (give a PostgreSQL URL or DSN"},
		{name: "RECONCILER_DATABASE_URL set but empty", env: map[string]string{"RECONCILER_DATABASE_URL": ""},
			errKey: "RECONCILER_DATABASE_URL", errHas: "is set but empty"},
		{name: `url: "" in the file`, file: "# c\ndatabase:\n  url: \"\"\n",
			errKey: "database.url", errHas: "database.url: is empty (c.yaml line 3) (give a PostgreSQL URL or DSN"},
		{name: "url: with no value", file: "database:\n  url:\n", errKey: "database.url", errHas: "is empty (c.yaml line 2)"},
		{name: "${DATABASE_URL} set but empty", file: "database:\n  url: ${DATABASE_URL}\n", env: map[string]string{"DATABASE_URL": ""},
			errKey: "database.url", errHas: "${DATABASE_URL} is set but empty"},
		{name: "${DATABASE_URL} unset", file: "database:\n  url: ${DATABASE_URL}\n",
			errKey: "database.url", errHas: "${DATABASE_URL} is not set (export DATABASE_URL"},
		{name: "${DATABASE_URL:-} set but empty", file: "database:\n  url: ${DATABASE_URL:-}\n", env: map[string]string{"DATABASE_URL": ""},
			errKey: "DATABASE_URL", errHas: "DATABASE_URL: is set but empty"},
		{name: "${DB:-} set but empty", file: "database:\n  url: ${DB:-}\n", env: map[string]string{"DB": ""},
			errKey: "database.url", errHas: "is empty (from ${DB}, c.yaml line 2)"},
		{name: "a mysql URL in DATABASE_URL", env: map[string]string{"DATABASE_URL": "mysql://u:" + pw + "@db/x"},
			errKey: "DATABASE_URL", errHas: "DATABASE_URL: is not a PostgreSQL URL or DSN (write postgres://"},
		{name: "a mysql URL in the file", file: "database:\n  url: mysql://u:" + pw + "@db/x\n",
			errKey: "database.url", errHas: "is not a PostgreSQL URL or DSN (c.yaml line 2)"},
		{name: "a file path", env: map[string]string{"DATABASE_URL": "./reconciler.db"}, errKey: "DATABASE_URL", errHas: "not a PostgreSQL URL"},
		{name: "embedded: true and a URL", file: "database:\n  embedded: true\n", env: map[string]string{"DATABASE_URL": "postgres://db/x"},
			errKey: "database.embedded", errHas: "is true, and a database URL is configured too (DATABASE_URL)"},
		{name: "embedded: true and an empty DATABASE_URL", file: "database:\n  embedded: true\n", env: map[string]string{"DATABASE_URL": ""},
			errKey: "database.embedded"},
		{name: "embedded with no file name", file: "database:\n  embedded: true\n  sqlite_path: \"\"\n", errKey: "database.sqlite_path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			if tc.file != "" {
				files["c.yaml"] = tc.file
			}
			c, err := LoadEnv("c.yaml", false, lookupOf(tc.env), fakeFS(files))
			if err == nil {
				err = c.Validate()
			}
			if tc.errKey != "" {
				ce := asConfigError(t, err)
				assert.Equal(t, tc.errKey, ce.Key)
				assert.Contains(t, err.Error(), tc.errHas)
				assert.NotContains(t, err.Error(), pw)
				return
			}
			require.NoError(t, err)
			reason, embedded := c.EmbeddedStore()
			assert.Equal(t, tc.reason != "", embedded)
			assert.Equal(t, tc.reason, reason)
			assert.Equal(t, embedded, c.Database.URL == "", "the URL is empty exactly when the embedded store is picked")
		})
	}
}

func TestIsPostgresURL(t *testing.T) {
	for u, want := range map[string]bool{
		"postgres://db/x": true, "postgresql://u:p@db:5432/x?sslmode=disable": true, "host=db dbname=x": true,
		"  host=db": true, "mysql://db/x": false, "reconciler.db": false, "sqlite:///x": false, "postgres://%zz": false,
	} {
		assert.Equal(t, want, IsPostgresURL(u), u)
	}
}

func TestParseWindow(t *testing.T) {
	s, u, err := ParseWindow("2026-11-01", "2026-11-02T00:00:00Z")
	require.NoError(t, err)
	assert.True(t, s.Before(u))
	_, _, err = ParseWindow("2026-11-02", "2026-11-01")
	assert.Equal(t, `--since: "2026-11-02" must be before --until "2026-11-01" (swap them, or widen the window)`, err.Error())
	_, _, err = ParseWindow("", "tomorrow")
	assert.Equal(t, "--until", asConfigError(t, err).Key)
}
