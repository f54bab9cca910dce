package render

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// HumanBytes renders a byte count in binary units, exact below 1 KiB.
func HumanBytes(n int64) string {
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

// HumanDuration renders a duration to a human's precision: whole seconds
// above a minute, milliseconds below.
func HumanDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// Warn always reaches stderr: --quiet silences progress, never a warning.
func (a *IO) Warn(format string, args ...any) {
	fmt.Fprintf(a.Stderr, "microvm: warning: "+format+"\n", args...)
}

// Spinner shows progress on stderr only when stderr is a terminal and
// progress is wanted; it returns the function that clears it. Colour is
// dropped under NO_COLOR (https://no-color.org).
func (a *IO) Spinner(label string) (stop func()) {
	if !a.StderrTTY || a.Quiet || a.JSON {
		return func() {}
	}
	frames := []string{"-", "\\", "|", "/"}
	color, reset := "\x1b[36m", "\x1b[0m"
	if a.Env("NO_COLOR") != "" {
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
			fmt.Fprintf(a.Stderr, "\r%s%s%s %s %s", color, frames[i%len(frames)], reset, label, HumanDuration(time.Since(start)))
			select {
			case <-done:
				fmt.Fprint(a.Stderr, "\r\x1b[K")
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
