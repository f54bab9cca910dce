package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator"
)

// Catches: a step's output printed line by line on a terminal (not folded
// into the status line), or dropped off one (a CI log without it), and a
// step's start or end that is not reported.
func TestBuildStepsFoldOnATerminalAndPrintOtherwise(t *testing.T) {
	events := []emulator.BuildEvent{
		{Step: 2, Steps: 3, Line: 2, Instruction: "RUN make"},
		{Step: 2, Steps: 3, Line: 2, Instruction: "RUN make", Output: []byte("compiling a\ncompil")},
		{Step: 2, Steps: 3, Line: 2, Instruction: "RUN make", Output: []byte("ing b\n")},
		{Step: 2, Steps: 3, Line: 2, Instruction: "RUN make", Done: true, Made: true},
		{Step: 3, Steps: 3, Line: 3, Instruction: "COPY x /x"},
		{Step: 3, Steps: 3, Line: 3, Instruction: "COPY x /x", Done: true, Cached: true},
	}
	var plain bytes.Buffer
	d := &buildSteps{a: &app{IO: render.IO{Stderr: &plain, Env: func(string) string { return "" }}}}
	for _, e := range events {
		d.event("img", e)
	}
	want := "microvm: step 2/3 (Dockerfile line 2): RUN make\nmicrovm:   | compiling a\nmicrovm:   | compiling b\nmicrovm: step 2/3: done\n" +
		"microvm: step 3/3 (Dockerfile line 3): COPY x /x\nmicrovm: step 3/3: cached\n"
	if plain.String() != want {
		t.Fatalf("off a terminal:\n%s\nwant:\n%s", plain.String(), want)
	}
	if !d.performed() {
		t.Fatal("steps after FROM ran, yet the build reports the Dockerfile not performed")
	}

	var tty bytes.Buffer
	var labels []string
	d = &buildSteps{a: &app{IO: render.IO{Stderr: &tty, StderrTTY: true, Env: func(string) string { return "" }}}}
	d.setLabel(func(s string) { labels = append(labels, s) })
	for _, e := range events {
		d.event("img", e)
	}
	if strings.Contains(tty.String(), "compiling") {
		t.Fatalf("on a terminal the output was printed, not folded:\n%s", tty.String())
	}
	if !strings.Contains(tty.String(), "step 2/3: done") || len(labels) != 2 || labels[1] != "step 2/3: compiling b" {
		t.Fatalf("on a terminal: %q, status %q", tty.String(), labels)
	}
}
