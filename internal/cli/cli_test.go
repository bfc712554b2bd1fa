package cli

import (
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/runner"
)

func TestReadDoc(t *testing.T) {
	fsys := fstest.MapFS{
		"ok.txt":  {Data: []byte("ack FP... --note TEXT\nAcknowledge items\n\nWhat it does.\n\nMore.\nExamples:\n  reconciler ack x --note y\n")},
		"bad.txt": {Data: []byte("only a use line\n")},
	}
	d, err := ReadDoc(fsys, "ok.txt")
	require.NoError(t, err)
	require.Equal(t, Doc{Use: "ack FP... --note TEXT", Short: "Acknowledge items", Long: "What it does.\n\nMore.", Example: "  reconciler ack x --note y"}, d)
	_, err = ReadDoc(fsys, "bad.txt")
	require.Error(t, err)
	require.Panics(t, func() { MustDoc(fsys, "missing.txt") })
}

// tree is a root with one command "run" taking the framework's flags.
func tree() (*cobra.Command, *int, *time.Duration, *string) {
	var n int
	var d time.Duration
	var format string
	root := Command(Doc{Use: "reconciler", Short: "root"}, func(*cobra.Command, []string) error { return nil })
	run := Command(Doc{Use: "run", Short: "run"}, func(*cobra.Command, []string) error { return nil })
	IntVar(run.Flags(), &n, "batch-size", 0, "payments per transaction")
	DurationVar(run.Flags(), &d, "lock-wait", "wait this long")
	OneOf(run, &format, "format", "", "md", "report format", "json", "md")
	root.AddCommand(run)
	Root(root)
	return root, &n, &d, &format
}

func execute(args ...string) (*int, *time.Duration, *string, error) {
	root, n, d, f := tree()
	root.SetArgs(args)
	return n, d, f, root.Execute()
}

func TestFlagsAndErrors(t *testing.T) {
	n, d, f, err := execute("run", "--batch-size", "500", "--lock-wait", "30s", "--format", "json")
	require.NoError(t, err)
	require.Equal(t, 500, *n)
	require.Equal(t, 30*time.Second, *d)
	require.Equal(t, "json", *f)
	n, _, f, err = execute("run")
	require.NoError(t, err)
	require.Zero(t, *n)
	require.Equal(t, "md", *f)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--batch-size", "1.5"}, `--batch-size: "1.5" is not a whole number (use 1 to 100000; 1000 is a good default)`},
		{[]string{"run", "--batch-size", "0"}, `--batch-size: 0 is out of range (use 1 to 100000; 1000 is a good default)`},
		{[]string{"run", "--lock-wait", "-5s"}, `--lock-wait: -5s must not be negative`},
		{[]string{"run", "--lock-wait", "soon"}, `--lock-wait: "soon" is not a duration`},
		{[]string{"run", "--format", "pdf"}, `--format: unknown format "pdf" (use json or md)`},
		{[]string{"run", "--bogus"}, "run: unknown flag --bogus (run reconciler run --help for its flags)"},
		{[]string{"run", "-x"}, "run: unknown flag -x (run reconciler run --help for its flags)"},
		{[]string{"run", "--lock-wait"}, "run: --lock-wait needs a value"},
		{[]string{"run", "extra"}, `run: unexpected argument "extra" (it takes flags only; run reconciler run --help)`},
		{[]string{"rum"}, `unknown command "rum" for reconciler (did you mean run? run reconciler --help for the commands)`},
		{[]string{"--bogus"}, "unknown flag --bogus (run reconciler --help for the commands and flags)"},
	} {
		_, _, _, err := execute(c.args...)
		require.Error(t, err, c.args)
		require.Contains(t, err.Error(), c.want, c.args)
		var ue runner.UsageError
		var ce *config.Error
		require.True(t, errors.As(err, &ue) || errors.As(err, &ce), "%v: a usage error (exit 2): %T", c.args, err)
	}
}

func TestExactArgs(t *testing.T) {
	c := Command(Doc{Use: "show ID"}, nil)
	root := Command(Doc{Use: "reconciler"}, nil)
	root.AddCommand(c)
	check := ExactArgs(1, "one run id")
	require.NoError(t, check(c, []string{"1"}))
	require.ErrorContains(t, check(c, nil), "show: give one run id (run reconciler show --help)")
	require.ErrorContains(t, check(c, []string{"1", "2"}), `show: unexpected argument "2" (give only one run id`)
}
