package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// rootLong opens `tollctl help` and the reference.
const rootLong = "tollctl is the Tollgate operator CLI: it mints tokens and manages API keys, shows and checks " +
	"spend, writes finance reports and runs operations on the usage stream. Flags go before or after a " +
	"command's arguments."

// exitStatusText documents the exit status of every command.
const exitStatusText = `Exit status:
  0  done; a check found nothing wrong
  1  the command failed, or a check found problems (reconcile: the sources differ; verify: a case fails;
     config check: the file has problems)
  2  the command line is wrong (unknown command or flag, missing or extra argument); reconcile also
     exits 2 when it cannot read a source
`

// groups are the root help's groups, in order.
var groups = []*cobra.Group{
	{ID: groupKeys, Title: "Tokens and keys"},
	{ID: groupSpend, Title: "Budgets and spend"},
	{ID: groupFinance, Title: "Finance"},
	{ID: groupOps, Title: "Operations"},
}

// annotGroupOnly marks a command that only groups its subcommands.
const annotGroupOnly = "tollctl-group-only"

// errUsageShown is a usage error whose help is already printed.
var errUsageShown = fmt.Errorf("%w: help shown", errUsage)

// newRoot builds the command tree of a: commands() plus help, shell
// completion and the hidden reference generator.
func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "tollctl",
		Short:         "the Tollgate operator CLI",
		Long:          rootLong,
		SilenceErrors: true, // execute prints errors and sets the exit status
		SilenceUsage:  true,
	}
	markGroupOnly(root)
	root.SuggestionsMinimumDistance = 2
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.AddGroup(groups...)
	for _, c := range commands() {
		root.AddCommand(a.cobraCommand(c))
	}
	root.SetHelpCommand(helpCommand())
	root.InitDefaultHelpCmd()
	root.SetCompletionCommandGroupID(groupOps)
	root.InitDefaultCompletionCmd()
	root.AddCommand(&cobra.Command{
		Use:    "gen-docs FILE",
		Short:  "write the command reference (docs/tollctl.md) to FILE",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return writeReferenceFile(args[0])
		},
	})
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { writeHelp(c.OutOrStdout(), c) })
	root.SetUsageFunc(func(c *cobra.Command) error { writeUsage(c.ErrOrStderr(), c); return nil })
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", errUsage, err) })
	return root
}

// cobraCommand turns cmd into a cobra command: its flags registered by its
// setup, its arguments passed to the function setup returned.
func (a *app) cobraCommand(cmd command) *cobra.Command {
	c := &cobra.Command{
		Use:     cmd.use,
		GroupID: cmd.group,
		Short:   cmd.summary,
		Long:    cmd.long,
		Example: cmd.example,
		Args:    cobra.ArbitraryArgs, // each command checks its own, with its own message
	}
	if cmd.setup == nil {
		markGroupOnly(c)
	} else {
		runCmd := cmd.setup(a, c.Flags())
		c.RunE = func(_ *cobra.Command, args []string) error { return runCmd(args) }
	}
	for flag, values := range cmd.values {
		if err := c.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)); err != nil {
			panic(err) // a flag the command does not define: a mistake in commands()
		}
	}
	// Shells complete file names for FILE and DIR arguments only.
	if !strings.Contains(cmd.use, "FILE") && !strings.Contains(cmd.use, "DIR") {
		c.ValidArgsFunction = cobra.NoFileCompletions
	}
	for _, s := range cmd.sub {
		c.AddCommand(a.cobraCommand(s))
	}
	return c
}

// markGroupOnly makes c a command that only groups subcommands: run alone
// or with an unknown subcommand it names the ones it has (exit status 2).
func markGroupOnly(c *cobra.Command) {
	c.Annotations = map[string]string{annotGroupOnly: "true"}
	c.Args = cobra.ArbitraryArgs
	c.FParseErrWhitelist.UnknownFlags = true // "tollctl bogus --nats URL" is about "bogus"
	c.RunE = unknownCommand
}

// groupOnly reports whether c only groups subcommands (cobra's completion
// command does too).
func groupOnly(c *cobra.Command) bool {
	return c.Annotations[annotGroupOnly] != "" || !c.Runnable()
}

