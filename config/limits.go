package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limit is the range of one numeric or duration setting. A setting has a
// config key, a flag, or both; both are checked against the same row.
type Limit struct {
	Key  string  // dotted config key ("" when only a flag sets it)
	Flag string  // command-line flag, with its dashes ("" when only the file sets it)
	Min  float64 // inclusive; durations in nanoseconds
	Max  float64 // inclusive
	// Duration: the value is a Go duration (Min and Max are nanoseconds).
	Duration bool
	// Integer: the value must be a whole number.
	Integer bool
	Hint    string // why the range, and a good value
}

// Limits is the one table of every numeric and duration setting's range.
// Each bound has a reason: the maximum is where the value stops meaning
// anything useful or starts costing memory, connections or hours.
var Limits = []Limit{
	{Key: "database.max_open_conns", Min: 2, Max: 200, Integer: true, Hint: "use 2 to 200: one connection holds the run lock; 10 is a good default"},
	{Key: "run.window", Flag: "--window", Min: float64(time.Minute), Max: float64(366 * 24 * time.Hour), Duration: true, Hint: "use 1m to 8784h (a year); for an older start pass --since"},
	{Key: "run.overlap", Min: 0, Max: float64(7 * 24 * time.Hour), Duration: true, Hint: "use 0s to 168h; 1h is a good default"},
	{Key: "run.batch_size", Flag: "--batch-size", Min: 1, Max: 100000, Integer: true, Hint: "use 1 to 100000; 1000 is a good default"},
	{Key: "run.stuck_after", Min: float64(time.Minute), Max: float64(366 * 24 * time.Hour), Duration: true, Hint: "use 1m to 8784h; e.g. 72h"},
	{Key: "run.stuck_limit", Min: -1, Max: 100000, Integer: true, Hint: "use -1 (off) to 100000; 100 is a good default"},
	{Key: "run.shutdown_grace", Min: float64(time.Second), Max: float64(time.Hour), Duration: true, Hint: "use 1s to 1h, below the pod's terminationGracePeriodSeconds; 25s is a good default"},
	{Key: "run.lock_wait", Flag: "--lock-wait", Min: 0, Max: float64(24 * time.Hour), Duration: true, Hint: "use 0s (give up at once) to 24h; e.g. 30s"},
	{Key: "providers.stripe.requests_per_second", Min: 0.01, Max: 1000, Hint: "use 0.01 to 1000; Stripe allows 25 requests/s per endpoint by default, within 100/s per account live (25 in a sandbox), shared with your app; stay below 25"},
	{Key: "providers.stripe.max_retries", Min: 0, Max: 100, Integer: true, Hint: "use 0 to 100; e.g. 8"},
	{Key: "providers.stripe.timeout", Min: float64(time.Millisecond), Max: float64(10 * time.Minute), Duration: true, Hint: "use 1ms to 10m, for one attempt of a request; e.g. 30s"},
	{Key: "providers.stripe.request_deadline", Min: float64(time.Second), Max: float64(time.Hour), Duration: true, Hint: "use 1s to 1h, for a request with all its retries and waits; 3m leaves room for 8 retries"},
	{Key: "providers.gocardless.requests_per_second", Min: 0.01, Max: 1000, Hint: "use 0.01 to 1000; GoCardless allows 1000 requests a minute per token; stay below about 15"},
	{Key: "providers.gocardless.max_retries", Min: 0, Max: 100, Integer: true, Hint: "use 0 to 100; e.g. 8"},
	{Key: "providers.gocardless.timeout", Min: float64(time.Millisecond), Max: float64(10 * time.Minute), Duration: true, Hint: "use 1ms to 10m, for one attempt of a request; e.g. 30s"},
	{Key: "providers.gocardless.request_deadline", Min: float64(time.Second), Max: float64(time.Hour), Duration: true, Hint: "use 1s to 1h, for a request with all its retries and waits; 3m leaves room for 8 retries"},
	{Key: "providers.gocardless.stuck_after_working_days", Min: 1, Max: 60, Integer: true, Hint: "use 1 to 60; Bacs confirms about 3 working days after submission"},
	{Key: "providers.gocardless.event_retention", Min: 0, Max: float64(10 * 366 * 24 * time.Hour), Duration: true, Hint: "use 0s (unknown) to 87840h"},
	{Key: "notify.report_link_ttl", Min: float64(time.Hour), Max: float64(366 * 24 * time.Hour), Duration: true, Hint: "use 1h to 8784h (a year): a signed link opens the report that long; 720h (30 days) is a good default"},
	{Flag: "--concurrency", Min: 1, Max: 64, Integer: true, Hint: "use 1 to 64 accounts at once; they share one Stripe request budget"},
	{Flag: "--payments", Min: 0, Max: 100000, Integer: true, Hint: "use 0 to 100000 generated payments"},
	{Flag: "--seed", Min: 0, Max: math.MaxInt64, Integer: true, Hint: "use 0 or more"},
	{Flag: "--sample", Min: 1, Max: 1000000, Integer: true, Hint: "use 1 to 1000000 payments, or --all"},
	{Flag: "--history", Min: 1, Max: 1000, Integer: true, Hint: "use 1 to 1000 runs"},
	{Flag: "--limit", Min: 1, Max: 1000, Integer: true, Hint: "use 1 to 1000 runs, as GET /runs?limit= does"},
}

