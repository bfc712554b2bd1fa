// Command reconciler lists what payment providers changed in a window,
// repairs the local payment state machine with guarded forward transitions,
// records the webhooks that were missed and reports what it could not fix.
package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // the container has no zoneinfo; CRON_TZ and serve.time_zone need it

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/buildinfo"
	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/internal/logging"
	"github.com/reconciler/reconciler/internal/memlimit"
	"github.com/reconciler/reconciler/internal/profiling"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/runner"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes (DESIGN section 7).
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
	exitLocked = 3
)

// usageError is a bad flag or configuration: exit code 2, nothing touched.
// It is the run service's, whose errors about the flags' values exit 2 too.
type usageError = runner.UsageError

var usagef = cli.Usagef

// helpFiles holds each command's help: use line, summary, description and
// examples (cli.ReadDoc), kept out of the code.
//
//go:embed help/*.txt
var helpFiles embed.FS

func doc(name string) cli.Doc { return cli.MustDoc(helpFiles, "help/"+name+".txt") }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	// The soft memory limit (internal/memlimit): 56 MiB, more for several
	// runs at once; GOMEMLIMIT and GOGC override.
	memlimit.Set(os.Getenv)
	stopProfiles := profiling.Start(os.Getenv)
	code := Main(ctx, os.Args[1:], os.Stdout, logging.NewTerminal(os.Stderr), os.Getenv)
	stopProfiles()
	stop()
	os.Exit(code)
}

// env is what every command takes from the process.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// Main runs one command and returns its exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	root := newRoot(env{stdout, stderr, getenv})
	root.SetArgs(args)
	return exitCode(root.ExecuteContext(ctx), stderr)
}

// newRoot is the command tree; a bare reconciler prints its help on
// stderr and exits 2.
func newRoot(e env) *cobra.Command {
	root := cli.Command(doc("reconciler"), func(c *cobra.Command, _ []string) error {
		c.SetOut(e.stderr)
		_ = c.Help()
		return cli.Exit(exitUsage)
	})
	root.Version = buildinfo.Version(version)
	root.SetVersionTemplate("reconciler {{.Version}}\n")
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.AddCommand(e.runCmd(), e.migrateCmd(), e.serveCmd(), e.reportCmd(), e.verifyCmd(), e.payoutsCmd(),
		e.ackCmd(), e.configCmd(), e.runsCmd(), e.demoCmd(), cli.Command(doc("version"), func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(e.stdout, "reconciler %s\n", root.Version)
			return err
		}))
	cli.Root(root)
	return root
}

// exitCode prints err (one line) and maps it to an exit code.
func exitCode(err error, stderr io.Writer) int {
	var exit cli.Exit
	switch {
	case err == nil, errors.Is(err, pflag.ErrHelp):
		return exitOK
	case errors.As(err, &exit):
		return int(exit)
	}
	// One line, whatever the error quotes: no value can forge a log line.
	fmt.Fprintf(stderr, "reconciler: %s\n", config.OneLine(err.Error()))
	var ue usageError
	var ce *config.Error
	switch {
	case errors.Is(err, reconcile.ErrLocked): // some run found its lock held and did nothing
		return exitLocked
	case errors.As(err, &ue), errors.As(err, &ce), errors.Is(err, reconcile.ErrBadWindow):
		return exitUsage
	}
	return exitFailed
}
