package guestinit

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sourcesSum is the sha256 of this package's non-test Go files but abi.go,
// each as its name, a NUL, its bytes and a NUL, in name order.
func sourcesSum(t *testing.T) string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	h := sha256.New()
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") || name == "abi.go" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(name + "\x00"))
		h.Write(b)
		h.Write([]byte{0})
		n++
	}
	if n < 4 {
		t.Fatalf("read %d source files; the test must run in the package's directory", n)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Catches: a change to what a guest's init does, or to how the launcher
// speaks to it, that keeps the old ABI. The launcher would then run an
// agentd built before the change as a newer emulator's init.
func TestABINamesTheSources(t *testing.T) {
	if got := sourcesSum(t); got != abiSum {
		t.Fatalf("guestinit's sources changed: set abiSum in abi.go to %q", got)
	}
}