// LimitOf returns the row of a config key or a flag ("--batch-size").
func LimitOf(name string) (Limit, bool) {
	for _, l := range Limits {
		if l.Key == name || l.Flag == name {
			return l, true
		}
	}
	return Limit{}, false
}

// mustLimit is LimitOf for names the code writes: a typo is a bug.
func mustLimit(name string) Limit {
	l, ok := LimitOf(name)
	if !ok {
		panic("config: no limit for " + name)
	}
	return l
}

// Check returns nil when v is within the limit, else an *Error naming name
// (the key or the flag). shown is how the value may be printed: "" prints
// it, a source ("${VAR}") names that instead of the value.
func (l Limit) Check(name string, v float64, shown string) error {
	ok := !math.IsNaN(v) && !math.IsInf(v, 0) && v >= l.Min && v <= l.Max
	if ok && l.Integer && v != math.Trunc(v) {
		ok = false
	}
	if ok {
		return nil
	}
	what := shown
	if what == "" {
		what = l.format(v)
	} else {
		what = "the value from " + what
	}
	if l.Duration && l.Min >= 0 && v < 0 {
		return &Error{Key: name, Msg: what + " must not be negative", Hint: l.Hint}
	}
	return &Error{Key: name, Msg: what + " is out of range", Hint: l.Hint}
}

func (l Limit) format(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case l.Duration:
		return time.Duration(v).String()
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// CheckFlagInt checks an integer flag's value against its row.
func CheckFlagInt(flag string, v int64) error {
	return mustLimit(flag).Check(flag, float64(v), "")
}

// ParseFlagDuration parses a duration flag's value and checks it against
// its row.
func ParseFlagDuration(flag, s string) (time.Duration, error) {
	l := mustLimit(flag)
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &Error{Key: flag, Msg: Quote(s) + " is not a duration", Hint: "write e.g. 24h, 90m or 30s; " + l.Hint}
	}
	return d, l.Check(flag, float64(d), "")
}

// Quote quotes a value for a one-line message: control characters,
// newlines and bidirectional overrides escaped, at most 64 characters kept.
func Quote(s string) string {
	const max = 64
	if utf8.RuneCountInString(s) > max {
		r := []rune(s)
		return strconv.QuoteToASCII(string(r[:max])) + fmt.Sprintf("… (%d characters)", len(r))
	}
	return strconv.QuoteToASCII(s)
}

// OneLine makes s safe to print as one line of plain text: newlines,
// other control characters and bidirectional overrides are escaped as Go
// does in a quoted string, so no value can forge a log line.
func OneLine(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// CheckFlagOneOf checks that a flag's value is one of allowed, naming them
// when it is not: `--mode: unknown mode "x" (use auto, listing or events)`.
func CheckFlagOneOf(flag, noun, v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	use := strings.Join(allowed, ", ")
	if n := len(allowed); n > 1 {
		use = strings.Join(allowed[:n-1], ", ") + " or " + allowed[n-1]
	}
	return &Error{Key: flag, Msg: "unknown " + noun + " " + Quote(v), Hint: "use " + use}
}
