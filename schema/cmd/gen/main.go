// Command gen writes every generated artifact from api/ (see package schema).
// `make gen` runs it from the repository root.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
	if err := removeStale(root, outs); err != nil {
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

// removeStale deletes generated Go files under schema.SDKDir that this run
// no longer produces (an operation removed from the API), so the drift gate
// cannot miss them; hand-written files there never carry the header.
func removeStale(root string, outs []schema.Output) error {
	want := map[string]bool{}
	for _, o := range outs {
		want[filepath.FromSlash(o.Path)] = true
	}
	dir := filepath.Join(root, filepath.FromSlash(schema.SDKDir))
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || want[rel] {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasPrefix(string(b), schema.GeneratedHeader) {
			fmt.Fprintln(os.Stderr, "gen: removed", filepath.ToSlash(rel))
			return os.Remove(path)
		}
		return nil
	})
}
