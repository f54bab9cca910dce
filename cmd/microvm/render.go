package main

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// humanBytes renders a byte count in binary units, exact below 1 KiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// humanDuration renders a duration to a human's precision: whole seconds
// above a minute, milliseconds below.
func humanDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// warn always reaches stderr: --quiet silences progress, never a warning.
func (a *app) warn(format string, args ...any) {
	fmt.Fprintf(a.stderr, "microvm: warning: "+format+"\n", args...)
}

// spinner shows progress on stderr only when stderr is a terminal and
// progress is wanted; it returns the function that clears it. Colour is
// dropped under NO_COLOR (https://no-color.org).
func (a *app) spinner(label string) (stop func()) {
	if !a.stderrTTY || a.g.Quiet || a.g.JSON {
		return func() {}
	}
	frames := []string{"-", "\\", "|", "/"}
	color, reset := "\x1b[36m", "\x1b[0m"
	if a.env("NO_COLOR") != "" {
		color, reset = "", ""
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(a.stderr, "\r%s%s%s %s %s", color, frames[i%len(frames)], reset, label, humanDuration(time.Since(start)))
			select {
			case <-done:
				fmt.Fprint(a.stderr, "\r\x1b[K")
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
