package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/runner"
	"github.com/reconciler/reconciler/verify"
)

// exitDiffers is verify's exit code when a payment differs from the
// provider and no drift item explains it (DESIGN section 7).
const exitDiffers = 4

// verifyOutput is what `reconciler verify -o json` prints: one report per
// provider and account, and the totals.
type verifyOutput struct {
	OK          bool            `json:"ok"`
	Checked     int             `json:"checked"`
	Differing   int             `json:"differing"`
	Explained   int             `json:"explained"`
	Unexplained int             `json:"unexplained"`
	Reports     []verify.Report `json:"reports"`
	// Failed names the provider/account pairs that could not be verified.
	Failed []string `json:"failed,omitempty"`
}

// cmdVerifyMain runs verify and returns its exit code: 0 nothing
// unexplained, 4 an unexplained difference, 1 a failure, 2 usage.
func cmdVerifyMain(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	differs, err := cmdVerify(ctx, args, stdout, stderr, getenv)
	if err != nil {
		return exitCode(err, stderr)
	}
	if differs {
		return exitDiffers
	}
	return exitOK
}

func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) (differs bool, err error) {
	var f runFlags
	var output, seed string
	var sample int
	var all bool
	fs := newFlagSet("verify", stderr)
	fs.StringVar(&f.config, "config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	fs.Var(&f.providers, "provider", "provider to verify (repeatable; default: every configured one)")
	fs.Var(&f.accounts, "account", "connected account id, acct_… (repeatable; default: the configured accounts)")
	fs.StringVar(&f.since, "since", "", "window start, RFC 3339 or date (default: until - 25h)")
	fs.StringVar(&f.until, "until", "", "window end, exclusive (default: now)")
	fs.IntVar(&sample, "sample", verify.DefaultSample, "check N payments of the window drawn at random")
	fs.BoolVar(&all, "all", false, "check every payment of the window")
	fs.StringVar(&seed, "seed", "", "seed of the random sample, to repeat one (default: from the clock; printed in the summary)")
	fs.StringVar(&output, "o", "table", "output: table or json")
	fs.StringVar(&output, "output", "table", "output: table or json (same as -o)")
	if err := parseFlags(fs, args); err != nil {
		return false, err
	}
	sampleSet := false
	fs.Visit(func(fl *flag.Flag) { sampleSet = sampleSet || fl.Name == "sample" })
	switch {
	case all && sampleSet:
		return false, usagef("--sample and --all are mutually exclusive: give one (--all checks every payment of the window)")
	case sample < 1:
		return false, usagef("--sample: %d is not a positive number of payments (write e.g. --sample 100, or --all)", sample)
	case output != "table" && output != "json":
		return false, usagef("-o: unknown output %s (use table or json)", config.Quote(output))
	}
	if err := config.CheckFlagInt("--sample", int64(sample)); err != nil {
		return false, err
	}
	seedN := uint64(time.Now().UnixNano())
	if _, err := fmt.Sscan(seed, &seedN); seed != "" && err != nil {
		return false, usagef("--seed: %s is not a non-negative integer (write e.g. --seed 42)", config.Quote(seed))
	}

	cfg, err := loadConfig(f.config, getenv)
	if err != nil {
		return false, err
	}
	since, until, err := parseWindow(f.since, f.until)
	if err != nil {
		return false, err
	}
	if !since.IsZero() && until.IsZero() && !since.Before(time.Now()) {
		return false, usagef("--since %s is in the future: the window would be empty (give an earlier --since)", config.Quote(f.since))
	}
	jobs, err := runner.Plan(cfg, f.providers, f.accounts)
	if err != nil {
		return false, err
	}
	if cfg.Database.URL == "" {
		if _, err := os.Stat(cfg.Database.SQLitePath); err != nil {
			return false, &config.Error{Key: "DATABASE_URL", Msg: "is not set and the embedded store " + cfg.Database.SQLitePath + " does not exist",
				Hint: "export DATABASE_URL=postgres://… (the database the runs write to), or set database.sqlite_path"}
		}
	}

	log := newLogger(cfg, stderr)
	db, st, closeDB, err := openDB(ctx, cfg, log)
	if err != nil {
		return false, err
	}
	defer closeDB()
	if pending, err := models.Pending(ctx, db); err != nil || len(pending) > 0 {
		return false, errors.New("the database has no reconciler schema or pending migrations: run reconciler migrate")
	}

	out := verifyOutput{Reports: []verify.Report{}}
	for i, j := range jobs {
		name := j.String()
		jlog := log.With("provider", j.Provider, "account", j.Account)
		p, err := runner.NewProvider(cfg, j.Provider, jlog)
		if err != nil {
			return false, err
		}
		reader, err := runner.CurrentReader(p)
		if err != nil {
			return false, err
		}
		jseed := seedN + uint64(i)
		o := verify.Options{DB: db, Store: st, Provider: j.Provider, Account: j.Account, Reader: reader, Since: since, Until: until,
			All: all, Rand: rand.New(rand.NewPCG(jseed, jseed^0x9E3779B97F4A7C15))}
		if !all {
			o.Sample = sample
		}
		rep, err := verify.Run(ctx, o)
		if err != nil {
			jlog.Error("verify failed", "error", err)
			fmt.Fprintf(stderr, "verify %s: failed after %d checked: %v\n", name, rep.Checked, err)
			out.Failed = append(out.Failed, name)
			continue
		}
		out.Reports = append(out.Reports, rep)
		out.Checked += rep.Checked
		out.Differing += rep.Differing
		out.Explained += rep.Explained
		out.Unexplained += rep.Differing - rep.Explained
		fmt.Fprintln(stderr, summaryLine(name, rep, jseed, p.Requests()))
	}
	out.OK = out.Unexplained == 0 && len(out.Failed) == 0
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return false, err
		}
	} else if err := writeVerifyTable(stdout, out); err != nil {
		return false, err
	}
	if len(out.Failed) > 0 {
		return false, fmt.Errorf("verify failed for %v", out.Failed)
	}
	return out.Unexplained > 0, nil
}

// summaryLine is the one line per provider and account verify prints on
// stderr.
func summaryLine(name string, r verify.Report, seed uint64, requests int64) string {
	what := fmt.Sprintf("all %d in window", r.InWindow)
	if !r.All {
		what = fmt.Sprintf("sample %d of %d in window, seed %d", r.Sample, r.InWindow, seed)
	}
	return fmt.Sprintf("verify %s: %d checked, %d differing, %d explained, %d unexplained (%s; window %s to %s; %d requests)",
		name, r.Checked, r.Differing, r.Explained, r.Differing-r.Explained, what,
		r.Since.Format(time.RFC3339), r.Until.Format(time.RFC3339), requests)
}

// writeVerifyTable prints each unexplained difference, one a line, under a
// header, as kubectl does; nothing when there is none.
func writeVerifyTable(w io.Writer, out verifyOutput) error {
	n := 0
	for _, r := range out.Reports {
		n += len(r.Unexplained)
	}
	if n == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tACCOUNT\tPROVIDER_ID\tFIELD\tLOCAL\tAT_PROVIDER")
	for _, r := range out.Reports {
		for _, d := range r.Unexplained {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Provider, runner.Job{Provider: r.Provider, Account: r.Account}.AccountName(), d.ProviderID, d.Field, cell(d.Local), cell(d.Provider))
		}
	}
	return tw.Flush()
}

// cell keeps a value on one table line.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), " ")
}