// unknownCommand is the RunE of a command that only groups subcommands:
// args hold no subcommand it has.
func unknownCommand(c *cobra.Command, args []string) error {
	if !c.HasParent() {
		if len(args) == 0 {
			writeHelp(c.ErrOrStderr(), c)
			return errUsageShown
		}
		msg := fmt.Sprintf("unknown command %q", args[0])
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += " (did you mean " + strings.Join(s, " or ") + "?)"
		}
		return fmt.Errorf("%w: %s", errUsage, msg)
	}
	name := commandName(c)
	if len(args) > 0 {
		name += " " + args[0]
	}
	var subs []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			subs = append(subs, commandName(s))
		}
	}
	return fmt.Errorf("%w: unknown command %q (want %s)", errUsage, name, strings.Join(subs, ", "))
}

// helpCommand is `tollctl help [COMMAND]`.
func helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "help [COMMAND]",
		GroupID: groupOps,
		Short:   "show the commands, or one command's flags and examples",
		Example: "tollctl help keys revoke\ntollctl keys revoke --help",
		Args:    cobra.ArbitraryArgs,
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, s := range cmd.Commands() {
				if s.IsAvailableCommand() && strings.HasPrefix(s.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(s.Name(), s.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return fmt.Errorf("%w: no command %q", errUsage, strings.Join(args, " "))
			}
			writeHelp(c.OutOrStdout(), cmd)
			return nil
		},
	}
}

// execute runs root with args and returns the exit status: 0 success, 1
// failure, 2 bad usage (or the status an exitStatus error carries).
func (a *app) execute(root *cobra.Command, args []string) int {
	if c, _, err := root.Find(args); err == nil {
		args = goStyleFlags(c, args)
	}
	root.SetArgs(append([]string{}, args...)) // never nil: cobra reads os.Args then
	c, err := root.ExecuteC()
	var status exitStatus
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsageShown):
		return 2
	case errors.As(err, &status):
		fmt.Fprintf(a.stderr, "%s: %v\n", c.CommandPath(), err)
		return status.code
	case errors.Is(err, errReported):
		return 1
	case errors.Is(err, errUsage):
		fmt.Fprintf(a.stderr, "%s: %v\n", c.CommandPath(), err)
		writeUsage(a.stderr, c)
		return 2
	default:
		fmt.Fprintf(a.stderr, "%s: %v\n", c.CommandPath(), err)
		return 1
	}
}

