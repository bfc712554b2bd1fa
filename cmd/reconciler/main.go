// Command reconciler lists what payment providers changed in a window,
// repairs the local payment state machine with guarded forward transitions,
// records the webhooks that were missed and reports what it could not fix.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	_ "time/tzdata" // the container has no zoneinfo; CRON_TZ and serve.time_zone need it

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/buildinfo"
	"github.com/reconciler/reconciler/internal/logging"
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

func usagef(format string, a ...any) error { return usageError{Err: fmt.Errorf(format, a...)} }

// usage is the top-level help.
//
//go:embed usage.txt
var usage string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft limit keeps the garbage collector from letting the heap
		// double past its live size (about 13 MiB on a night, more with a
		// payout's pages in flight), so the process fits a small pod: peak
		// RSS at a million events was 98–100 MiB under 64 MiB, 91 under 56
		// (issue 16). GOMEMLIMIT overrides.
		debug.SetMemoryLimit(56 << 20)
		if os.Getenv("GOGC") == "" {
			// At the default GOGC the collector ran at every 13 MiB
			// allocated, a fifth of the job's CPU on a rerun; the soft
			// limit, not GOGC, bounds the heap. GOGC overrides.
			debug.SetGCPercent(200)
		}
	}
	stopProfiles := profiling.Start(os.Getenv)
	code := Main(ctx, os.Args[1:], os.Stdout, logging.NewTerminal(os.Stderr), os.Getenv)
	stopProfiles()
	stop()
	os.Exit(code)
}

// Main runs one command and returns its exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], stdout, stderr, getenv)
	case "migrate":
		err = cmdMigrate(ctx, args[1:], stdout, stderr, getenv)
	case "serve":
		err = cmdServe(ctx, args[1:], stdout, stderr, getenv)
	case "report":
		err = cmdReport(ctx, args[1:], stdout, stderr, getenv)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdout, stderr, getenv)
	case "verify":
		return cmdVerifyMain(ctx, args[1:], stdout, stderr, getenv)
	case "payouts":
		return cmdPayoutsMain(ctx, args[1:], stdout, stderr, getenv)
	case "ack":
		err = cmdAck(ctx, args[1:], stdout, stderr, getenv)
	case "config":
		err = cmdConfig(args[1:], stdout, stderr, getenv)
	case "version", "--version":
		fmt.Fprintf(stdout, "reconciler %s\n", buildinfo.Version(version))
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "reconciler: unknown command %s (run reconciler help for the commands)\n", config.Quote(args[0]))
		return exitUsage
	}
	return exitCode(err, stderr)
}

// exitCode prints err (one line) and maps it to an exit code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
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
