package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/charmbracelet/lipgloss"
)

// A transfer's progress is drawn on stderr, and only when stderr is a
// terminal and neither --quiet nor --json asked for silence: a pipe or a
// log gets nothing. The bar is a few lines over a byte counter, so no
// progress library is pulled in; lipgloss (already the table renderer)
// colours it, and NO_COLOR drops the colour.

// counter counts the bytes that pass through it.
type counter struct{ n atomic.Int64 }

type countingReader struct {
	r io.Reader
	c *counter
}

func (cr countingReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	cr.c.n.Add(int64(n))
	return n, err
}

type countingWriter struct {
	w io.Writer
	c *counter
}

func (cw countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.c.n.Add(int64(n))
	return n, err
}

// progressOn reports whether progress may be drawn.
func (a *app) progressOn() bool {
	return a.stderrTTY && !a.g.Quiet && !a.g.JSON
}

// progress wraps *r so its bytes are counted and draws a bar of total
// bytes until stop; stop(true) leaves the finished line, stop(false) clears it.
func (a *app) progress(label string, total int64, r *io.Reader) (stop func(ok bool)) {
	if !a.progressOn() {
		return func(bool) {}
	}
	c := &counter{}
	*r = countingReader{r: *r, c: c}
	return a.drawProgress(label, total, c)
}

// progressWriter is progress for a download, whose size is not known ahead.
func (a *app) progressWriter(label string, w *io.Writer) (stop func(ok bool)) {
	if !a.progressOn() {
		return func(bool) {}
	}
	c := &counter{}
	*w = countingWriter{w: *w, c: c}
	return a.drawProgress(label, -1, c)
}

func (a *app) drawProgress(label string, total int64, c *counter) func(bool) {
	done := make(chan bool)
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	r := a.renderer(a.stderr)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case ok := <-done:
				if ok {
					fmt.Fprintf(a.stderr, "\r\x1b[K%s\n", progressLine(label, c.n.Load(), total, time.Since(start), r))
				} else {
					fmt.Fprint(a.stderr, "\r\x1b[K")
				}
				return
			case <-t.C:
				fmt.Fprintf(a.stderr, "\r\x1b[K%s", progressLine(label, c.n.Load(), total, time.Since(start), r))
			}
		}
	}()
	var once sync.Once
	return func(ok bool) { once.Do(func() { done <- ok; wg.Wait() }) }
}

// barWidth is the bar's width in cells.
const barWidth = 30

// progressLine is one frame: the label, a bar when the total is known, the
// bytes so far and the rate.
func progressLine(label string, n, total int64, elapsed time.Duration, r *lipgloss.Renderer) string {
	rate := ""
	if s := elapsed.Seconds(); s > 0 {
		rate = "  " + humanBytes(int64(float64(n)/s)) + "/s"
	}
	if total <= 0 {
		return fmt.Sprintf("%s  %s%s", label, humanBytes(n), rate)
	}
	frac := float64(n) / float64(total)
	frac = min(max(frac, 0), 1)
	filled := int(frac * barWidth)
	bar := strings.Repeat("█", filled)
	rest := strings.Repeat("░", barWidth-filled)
	if r != nil {
		bar = r.NewStyle().Foreground(lipgloss.Color("6")).Render(bar)
		rest = r.NewStyle().Faint(true).Render(rest)
	}
	return fmt.Sprintf("%s  %s%s %3.0f%%  %s / %s%s", label, bar, rest, frac*100, humanBytes(n), humanBytes(total), rate)
}
