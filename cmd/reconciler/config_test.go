package main_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cliIn runs the built binary in dir with exactly env (plus PATH); a value
// "" sets the variable to the empty string.
func cliIn(t *testing.T, dir string, env map[string]string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code, so.String(), se.String()}
}

func requireEmptyDir(t *testing.T, dir string, why string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if e.Name() != "config.yaml" {
			names = append(names, e.Name())
		}
	}
	require.Empty(t, names, why)
}

const h18cPassword = "h18cpassw0rd"

func TestConfigCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{
		"DATABASE_URL":              "postgres://reconciler:" + h18cPassword + "@db:5432/payments",
		"STRIPE_API_KEY":            "sk_test_" + h18cPassword,
		"RECONCILER_RUN_BATCH_SIZE": "50",
	}
	r := cliIn(t, dir, env, "config")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "  batch_size: 50 # from RECONCILER_RUN_BATCH_SIZE\n")
	assert.Contains(t, r.stdout, "  url: postgres://reconciler:****@db:5432/payments # from DATABASE_URL\n")
	assert.Contains(t, r.stdout, "  window: 24h # default\n")
	assert.Contains(t, r.stdout, "api_key: sk_test_**** (20 characters) # from STRIPE_API_KEY\n")
	assert.NotContains(t, r.stdout+r.stderr, h18cPassword)
	requireEmptyDir(t, dir, "config opens no database")

	r = cliIn(t, dir, env, "config", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var settings []struct{ Key, Source string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &settings))
	sources := map[string]string{}
	for _, s := range settings {
		sources[s.Key] = s.Source
	}
	assert.Equal(t, "RECONCILER_RUN_BATCH_SIZE", sources["run.batch_size"])
	assert.Equal(t, "default", sources["run.window"])
	assert.NotContains(t, r.stdout, h18cPassword)

	// The repository's config.yaml, as a laptop runs it: no database.
	repo, err := filepath.Abs("../../config.yaml")
	require.NoError(t, err)
	r = cliIn(t, dir, nil, "config", "--config", repo)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "# Store: the embedded SQLite file reconciler.db (no database configured (database.url is ${DATABASE_URL:-}, unset))")
	assert.Contains(t, r.stdout, "  window: 24h # from "+repo+" line ")

	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"config", "-o", "xml"}, `-o: unknown output "xml" (use yaml or json)`},
		{map[string]string{"RECONCILER_RUN_BATCH_SIZE": "lots"}, []string{"config"}, "RECONCILER_RUN_BATCH_SIZE: is not a whole number (it sets run.batch_size)"},
		{map[string]string{"RECONCILER_LOG_LEVEL": "sk_live_" + h18cPassword}, []string{"config"}, "log.level: unknown level the value from RECONCILER_LOG_LEVEL"},
	} {
		r := cliIn(t, dir, tc.env, tc.args...)
		assert.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want)
		assert.Empty(t, r.stdout)
		assert.NotContains(t, r.stderr, h18cPassword)
	}
}

// A configured database URL that is empty or not PostgreSQL's is exit 2,
// for every command that opens the store, before anything is read or
// written: never a silent switch to the embedded file.
func TestConfiguredDatabaseNeverFallsBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		file string
		env  map[string]string
		want string
	}{
		{"DATABASE_URL empty", "", map[string]string{"DATABASE_URL": ""}, "reconciler: DATABASE_URL: is set but empty (give a PostgreSQL URL or DSN"},
		{"${DATABASE_URL} empty", "database:\n  url: ${DATABASE_URL}\n", map[string]string{"DATABASE_URL": ""}, "database.url: ${DATABASE_URL} is set but empty"},
		{"${DATABASE_URL} unset", "database:\n  url: ${DATABASE_URL}\n", nil, "database.url: ${DATABASE_URL} is not set (export DATABASE_URL"},
		{`url: ""`, "database:\n  url: \"\"\n", nil, "database.url: is empty (config.yaml line 2)"},
		{"mysql", "", map[string]string{"DATABASE_URL": "mysql://u:" + h18cPassword + "@db/x"}, "DATABASE_URL: is not a PostgreSQL URL or DSN"},
		{"embedded and a URL", "database:\n  embedded: true\n", map[string]string{"DATABASE_URL": "postgres://db/x"}, "database.embedded: is true, and a database URL is configured too"},
	} {
		for _, args := range [][]string{{"run"}, {"migrate"}, {"report", "--last"}, {"ack", "fp", "--note", "n", "--by", "me"}, {"serve"}, {"config"}} {
			dir := t.TempDir()
			if tc.file != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(tc.file), 0o600))
			}
			env := map[string]string{"STRIPE_API_KEY": "sk_test_x"}
			for k, v := range tc.env {
				env[k] = v
			}
			r := cliIn(t, dir, env, args...)
			assert.Equal(t, 2, r.code, "%s %v: %s", tc.name, args, r.stderr)
			assert.Contains(t, r.stderr, tc.want, "%s %v", tc.name, args)
			assert.NotContains(t, r.stderr, "embedded SQLite store", "%s %v", tc.name, args)
			assert.NotContains(t, r.stderr, h18cPassword)
			assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %s", r.stderr)
			requireEmptyDir(t, dir, tc.name+" "+strings.Join(args, " "))
		}
	}
}

// The commands that only read refuse a missing embedded file, and create
// nothing; migrate creates it, saying which file and why in its first log
// line; then report reads it.
func TestReadCommandsNeverCreateTheEmbeddedStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{{"report", "--last"}, {"report", "--run", "1", "--format", "json"}, {"ack", "fp1", "--note", "looked", "--by", "me"},
		{"runs", "list"}, {"runs", "show", "1", "-o", "json"}} {
		r := cliIn(t, dir, nil, args...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.Equal(t, "reconciler: no database: the embedded store reconciler.db does not exist; set DATABASE_URL or run reconciler migrate or run first\n", r.stderr, "%v", args)
		requireEmptyDir(t, dir, strings.Join(args, " ")+" created a file")
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("database:\n  embedded: true\n  sqlite_path: mine.db\n"), 0o600))
	r := cliIn(t, dir, nil, "migrate")
	require.Equal(t, 0, r.code, r.stderr)
	first := strings.SplitN(r.stderr, "\n", 2)[0]
	assert.Contains(t, first, `"msg":"using the embedded SQLite store"`)
	assert.Contains(t, first, `"path":"mine.db"`)
	assert.Contains(t, first, `"reason":"database.embedded is true"`)
	_, err := os.Stat(filepath.Join(dir, "mine.db"))
	require.NoError(t, err)
	r = cliIn(t, dir, nil, "report", "--last")
	assert.NotContains(t, r.stderr, "no database", "the file exists now")
}
