package render

import (
	"bytes"
	"strings"
	"testing"
)

// ttyApp is an IO whose stderr counts as a terminal, so transfer draws
// schollz/progressbar's byte bar into b; NO_COLOR is noColor.
func ttyApp(b *bytes.Buffer, noColor string) *IO {
	return &IO{Stderr: b, StderrTTY: true, Env: func(k string) string {
		if k == "NO_COLOR" {
			return noColor
		}
		return ""
	}}
}

// Off a terminal a waiter's repeated state is one line, not one per poll.
// Catches, in waiting's update, `s != last` made `==` (the same state
// printed on every poll and a new one never).
func TestWaitingOffATerminalPrintsEachStateOnce(t *testing.T) {
	var b bytes.Buffer
	a := &IO{Stderr: &b, Env: func(string) string { return "" }}
	update, stop := a.Waiting("waiting for boot")
	for _, s := range []string{"waiting for boot", "booting", "booting", "booting", "ready"} {
		update(s)
	}
	stop()
	want := "microvm: waiting for boot\nmicrovm: booting\nmicrovm: ready\n"
	if b.String() != want {
		t.Fatalf("stderr = %q, want %q", b.String(), want)
	}
}

// The byte bar is cleared when the transfer ends, so the "done" line
// starts a clean line; a transfer that moved no bytes never drew a bar and
// ends with just the line. Catches, in transfer's done, `bar != nil` made
// `==` (the bar left on screen with the line glued to it, and a nil
// bar's Finish called when no bytes moved).
func TestTransferClearsItsBarBeforeTheDoneLine(t *testing.T) {
	var b bytes.Buffer
	a := ttyApp(&b, "")
	sent, done := a.Transfer("upload x")
	sent(5, 10)
	done()
	if out := b.String(); !strings.Contains(out, "upload x  50%") || !strings.HasSuffix(out, "\rmicrovm: upload x: done\n") {
		t.Fatalf("stderr = %q, want the bar, cleared, then the done line", out)
	}

	b.Reset()
	_, done = ttyApp(&b, "").Transfer("upload empty")
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("done after no bytes moved panicked: %v", r)
			}
		}()
		done()
	}()
	if b.String() != "microvm: upload empty: done\n" {
		t.Fatalf("stderr = %q, want only the done line", b.String())
	}
}

// A bar's label is shown as written, never read as colorstring's colour
// tags: it holds a user's path or id, and "upload /tmp/[red]x" must not
// turn the rest of the line red, with or without NO_COLOR (the bars draw
// no colour of their own). Catches OptionEnableColorCodes turned on for the
// byte bar or the spinner.
func TestBarLabelsAreVerbatim(t *testing.T) {
	for _, noColor := range []string{"", "1"} {
		var b bytes.Buffer
		a := ttyApp(&b, noColor)
		sent, done := a.Transfer("upload /tmp/[red]x")
		sent(5, 10)
		done()
		_, stop := a.Waiting("waiting for [blue]vm")
		stop()
		out := b.String()
		if strings.Contains(out, "\x1b[3") || !strings.Contains(out, "[red]x  50%") || !strings.Contains(out, "[blue]vm") {
			t.Fatalf("NO_COLOR=%q: stderr = %q, want the labels verbatim and no colour codes", noColor, out)
		}
	}
}

// A fast transfer's callbacks arrive far quicker than a terminal should be
// redrawn: the bar draws a frame at most every 50ms (plus its first and
// last), not one per callback. Catches, in transfer, the throttle's
// `50*time.Millisecond` made `/` (zero: every callback that moves the
// percentage redraws). Each of the 99 callbacks below moves it; they would
// have to take over 2s for the original to draw 50 frames.
func TestTransferBarIsThrottled(t *testing.T) {
	var b bytes.Buffer
	sent, done := ttyApp(&b, "").Transfer("upload x")
	for i := int64(1); i < 100; i++ {
		sent(i, 100)
	}
	done()
	if frames := strings.Count(b.String(), "upload x "); frames >= 50 {
		t.Fatalf("99 callbacks drew %d frames, want them throttled", frames)
	}
}
