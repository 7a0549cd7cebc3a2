package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
)

// CompletionCmd prints a shell completion script made from the command line grammar.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"Shell: bash, zsh or fish. Load it with: source <(flight-sink completion bash), or flight-sink completion fish | source."`
}

// completionCommand is one command of the grammar: its words ("iceberg publish"), its help and
// its flags (the global ones included).
type completionCommand struct {
	path  string
	help  string
	flags []*kong.Flag
}

// completionCommands returns every runnable command of the grammar in path order.
func completionCommands(app *kong.Application) []completionCommand {
	var out []completionCommand
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, c := range n.Children {
			if c.Type != kong.CommandNode || c.Hidden {
				continue
			}
			if len(c.Children) > 0 {
				walk(c)
				continue
			}
			var flags []*kong.Flag
			for _, group := range c.AllFlags(true) {
				flags = append(flags, group...)
			}
			sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
			out = append(out, completionCommand{path: c.Path(), help: c.Help, flags: flags})
		}
	}
	walk(app.Node)
	return out
}

// Run prints the script for the shell.
func (c *CompletionCmd) Run(kctx *kong.Context) error {
	cmds := completionCommands(kctx.Model)
	switch c.Shell {
	case "fish":
		return fishCompletion(kctx.Stdout, cmds)
	case "zsh":
		fmt.Fprint(kctx.Stdout, "#compdef flight-sink\nautoload -U +X bashcompinit && bashcompinit\n")
	}
	return bashCompletion(kctx.Stdout, cmds)
}

// topWords returns the first words of the commands, once each, in order.
func topWords(cmds []completionCommand) []string {
	var words []string
	seen := map[string]bool{}
	for _, c := range cmds {
		w, _, _ := strings.Cut(c.path, " ")
		if !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	return words
}

// bashCompletion writes a bash script: commands for the first word, a group's commands for the
// second, a command's flags after that, and file names for arguments.
func bashCompletion(w io.Writer, cmds []completionCommand) error {
	var b strings.Builder
	b.WriteString("# flight-sink bash completion: source <(flight-sink completion bash)\n_flight_sink() {\n")
	b.WriteString("\tlocal cur=${COMP_WORDS[COMP_CWORD]} words=\"\"\n")
	fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\twords=%q\n\telse\n\t\tcase \"${COMP_WORDS[1]} ${COMP_WORDS[2]}\" in\n", strings.Join(topWords(cmds), " "))
	groups := map[string][]string{}
	for _, c := range cmds {
		if first, rest, ok := strings.Cut(c.path, " "); ok {
			groups[first] = append(groups[first], rest)
		}
	}
	for _, c := range cmds {
		var flags []string
		for _, f := range c.flags {
			flags = append(flags, "--"+f.Name)
		}
		pattern := `"` + c.path + `"`
		if !strings.Contains(c.path, " ") {
			pattern = `"` + c.path + ` "*` // a one-word command, whatever the second word is
		}
		fmt.Fprintf(&b, "\t\t%s) words=%q ;;\n", pattern, strings.Join(flags, " "))
	}
	for _, first := range topWords(cmds) {
		if sub := groups[first]; len(sub) > 0 {
			fmt.Fprintf(&b, "\t\t\"%s \"*) words=%q ;;\n", first, strings.Join(sub, " "))
		}
	}
	b.WriteString("\t\tesac\n\tfi\n\tCOMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n}\ncomplete -o default -F _flight_sink flight-sink\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// fishCompletion writes a fish script.
func fishCompletion(w io.Writer, cmds []completionCommand) error {
	var b strings.Builder
	b.WriteString("# flight-sink fish completion: flight-sink completion fish | source\ncomplete -c flight-sink -f\n")
	helps := map[string]string{}
	for _, c := range cmds {
		first, _, _ := strings.Cut(c.path, " ")
		if _, ok := helps[first]; !ok {
			helps[first] = c.help
		}
	}
	for _, word := range topWords(cmds) {
		fmt.Fprintf(&b, "complete -c flight-sink -n __fish_use_subcommand -a %s -d %s\n", word, fishQuote(helps[word]))
	}
	for _, c := range cmds {
		words := strings.Fields(c.path)
		cond := "__fish_seen_subcommand_from " + words[0]
		if len(words) > 1 {
			fmt.Fprintf(&b, "complete -c flight-sink -n %s -a %s -d %s\n", fishQuote(cond), words[1], fishQuote(c.help))
			cond += "; and __fish_seen_subcommand_from " + words[1]
		}
		for _, f := range c.flags {
			fmt.Fprintf(&b, "complete -c flight-sink -n %s -l %s -d %s\n", fishQuote(cond), f.Name, fishQuote(f.Help))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote quotes s for fish: single quotes, with \ and ' escaped.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
