package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// maxFileLines is the most lines a hand-written file here may hold: a file
// past it is two concerns sharing one name (issue 31 split attached.go at
// 886 lines).
const maxFileLines = 500

// Catches: a file of this package grown past maxFileLines, tests included.
func TestNoFileOver500Lines(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) < 20 {
		t.Fatalf("%d files: %v", len(files), err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n > maxFileLines {
			t.Errorf("%s has %d lines, over %d: split it by concern", f, n, maxFileLines)
		}
	}
}
