package cli

import (
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reconciler/reconciler/config"
)

// IntVar defines an integer flag whose value, when given, is checked
// against the flag's row of config.Limits (the range its config key has
// too): a value that is no whole number or out of range is a
// *config.Error naming the flag and the fix, found while parsing.
func IntVar[T int | int64](fs *pflag.FlagSet, p *T, name string, value T, usage string) {
	*p = value
	fs.Var(&limitedInt[T]{p: p, flag: "--" + name}, name, usage)
}

type limitedInt[T int | int64] struct {
	p    *T
	flag string
}

func (v *limitedInt[T]) String() string { return strconv.FormatInt(int64(*v.p), 10) }
func (v *limitedInt[T]) Type() string   { return "int" }

func (v *limitedInt[T]) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		l, _ := config.LimitOf(v.flag)
		return &config.Error{Key: v.flag, Msg: config.Quote(s) + " is not a whole number", Hint: l.Hint}
	}
	if err := config.CheckFlagInt(v.flag, n); err != nil {
		return err
	}
	*v.p = T(n)
	return nil
}

// DurationVar defines a Go duration flag (24h, 90m) with no default of its
// own (the configuration's applies when it is not given), checked against
// the flag's row of config.Limits while parsing (config.ParseFlagDuration).
func DurationVar(fs *pflag.FlagSet, p *time.Duration, name, usage string) {
	fs.Var(&duration{p: p, flag: "--" + name}, name, usage)
}

type duration struct {
	p    *time.Duration
	flag string
	set  bool
}

func (d *duration) Type() string { return "duration" }

func (d *duration) String() string {
	if !d.set {
		return ""
	}
	return d.p.String()
}

func (d *duration) Set(s string) error {
	v, err := config.ParseFlagDuration(d.flag, s)
	if err != nil {
		return err
	}
	*d.p, d.set = v, true
	return nil
}

// OneOf defines a string flag of c that takes only the allowed values
// (checked while parsing: config.CheckFlagOneOf's message names the flag
// and the values), shows them in the help as its type, and completes them.
// shorthand may be "" (then the messages name --name, else -shorthand).
func OneOf(c *cobra.Command, p *string, name, shorthand, value, usage string, allowed ...string) {
	*p = value
	shown := "--" + name
	if shorthand != "" {
		shown = "-" + shorthand
	}
	c.Flags().VarP(&oneOf{p: p, flag: shown, noun: name, allowed: allowed}, name, shorthand, usage)
	Values(c, name, allowed...)
}

type oneOf struct {
	p          *string
	flag, noun string
	allowed    []string
}

func (o *oneOf) String() string { return *o.p }
func (o *oneOf) Type() string   { return strings.Join(o.allowed, "|") }

func (o *oneOf) Set(s string) error {
	if err := config.CheckFlagOneOf(o.flag, o.noun, s, o.allowed...); err != nil {
		return err
	}
	*o.p = s
	return nil
}