// goStyleFlags rewrites the single-dash long flags earlier tollctl
// versions, built on Go's flag package, accepted ("-sub alice", "-json")
// to the double dash pflag reads, so that scripts keep working. Only
// names c defines are rewritten; a flag's value ("--since -1h", "--reason
// -json") and anything after "--" are left alone.
func goStyleFlags(c *cobra.Command, args []string) []string {
	c.InitDefaultHelpFlag()
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		s := args[i]
		if s == "--" {
			return append(out, args[i:]...)
		}
		var f *pflag.Flag
		name, _, hasValue := strings.Cut(strings.TrimLeft(s, "-"), "=")
		switch {
		case strings.HasPrefix(s, "--"):
			f = c.Flags().Lookup(name)
		case strings.HasPrefix(s, "-") && len(name) > 1:
			if f = c.Flags().Lookup(name); f != nil {
				s = "-" + s
			}
		}
		out = append(out, s)
		if f != nil && !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// commandName is c's path without "tollctl ": "keys revoke".
func commandName(c *cobra.Command) string {
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// useLine is c's usage line: "tollctl keys revoke ID [flags]".
func useLine(c *cobra.Command) string {
	if groupOnly(c) {
		return c.CommandPath() + " COMMAND [arguments] [flags]"
	}
	return c.UseLine()
}

// writeUsage prints c's usage line and where its help is, after a usage
// error.
func writeUsage(w io.Writer, c *cobra.Command) {
	c.InitDefaultHelpFlag()
	if !c.HasParent() {
		fmt.Fprintf(w, "Usage: %s\nRun 'tollctl help' for the commands.\n", useLine(c))
		return
	}
	fmt.Fprintf(w, "Usage: %s\nRun 'tollctl help %s' for the flags and examples.\n", useLine(c), commandName(c))
}

// writeHelp prints c's help: what it does, usage, examples, subcommands
// (by group for the root), flags and global flags.
func writeHelp(w io.Writer, c *cobra.Command) {
	c.InitDefaultHelpFlag() // "-h, --help", and "[flags]" in the usage line
	if c.HasParent() {
		fmt.Fprintf(w, "%s: %s\n\nUsage: %s\n", c.CommandPath(), c.Short, useLine(c))
		if c.Long != "" {
			fmt.Fprintf(w, "\n%s\n", wrap(c.Long, 100))
		}
	} else {
		fmt.Fprintf(w, "%s\n\nUsage: %s\n", wrap(c.Long, 100), useLine(c))
	}
	if c.Example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", indent(c.Example, "  "))
	}
	if c.HasParent() {
		var subs [][2]string
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() {
				subs = append(subs, listing(s)...)
			}
		}
		if len(subs) > 0 {
			fmt.Fprintf(w, "\nCommands:\n")
			writeListing(w, subs)
		}
	} else {
		for _, g := range c.Groups() {
			var subs [][2]string
			for _, s := range c.Commands() {
				if s.GroupID == g.ID {
					subs = append(subs, listing(s)...)
				}
			}
			fmt.Fprintf(w, "\n%s:\n", g.Title)
			writeListing(w, subs)
		}
	}
	local, global := splitFlags(c)
	if local.HasAvailableFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", local.FlagUsages())
	}
	if global.HasAvailableFlags() {
		fmt.Fprintf(w, "\nGlobal flags:\n%s", global.FlagUsages())
	}
	if !c.HasParent() {
		fmt.Fprintf(w, "\nGlobal flags (every command that reads one takes it, with the same default and variable):\n%s",
			globalFlagSet().FlagUsages())
		fmt.Fprintf(w, "\n%s\nRun 'tollctl help COMMAND' or 'tollctl COMMAND --help' for a command's flags and examples.\n", exitStatusText)
	}
}

// listing is the lines the help lists for c and its subcommands: name with
// arguments, and summary.
func listing(c *cobra.Command) [][2]string {
	var out [][2]string
	if !groupOnly(c) {
		_, args, _ := strings.Cut(c.Use, " ")
		out = append(out, [2]string{strings.TrimSpace(commandName(c) + " " + args), c.Short})
	}
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			out = append(out, listing(s)...)
		}
	}
	return out
}

func writeListing(w io.Writer, lines [][2]string) {
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s  %s\n", width, l[0], l[1])
	}
}

// splitFlags divides c's flags into its own and the global ones it reads.
func splitFlags(c *cobra.Command) (local, global *pflag.FlagSet) {
	local = pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	global = pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if isGlobal(f.Name) {
			global.AddFlag(f)
		} else {
			local.AddFlag(f)
		}
	})
	return local, global
}

// globalFlagSet holds the global flags with their defaults, for the root
// help and the reference.
func globalFlagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("global", pflag.ContinueOnError)
	noEnv := &app{getenv: func(string) string { return "" }}
	for _, g := range globalFlags {
		if g == flagJSON {
			jsonFlag(fs)
			continue
		}
		g.stringVar(noEnv, fs, new(string))
	}
	return fs
}

// wrap breaks the lines of text longer than width at spaces; indented
// lines (commands in cobra's own help texts) are kept as they are.
func wrap(text string, width int) string {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if len(line) <= width || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
			continue
		}
		var b strings.Builder
		n := 0
		for j, word := range strings.Fields(line) {
			if j > 0 && n+1+len(word) > width {
				b.WriteByte('\n')
				n = 0
			} else if j > 0 {
				b.WriteByte(' ')
				n++
			}
			b.WriteString(word)
			n += len(word)
		}
		lines[i] = b.String()
	}
	return strings.Join(lines, "\n")
}

// indent prefixes every line of text.
func indent(text, prefix string) string {
	return prefix + strings.ReplaceAll(text, "\n", "\n"+prefix)
}
