// Package cli is the command line's framework around cobra: commands whose
// help (use line, summary, description, examples) is read from text files,
// one-line usage errors that name the flag or argument and the fix, the
// argument checks, silent exit codes, and the completion of flag values.
// cmd/reconciler declares the commands and their flags and wires them; what
// every command shares lives here, so the command stays thin.
package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/runner"
)

// Usagef is a usage error (runner.UsageError): exit code 2, nothing touched.
func Usagef(format string, a ...any) error {
	return runner.UsageError{Err: fmt.Errorf(format, a...)}
}

// Exit ends a command with its code and no message of its own: the
// command has said what it had to (verify's and payouts' exit 4, a bare
// reconciler's usage on stderr).
type Exit int

func (e Exit) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// Doc is a command's help as its text file writes it:
//
//	line 1   the use line, command name first ("ack FINGERPRINT... --note TEXT")
//	line 2   the one-line summary
//	...      the description, up to a line "Examples:"
//	...      the examples, indented
type Doc struct{ Use, Short, Long, Example string }

// ReadDoc reads the help of a command from file name in fsys.
func ReadDoc(fsys fs.FS, name string) (Doc, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return Doc{}, err
	}
	lines := strings.SplitN(string(b), "\n", 3)
	if len(lines) < 3 {
		return Doc{}, fmt.Errorf("%s: want a use line, a summary and a description", name)
	}
	long, example, _ := strings.Cut(lines[2], "\nExamples:\n")
	return Doc{Use: lines[0], Short: lines[1], Long: strings.TrimSpace(long), Example: strings.TrimRight(example, "\n")}, nil
}

// Command is a leaf command with doc's help that takes no positional
// argument (NoArgs; set Args to take some) and runs run.
func Command(doc Doc, run func(c *cobra.Command, args []string) error) *cobra.Command {
	return &cobra.Command{Use: doc.Use, Short: doc.Short, Long: doc.Long, Example: doc.Example, Args: NoArgs, RunE: run,
		ValidArgsFunction: cobra.NoFileCompletions}
}

// Group is a command that only holds subcommands ("runs"): an unknown
// subcommand is a usage error naming it; none prints the help on stderr
// and exits 2, as a bare reconciler does.
func Group(doc Doc, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: doc.Use, Short: doc.Short, Long: doc.Long, Example: doc.Example, Args: unknownCommand}
	c.RunE = func(c *cobra.Command, _ []string) error {
		c.SetOut(c.ErrOrStderr())
		_ = c.Help()
		return Exit(2)
	}
	c.AddCommand(subs...)
	return c
}

// Root makes c the root of the tree: errors are returned, never printed
// with a usage dump (the caller prints its one line), a flag error is a
// usage error naming the flag and the fix, an unknown command is one too,
// and the completion command is cobra's with an example.
func Root(c *cobra.Command) {
	c.SilenceErrors, c.SilenceUsage = true, true
	c.Args = unknownCommand
	c.SetFlagErrorFunc(FlagError)
	c.InitDefaultHelpCmd()
	c.InitDefaultCompletionCmd()
	Walk(c, func(c *cobra.Command) {
		c.SuggestionsMinimumDistance = 2
		if c.Flags().Lookup("provider") != nil {
			if _, ok := c.GetFlagCompletionFunc("provider"); !ok {
				Values(c, "provider", runner.Providers...)
			}
		}
		if c.Flags().Lookup("config") != nil {
			_ = c.MarkFlagFilename("config", "yaml", "yml")
		}
	})
	for _, sub := range c.Commands() {
		if sub.Name() == "help" {
			sub.Example = fmt.Sprintf("  %[1]s help run\n  %[1]s help runs list", c.Name())
			help := sub.Run
			sub.Run, sub.RunE = nil, func(h *cobra.Command, args []string) error {
				if found, rest, err := c.Find(args); err == nil && len(rest) > 0 {
					return unknownCommand(found, rest) // not cobra's "Unknown help topic" and exit 0
				}
				help(h, args)
				return nil
			}
		}
		if sub.Name() != "completion" {
			continue
		}
		sub.Args, sub.RunE = unknownCommand, func(c *cobra.Command, _ []string) error {
			c.SetOut(c.ErrOrStderr())
			_ = c.Help()
			return Exit(2)
		}
		for _, sh := range sub.Commands() {
			sh.Example = strings.ReplaceAll(shellExamples[sh.Name()], "PROG", c.Name())
		}
		sub.Example = fmt.Sprintf("  source <(%s completion bash)", c.Name())
	}
}

