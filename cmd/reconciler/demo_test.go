package main_test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
)

// demoEnv is what a newcomer has: PATH (cli adds it), no database, no
// provider key.
func demoEnv(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	return env
}

// The README's first command: the whole job with only Go installed.
func TestDemoRunsTheWholeJob(t *testing.T) {
	t.Parallel()
	env := demoEnv(t)
	page := filepath.Join(t.TempDir(), "demo.html")

	r := cli(t, env, "demo", "--payments", "300", "--html", page)
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	for _, want := range []string{
		"Stripe · run", "GoCardless · run", "Needs a human", "refused", "reported", "Repaired (", "more repaired",
		" stale ", " conflict ", " missing_local ", " behind ", " mismatch ", " unknown_status ",
		"What just happened", "What to try next", "sk_test_", "reconciler run --dry-run", page,
	} {
		require.Contains(t, r.stdout, want)
	}
	require.NotContains(t, r.stdout, "\033[", "no colour when stdout is not a terminal")
	require.NotContains(t, r.stderr, "level=ERROR")
	for _, l := range strings.Split(r.stdout, "\n") {
		require.LessOrEqual(t, len([]rune(l)), 110, "laid out for a terminal: %q", l)
	}

	b, err := os.ReadFile(page)
	require.NoError(t, err)
	doc := string(b)
	require.True(t, strings.HasPrefix(strings.ToLower(strings.TrimSpace(doc)), "<!doctype html>"), "an HTML page")
	require.Contains(t, doc, "<svg")
	require.Contains(t, doc, "</html>")
	z := html.NewTokenizer(strings.NewReader(doc))
	for z.Next() != html.ErrorToken {
	}
	require.ErrorIs(t, z.Err(), io.EOF, "the page tokenizes to the end")
	root, err := html.Parse(strings.NewReader(doc))
	require.NoError(t, err)
	require.NotNil(t, root.FirstChild)

	// Again: a fresh database, the same story.
	again := cli(t, env, "demo", "--payments", "300", "--html", page)
	require.Equal(t, 0, again.code, again.stderr)
	require.Contains(t, again.stdout, "fresh local database")
}

// --db keeps the database: a second demo on it reruns the same window and
// repairs nothing.
func TestDemoKeptDatabaseReruns(t *testing.T) {
	t.Parallel()
	env := demoEnv(t)
	dir := t.TempDir()
	db, page := filepath.Join(dir, "demo.db"), filepath.Join(dir, "demo.html")

	first := cli(t, env, "demo", "--payments", "50", "--seed", "7", "--db", db, "--html", page)
	require.Equal(t, 0, first.code, first.stderr)
	require.Contains(t, first.stdout, "(new; kept)")
	_, err := os.Stat(db)
	require.NoError(t, err, "the database file is kept")

	second := cli(t, env, "demo", "--payments", "50", "--seed", "7", "--db", db, "--html", page)
	require.Equal(t, 0, second.code, "stdout:\n%s\nstderr:\n%s", second.stdout, second.stderr)
	require.Contains(t, second.stdout, "reruns of the same window")
	require.Equal(t, 4, strings.Count(second.stdout, "   repaired 0   "), "every run (three Stripe accounts, GoCardless) repairs nothing: %s", second.stdout)
	require.Contains(t, second.stdout, "synthetic events 0 ")
	require.Contains(t, second.stdout, "refused", "what needs a human still does")

	other := cli(t, env, "demo", "--payments", "60", "--seed", "7", "--db", db, "--html", page)
	require.Equal(t, 2, other.code, other.stdout)
	require.Contains(t, other.stderr, "--db")
}

func TestDemoFlagsAreValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--payments", "-1"}, "--payments"},
		{[]string{"--payments", "1000001"}, "--payments"},
		{[]string{"--payments", "many"}, "-payments"},
		{[]string{"--seed", "-3"}, "--seed"},
		{[]string{"--seed", "x"}, "-seed"},
		{[]string{"--html", filepath.Join(t.TempDir(), "missing", "x.html")}, "--html"},
		{[]string{"extra"}, "extra"},
	} {
		r := cli(t, map[string]string{}, append([]string{"demo"}, tc.args...)...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.flag, tc.args)
		require.Empty(t, r.stdout, tc.args)
	}
}

// Ctrl-C in the middle of a reconciliation: the binary exits within a
// second or two, with exit code 1 and a line saying it was interrupted, no
// report and no HTML page. --progress says each phase on stderr, as a
// terminal would show it.
func TestDemoCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 5,000 payments")
	}
	t.Parallel()
	dir := t.TempDir()
	page := filepath.Join(dir, "demo.html")
	cmd := exec.Command(binary, "demo", "--progress", "--payments", "5000", "--html", page)
	cmd.Dir, cmd.Env = dir, []string{"PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		stderr.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "] reconciling Stripe") {
			break
		}
	}
	require.Contains(t, stderr.String(), "] seeding the local database with ", "a line per phase")
	time.Sleep(300 * time.Millisecond) // into the run's batches
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	sent := time.Now()
	rest, _ := io.ReadAll(pipe)
	stderr.Write(rest)
	err = cmd.Wait()
	took := time.Since(sent)
	t.Logf("exited %v after SIGINT", took)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, stderr.String())
	require.Equal(t, 1, ee.ExitCode(), stderr.String())
	require.Less(t, took, 2*time.Second, "Ctrl-C honoured within a second or two")
	require.Contains(t, stderr.String(), "reconciler: demo interrupted: interrupt signal received")
	require.NotContains(t, stderr.String(), "level=ERROR")
	require.Empty(t, stdout.String(), "no report")
	require.NoFileExists(t, page)
}
