package render

import (
	"fmt"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Progress of the lifecycle commands goes to stderr, never stdout, and is
// silenced by --quiet. On a terminal it is schollz/progressbar's spinner
// while a wait is in flight and its byte bar while an artifact uploads; off
// a terminal it is one plain line per step, which a log file can hold.

// Progress writes one step line.
func (a *IO) Progress(format string, args ...any) {
	if a.Quiet {
		return
	}
	a.progressMu.Lock()
	defer a.progressMu.Unlock()
	if a.bar != nil {
		_ = a.bar.Clear()
	}
	fmt.Fprintf(a.Stderr, "microvm: "+format+"\n", args...)
}

// Waiting shows a spinner labelled label until the returned stop is called;
// update relabels it (a waiter's latest state). Off a terminal the label is
// one line and updates print only when the text changes.
func (a *IO) Waiting(label string) (update func(string), stop func()) {
	if a.Quiet {
		return func(string) {}, func() {}
	}
	if !a.StderrTTY {
		a.Progress("%s", label)
		last := label
		return func(s string) {
			if s != last {
				last = s
				a.Progress("%s", s)
			}
		}, func() {}
	}
	bar := progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(a.Stderr),
		progressbar.OptionSetDescription(label),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetSpinnerChangeInterval(100*time.Millisecond),
	)
	_ = bar.RenderBlank()
	a.progressMu.Lock()
	a.bar = bar
	a.progressMu.Unlock()
	var once sync.Once
	return func(s string) { bar.Describe(s) }, func() {
		once.Do(func() {
			a.progressMu.Lock()
			a.bar = nil
			a.progressMu.Unlock()
			_ = bar.Finish()
			_ = bar.Clear()
		})
	}
}

// Transfer shows a byte bar for total bytes and returns the callback that
// advances it; off a terminal it writes a line at the start and the end.
func (a *IO) Transfer(label string) (sent func(n, total int64), done func()) {
	if a.Quiet {
		return func(int64, int64) {}, func() {}
	}
	if !a.StderrTTY {
		var total int64
		// A download's total is unknown (-1) until it ends: report the
		// bytes moved, never "-1 B".
		return func(n, t int64) { total = max(t, n) }, func() { a.Progress("%s: %s", label, HumanBytes(total)) }
	}
	var bar *progressbar.ProgressBar
	return func(n, total int64) {
			if bar == nil {
				bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(a.Stderr), progressbar.OptionSetDescription(label),
					progressbar.OptionShowBytes(true), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(50*time.Millisecond))
			}
			_ = bar.Set64(n)
		}, func() {
			if bar != nil {
				_ = bar.Finish()
			}
			a.Progress("%s: done", label)
		}
}
