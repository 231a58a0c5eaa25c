package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// regenerate is the command that rewrites the reference, run from the
// repository root; TestReferenceCurrent names it when the file is stale.
const regenerate = "go run ./services/tollctl gen-docs docs/tollctl.md"

// writeReferenceFile writes the command reference to name. The tree is
// built with an empty environment, so the file does not depend on the
// machine that writes it.
func writeReferenceFile(name string) error {
	var b bytes.Buffer
	writeReference(&b, referenceRoot())
	return writeFileAtomic(name, func(w io.Writer) error {
		_, err := w.Write(b.Bytes())
		return err
	})
}

// referenceRoot is the command tree as the reference documents it.
func referenceRoot() *cobra.Command {
	return newRoot(&app{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }, now: time.Now})
}

// writeReference writes the Markdown reference of root's commands: an
// index by group, the global flags, the exit status, then one section per
// command with its usage, description, examples and flags.
func writeReference(w io.Writer, root *cobra.Command) {
	fmt.Fprintf(w, "# tollctl command reference\n\n")
	fmt.Fprintf(w, "<!-- Generated from the commands by `%s` (or `go generate ./services/tollctl`); edit services/tollctl, not this file. -->\n\n", regenerate)
	fmt.Fprintf(w, "%s\n\n", root.Long)
	fmt.Fprintf(w, "Usage: `%s`. `tollctl help COMMAND` and `tollctl COMMAND --help` print a command's section of this page.\n\n", useLine(root))

	var sections []*cobra.Command
	fmt.Fprintf(w, "## Commands\n")
	for _, g := range root.Groups() {
		fmt.Fprintf(w, "\n### %s\n\n| Command | Summary |\n| --- | --- |\n", g.Title)
		for _, c := range root.Commands() {
			if c.GroupID != g.ID {
				continue
			}
			for _, s := range documented(c) {
				fmt.Fprintf(w, "| [`%s`](#%s) | %s |\n", cell(commandName(s)), anchor(s), cell(s.Short))
				sections = append(sections, s)
			}
		}
	}

	fmt.Fprintf(w, "\n## Global flags\n\nEvery command that reads one of these flags takes it with the same default and "+
		"environment variable (the command line wins over the variable); a command that does not read it refuses it "+
		"as an unknown flag.\n\n| Flag | Variable | Default | Meaning |\n| --- | --- | --- | --- |\n")
	for _, g := range globalFlags {
		f := globalFlagSet().Lookup(g.name)
		env := ""
		if g.env != "" {
			env = "`" + g.env + "`"
		}
		name, usage := pflag.UnquoteUsage(f)
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", flagCell(f, name), env, defaultCell(f), cell(strings.TrimSuffix(usage, " (env "+g.env+")")))
	}

	fmt.Fprintf(w, "\n## Exit status\n\n```\n%s```\n", strings.TrimPrefix(exitStatusText, "Exit status:\n"))

	for _, c := range sections {
		writeSection(w, c)
	}
}

// documented lists c and its subcommands that run something, as the root
// help does.
func documented(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	if !groupOnly(c) {
		out = append(out, c)
	}
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			out = append(out, documented(s)...)
		}
	}
	return out
}

// writeSection writes one command's section.
func writeSection(w io.Writer, c *cobra.Command) {
	c.InitDefaultHelpFlag() // as writeHelp does, for the same usage line
	fmt.Fprintf(w, "\n## %s\n\n%s\n\n```\n%s\n```\n", c.CommandPath(), c.Short, useLine(c))
	if c.Long != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.Long))
	}
	if c.Example != "" {
		fmt.Fprintf(w, "\nExamples:\n\n```sh\n%s\n```\n", c.Example)
	}
	local, global := splitFlags(c)
	n := 0
	local.VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			n++
		}
	})
	if n > 0 {
		fmt.Fprintf(w, "\n| Flag | Default | Meaning |\n| --- | --- | --- |\n")
		local.VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return // every command has it
			}
			name, usage := pflag.UnquoteUsage(f)
			fmt.Fprintf(w, "| %s | %s | %s |\n", flagCell(f, name), defaultCell(f), cell(usage))
		})
	}
	if global.HasAvailableFlags() {
		var names []string
		global.VisitAll(func(f *pflag.Flag) { names = append(names, "`--"+f.Name+"`") })
		fmt.Fprintf(w, "\nGlobal flags: %s (see [Global flags](#global-flags)).\n", strings.Join(names, ", "))
	}
}

// anchor is the link target of c's section heading.
func anchor(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-")
}

func flagCell(f *pflag.Flag, varName string) string {
	s := "--" + f.Name
	if varName != "" {
		s += " " + varName
	}
	return "`" + s + "`"
}

// defaultCell shows f's default unless it is the zero value.
func defaultCell(f *pflag.Flag) string {
	switch f.DefValue {
	case "", "false", "0", "0s", "[]":
		return ""
	}
	return "`" + f.DefValue + "`"
}

// cell escapes s for a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
