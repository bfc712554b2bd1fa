package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/cli"
)

var update = flag.Bool("update", false, "rewrite testdata/help/*.golden from the commands' help")

func noEnv(string) string { return "" }

// TestHelpGolden: `reconciler --help` and every `reconciler CMD --help`
// are their golden files (go test -run TestHelpGolden -update rewrites
// them); each lists every flag its command takes and has an example.
func TestHelpGolden(t *testing.T) {
	root := newRoot(env{&bytes.Buffer{}, &bytes.Buffer{}, noEnv})
	var cmds []*cobra.Command
	cli.Walk(root, func(c *cobra.Command) { cmds = append(cmds, c) })
	require.GreaterOrEqual(t, len(cmds), 15, "run, migrate, serve, report, runs list/show, verify, payouts, ack, config, demo, version, completion, help")
	want := map[string]bool{}
	for _, c := range cmds {
		args := append(strings.Fields(c.CommandPath())[1:], "--help")
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), args, &stdout, &stderr, noEnv)
		require.Equal(t, 0, code, "%v: %s", args, stderr.String())
		require.Empty(t, stderr.String(), args)
		out := stdout.String()

		name := strings.ReplaceAll(c.CommandPath(), " ", "_") + ".golden"
		want[name] = true
		golden := filepath.Join("testdata", "help", name)
		if *update {
			require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
			require.NoError(t, os.WriteFile(golden, []byte(out), 0o644))
		}
		b, err := os.ReadFile(golden)
		require.NoError(t, err, "%s is missing: go test ./cmd/reconciler -run TestHelpGolden -update", golden)
		require.Equal(t, string(b), out, "%v differs from %s (go test ./cmd/reconciler -run TestHelpGolden -update, then review the diff)", args, golden)

		for _, f := range cli.Flags(c) {
			line := "--" + f.Name
			if f.Shorthand != "" {
				line = "-" + f.Shorthand + ", --" + f.Name
			}
			require.Contains(t, out, line, "%s --help does not list %s", c.CommandPath(), line)
			require.NotEmpty(t, strings.TrimSpace(f.Usage), "%s %s has no description", c.CommandPath(), line)
		}
		require.NotEmpty(t, strings.TrimSpace(c.Example), "%s has no example", c.CommandPath())
		require.Contains(t, out, "\nExamples:\n", c.CommandPath())
		require.Contains(t, out, c.CommandPath(), "%s: an example uses the command", c.CommandPath())
		require.NotEmpty(t, c.Short, c.CommandPath())
	}
	// The root's help lists every command.
	var root0 bytes.Buffer
	Main(context.Background(), []string{"--help"}, &root0, &bytes.Buffer{}, noEnv)
	for _, c := range root.Commands() {
		if !c.Hidden {
			require.Contains(t, root0.String(), "\n  "+c.Name()+" ", "reconciler --help lists %s", c.Name())
		}
	}
	// No golden file is left over from a command that is gone.
	files, err := filepath.Glob(filepath.Join("testdata", "help", "*.golden"))
	require.NoError(t, err)
	for _, f := range files {
		require.True(t, want[filepath.Base(f)], "%s has no command any more: delete it", f)
	}
}

// TestCompletion: cobra's completion scripts are produced, and --provider,
// --format and -o complete their values.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, Main(context.Background(), []string{"completion", sh}, &stdout, &stderr, noEnv), stderr.String())
		require.Contains(t, stdout.String(), "reconciler", sh)
		if sh == "bash" {
			require.Contains(t, stdout.String(), "bash completion V2 for reconciler")
			require.Contains(t, stdout.String(), "__start_reconciler")
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--provider", ""}, []string{"stripe", "gocardless"}},
		{[]string{"verify", "--provider", "go"}, []string{"stripe", "gocardless"}}, // the shell filters by prefix
		{[]string{"payouts", "--provider", ""}, []string{"stripe", "gocardless"}},
		{[]string{"runs", "list", "--provider", ""}, []string{"stripe", "gocardless"}},
		{[]string{"run", "--format", ""}, []string{"json", "csv", "md", "html", "text"}},
		{[]string{"report", "--format", ""}, []string{"json", "csv", "md", "html", "text"}},
		{[]string{"run", "--mode", ""}, []string{"auto", "listing", "events"}},
		{[]string{"verify", "-o", ""}, []string{"table", "json"}},
		{[]string{"runs", "show", "1", "-o", ""}, []string{"table", "json"}},
		{[]string{"config", "--output", ""}, []string{"yaml", "json"}},
		{[]string{"payouts", "-o", ""}, []string{"csv", "json", "text"}},
		{[]string{"ru"}, []string{"run", "runs"}},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, Main(context.Background(), append([]string{"__complete"}, c.args...), &stdout, &stderr, noEnv), "%v: %s", c.args, stderr.String())
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		var got []string
		for _, l := range lines[:len(lines)-1] { // the last line is the directive
			got = append(got, strings.SplitN(l, "\t", 2)[0])
		}
		require.Subset(t, got, c.want, "%v: %s", c.args, stdout.String())
	}
}

// TestHelpAndUsageExitCodes: help is stdout and exit 0; a bare reconciler
// prints it on stderr and exits 2; an unknown command or topic is one
// line, exit 2.
func TestHelpAndUsageExitCodes(t *testing.T) {
	for _, c := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, 2, "", "Available Commands:"},
		{[]string{"--help"}, 0, "Available Commands:", ""},
		{[]string{"-h"}, 0, "Available Commands:", ""},
		{[]string{"help"}, 0, "Available Commands:", ""},
		{[]string{"help", "runs", "show"}, 0, "reconciler runs show ID [flags]", ""},
		{[]string{"run", "-h"}, 0, "--dry-run", ""},
		{[]string{"version"}, 0, "reconciler ", ""},
		{[]string{"--version"}, 0, "reconciler ", ""},
		{[]string{"runs"}, 2, "", "Available Commands:"},
		{[]string{"frobnicate"}, 2, "", `reconciler: unknown command "frobnicate" for reconciler (run reconciler --help for the commands)`},
		{[]string{"help", "frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"--bogus"}, 2, "", "reconciler: unknown flag --bogus (run reconciler --help"},
		{[]string{"completion", "tcsh"}, 2, "", `unknown command "tcsh" for reconciler completion`},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), c.args, &stdout, &stderr, noEnv)
		require.Equal(t, c.code, code, "%v: %s", c.args, stderr.String())
		if c.stdout == "" {
			require.Empty(t, stdout.String(), c.args)
		} else {
			require.Contains(t, stdout.String(), c.stdout, c.args)
		}
		if c.stderr == "" {
			require.Empty(t, stderr.String(), c.args)
		} else {
			require.Contains(t, stderr.String(), c.stderr, c.args)
		}
		if c.code == 2 && !strings.Contains(c.stderr, "Available") {
			require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
		}
	}
}
