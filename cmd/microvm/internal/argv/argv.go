package argv

import (
	"slices"
	"strings"

	"github.com/alecthomas/kong"
)

// HoistFlags lets a command that takes a trailing command line (exec) accept
// its own flags wherever they stand, as the reference's examples write them
// (`microvm exec "mkdir -p DIR" --endpoint … --json`): a word that is one of
// the command's (or a global) flags is a flag, with its value when it takes
// one; every other word after the first command word is the command's; and
// everything after a "--" is the command's, verbatim. The words come back
// as flags, then "--", then the command, which is what the parser reads.
// Any other command's words are returned unchanged.
func HoistFlags(k *kong.Kong, args []string) []string {
	i := 0
	for ; i < len(args); i++ {
		if args[i] == "--" {
			return args
		}
		if !strings.HasPrefix(args[i], "-") {
			break
		}
	}
	if i == len(args) {
		return args
	}
	var node *kong.Node
	for _, c := range k.Model.Children {
		if c.Name == args[i] || slices.Contains(c.Aliases, args[i]) {
			node = c
		}
	}
	if node == nil || !takesCommandLine(node) {
		return args
	}
	flags := map[string]*kong.Flag{}
	for _, group := range node.AllFlags(false) {
		for _, f := range group {
			flags["--"+f.Name] = f
			for _, alias := range f.Aliases {
				flags["--"+alias] = f
			}
			if f.Short != 0 {
				flags["-"+string(f.Short)] = f
			}
			if f.Negated {
				flags["--no-"+f.Name] = f
			}
		}
	}
	out := slices.Clone(args[:i+1])
	var words []string
	for j := i + 1; j < len(args); j++ {
		w := args[j]
		if w == "--" {
			words = append(words, args[j+1:]...)
			break
		}
		name, _, inline := strings.Cut(w, "=")
		f, known := flags[name]
		switch {
		case known:
			out = append(out, w)
			if !inline && !f.IsBool() && !f.IsCounter() && j+1 < len(args) {
				j++
				out = append(out, args[j])
			}
		case strings.HasPrefix(w, "-") && len(words) == 0:
			// Before the command starts an unknown flag is a typo the
			// parser refuses, not a program named "--tiemout".
			out = append(out, w)
		default:
			words = append(words, w)
		}
	}
	if len(words) > 0 {
		out = append(append(out, "--"), words...)
	}
	return out
}

// takesCommandLine reports whether a command's last positional passes
// its words through (exec's COMMAND).
func takesCommandLine(n *kong.Node) bool {
	for _, p := range n.Positional {
		if p.PassthroughMode != kong.PassThroughModeNone {
			return true
		}
	}
	return false
}
