package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Output is what `reconciler verify -o json` prints: the totals over every
// provider and account verified, and one report each. Its JSON is stable:
// fields are added, never renamed.
type Output struct {
	OK bool `json:"ok"`
	// Population is the number of payments of the windows, Sample the
	// sample size asked for (0 for --all), Checked how many were compared.
	Population int  `json:"population"`
	Sample     int  `json:"sample"`
	All        bool `json:"all"`
	// Seed is the --seed that repeats every report's draw (report i uses
	// Seed+i; each report's own seed is in it); null for --all.
	Seed        *uint64 `json:"seed"`
	Checked     int     `json:"checked"`
	Differing   int     `json:"differing"`
	Explained   int     `json:"explained"`
	Unexplained int     `json:"unexplained"`
	// UpperBound is the one report's upper bound (see Report.UpperBound)
	// when exactly one provider and account was verified; otherwise null,
	// and each report has its own (samples of several windows are not one
	// uniform sample of their union).
	UpperBound *float64 `json:"upper_bound"`
	// BoundOn is that report's BoundOn.
	BoundOn string   `json:"bound_on,omitempty"`
	Reports []Report `json:"reports"`
	// Failed names the provider/account pairs that could not be verified.
	Failed []string `json:"failed,omitempty"`
}

// NewOutput starts the output of one verify command.
func NewOutput(all bool, sample int, seed uint64) Output {
	o := Output{OK: true, All: all, Reports: []Report{}}
	if !all {
		o.Sample, o.Seed = sample, &seed
	}
	return o
}

// Add counts one report in.
func (o *Output) Add(r Report) {
	o.Reports = append(o.Reports, r)
	o.Population += r.Population
	o.Checked += r.Checked
	o.Differing += r.Differing
	o.Explained += r.Explained
	o.Unexplained += r.Differing - r.Explained
	o.UpperBound, o.BoundOn = nil, ""
	if len(o.Reports) == 1 {
		o.UpperBound, o.BoundOn = r.UpperBound, r.BoundOn
	}
	o.OK = o.Unexplained == 0 && len(o.Failed) == 0
}

// Fail records a provider/account pair that could not be verified.
func (o *Output) Fail(name string) {
	o.Failed = append(o.Failed, name)
	o.OK = false
}

// WriteJSON writes o indented.
func (o Output) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}

// WriteTable writes o as kubectl would: a line per provider and account
// with its population, sample and findings, each report's statement, and
// then every unexplained difference, one a line. name gives a report's
// account column ("platform" for "").
func (o Output) WriteTable(w io.Writer, name func(Report) string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tACCOUNT\tPOPULATION\tCHECKED\tSEED\tDIFFERING\tEXPLAINED\tUNEXPLAINED\tUPPER_BOUND")
	for _, r := range o.Reports {
		seed, bound := "-", "-"
		if r.Seed != nil {
			seed = fmt.Sprint(*r.Seed)
		}
		if r.UpperBound != nil {
			bound = strings.NewReplacer("fewer than ", "<", "at most ", "<=").Replace(Percent(*r.UpperBound))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Provider, name(r), Count(r.Population), Count(r.Checked), seed,
			Count(r.Differing), Count(r.Explained), Count(r.Differing-r.Explained), bound)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, r := range o.Reports {
		if _, err := fmt.Fprintf(w, "%s/%s: %s.\n", r.Provider, name(r), r.Statement); err != nil {
			return err
		}
	}
	if o.Unexplained == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tACCOUNT\tPROVIDER_ID\tFIELD\tLOCAL\tAT_PROVIDER")
	for _, r := range o.Reports {
		for _, d := range r.Unexplained {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Provider, name(r), d.ProviderID, d.Field, cell(d.Local), cell(d.Provider))
		}
	}
	return tw.Flush()
}

// Summary is the one line per provider and account verify prints on
// stderr.
func Summary(name string, r Report, requests int64) string {
	what := fmt.Sprintf("all %d in window", r.InWindow)
	if !r.All && r.Seed != nil {
		what = fmt.Sprintf("sample %d of %d in window, seed %d", r.Sample, r.InWindow, *r.Seed)
	}
	run := ""
	if r.RunID != 0 {
		run = fmt.Sprintf("; recorded as run %d", r.RunID)
	}
	return fmt.Sprintf("verify %s: %d checked, %d differing, %d explained, %d unexplained (%s; window %s to %s; %d requests%s): %s",
		name, r.Checked, r.Differing, r.Explained, r.Differing-r.Explained, what,
		r.Since.Format(time.RFC3339), r.Until.Format(time.RFC3339), requests, run, r.Statement)
}

// cell keeps a value on one table line.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), " ")
}
