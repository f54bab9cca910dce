package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Catches: a mutant that no longer compiles counted killed (gremlins 0.6
// reads go test's exit 1 for a build failure as a failing test), or a
// compiling one dropped from the killed count.
func TestCompilesTellsABuildFailureFromAKill(t *testing.T) {
	mod := t.TempDir()
	src := "package a\n\nfunc S(x string) string { return x + \"!\" }\n\nfunc N(x int) int { return x + 1 }\n"
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/m\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mod, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "a", "a.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(mod)
	lines := strings.Split(src, "\n")
	col := func(line int) int { return strings.Index(lines[line-1], "+") + 1 }
	if compiles("a", "a.go", 3, col(3)) {
		t.Fatal(`"x" - "!" between strings reported as compiling`)
	}
	if !compiles("a", "a.go", 5, col(5)) {
		t.Fatal("x - 1 between ints reported as not compiling")
	}
	// The overlay never touches the tree.
	if got, _ := os.ReadFile(filepath.Join(mod, "a", "a.go")); string(got) != src {
		t.Fatalf("the file was edited:\n%s", got)
	}
}

// Catches: the staging test inverted, so a command's mutants run against the
// module root (every one "killed" at setup) or every package gets copied.
func TestGremlinsPackageDir(t *testing.T) {
	for _, c := range []struct{ dir, name, want string }{
		{"agentd/internal/tarx", "tarx", "agentd/internal/tarx"},
		{"client", "client", "client"},
		{"cmd/microvm", "main", "."},
		{"cmd/microvm_main", "main", "cmd/microvm_main"},
	} {
		if got := gremlinsPackageDir(c.dir, c.name); got != c.want {
			t.Errorf("gremlinsPackageDir(%q, %q) = %q, want %q", c.dir, c.name, got, c.want)
		}
	}
}
