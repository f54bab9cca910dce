package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	"github.com/microvms/microvms/emulator"
)

// buildSteps shows a local Dockerfile build step by step: each step's
// "step n/m" line as it starts and ends; its output, on a terminal, folded
// into the one status line (its latest line only), and off a terminal
// printed line by line, indented under its step.
type buildSteps struct {
	a     *app
	mu    sync.Mutex
	ran   bool         // a step after FROM started: the Dockerfile is being run
	label func(string) // the build's status line, while there is one
	line  []byte       // the output since its last newline
}

func (d *buildSteps) event(image string, e emulator.BuildEvent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.Step > 1 {
		d.ran = true
	}
	a := d.a
	switch {
	case len(e.Output) > 0:
		d.line = append(d.line, e.Output...)
		for {
			i := bytes.IndexByte(d.line, '\n')
			if i < 0 {
				break
			}
			text := strings.TrimRight(string(d.line[:i]), "\r")
			d.line = d.line[i+1:]
			if a.StderrTTY {
				if d.label != nil {
					d.label(fmt.Sprintf("step %d/%d: %s", e.Step, e.Steps, fold(text)))
				}
			} else {
				a.Progress("  | %s", text)
			}
		}
	case e.Done:
		if len(d.line) > 0 && !a.StderrTTY {
			a.Progress("  | %s", d.line)
		}
		d.line = nil
		switch {
		case e.Cached:
			a.Progress("step %d/%d: cached", e.Step, e.Steps)
		case e.Made:
			a.Progress("step %d/%d: done", e.Step, e.Steps)
		}
	default:
		a.Progress("step %d/%d (Dockerfile line %d): %s", e.Step, e.Steps, e.Line, fold(e.Instruction))
	}
}

// setLabel points the folded output at the build's status line.
func (d *buildSteps) setLabel(f func(string)) {
	d.mu.Lock()
	d.label = f
	d.mu.Unlock()
}

// performed reports whether the Dockerfile was run, not merely read.
func (d *buildSteps) performed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ran
}

// fold keeps a status line to one short line.
func fold(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 100 {
		return string(r[:99]) + "…"
	}
	return s
}
