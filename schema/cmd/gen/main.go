// Command gen writes every generated artifact from api/ (see package schema).
// `make gen` runs it from the repository root.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/microvms/microvms/schema"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	outs, err := schema.Generate(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for _, o := range outs {
		path := filepath.Join(root, filepath.FromSlash(o.Path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		if old, err := os.ReadFile(path); err == nil && string(old) == string(o.Data) {
			continue
		}
		if err := os.WriteFile(path, o.Data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "gen: wrote", o.Path)
	}
}