// shellExamples install each shell's completion script (PROG: the program).
var shellExamples = map[string]string{
	"bash":       "  # This session only; for every session, write it to /etc/bash_completion.d/PROG\n  source <(PROG completion bash)",
	"zsh":        "  # Once, then start a new shell (compinit must be enabled)\n  PROG completion zsh > \"${fpath[1]}/_PROG\"",
	"fish":       "  PROG completion fish > ~/.config/fish/completions/PROG.fish",
	"powershell": "  # This session only; add it to $PROFILE for every session\n  PROG completion powershell | Out-String | Invoke-Expression",
}

// path is the command's path without the program's name ("runs list").
func path(c *cobra.Command) string {
	p := c.CommandPath()
	if i := strings.IndexByte(p, ' '); i >= 0 {
		return p[i+1:]
	}
	return p
}

// helpPointer is where a usage error sends the reader.
func helpPointer(c *cobra.Command) string {
	return strings.TrimSpace(fmt.Sprintf("run %s --help", c.CommandPath()))
}

// FlagError turns pflag's error into one usage line naming the flag and
// pointing at the command's help. A value a flag type refused with a
// message of its own (a *config.Error naming the flag and the fix) is
// that message.
func FlagError(c *cobra.Command, err error) error {
	var ce *config.Error
	if errors.As(err, &ce) {
		return ce
	}
	var ue runner.UsageError
	if errors.As(err, &ue) {
		return ue
	}
	var ne *pflag.NotExistError
	var ve *pflag.InvalidValueError
	var re *pflag.ValueRequiredError
	msg := err.Error()
	switch {
	case errors.As(err, &ne) && ne.GetSpecifiedShortnames() != "":
		msg = fmt.Sprintf("unknown flag -%s", ne.GetSpecifiedName()[:1])
	case errors.As(err, &ne):
		msg = "unknown flag --" + ne.GetSpecifiedName()
	case errors.As(err, &ve):
		msg = fmt.Sprintf("--%s: %s is not %s", ve.GetFlag().Name, config.Quote(ve.GetValue()), noun(ve.GetFlag().Value.Type()))
	case errors.As(err, &re):
		msg = fmt.Sprintf("--%s needs a value", re.GetFlag().Name)
	}
	if !c.HasParent() {
		return Usagef("%s (%s for the commands and flags)", msg, helpPointer(c))
	}
	return Usagef("%s: %s (%s for its flags)", path(c), msg, helpPointer(c))
}

// noun names what a flag of type t takes, for a refused value.
func noun(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "a whole number"
	case t == "bool":
		return "true or false"
	case t == "float64":
		return "a number"
	}
	return "a valid " + t
}

// NoArgs refuses any positional argument.
func NoArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef("%s: unexpected argument %s (it takes flags only; %s)", path(c), config.Quote(args[0]), helpPointer(c))
	}
	return nil
}

// ExactArgs takes exactly n positional arguments, named what in the
// message ("a run id").
func ExactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case len(args) < n:
			return Usagef("%s: give %s (%s)", path(c), what, helpPointer(c))
		case len(args) > n:
			return Usagef("%s: unexpected argument %s (give only %s; %s)", path(c), config.Quote(args[n]), what, helpPointer(c))
		}
		return nil
	}
}

// unknownCommand refuses an argument where a subcommand is due, naming
// the closest command when one is close.
func unknownCommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	hint := ""
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		hint = "did you mean " + s[0] + "? "
	}
	return Usagef("unknown command %s for %s (%s%s for the commands)", config.Quote(args[0]), c.CommandPath(), hint, helpPointer(c))
}

// Values completes flag name of c with values (its help says them too).
func Values(c *cobra.Command, name string, values ...string) {
	if err := c.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)); err != nil {
		panic(err) // a flag the command does not define: a programming error
	}
}

// Flags lists every flag c takes, its own and inherited, help included.
func Flags(c *cobra.Command) []*pflag.Flag {
	var all []*pflag.Flag
	c.InitDefaultHelpFlag()
	c.Flags().VisitAll(func(f *pflag.Flag) { all = append(all, f) })
	c.InheritedFlags().VisitAll(func(f *pflag.Flag) { all = append(all, f) })
	return all
}

// Walk calls fn for c and every command below it, hidden ones excepted.
func Walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		if !sub.Hidden {
			Walk(sub, fn)
		}
	}
}

// MustDoc is ReadDoc for the help the binary embeds: a file that is
// missing or malformed is a programming error, and the golden test of
// every command's help finds it first.
func MustDoc(fsys fs.FS, name string) Doc {
	d, err := ReadDoc(fsys, name)
	if err != nil {
		panic(err)
	}
	return d
}
