package main

import "io"

// cp's progress is the lifecycle commands' transfer bar (progress.go): a
// byte bar on a terminal's stderr, one line per transfer off a terminal,
// nothing under --quiet or --json. These count the bytes through it; a
// download's size is not known ahead, so its total is -1 (a spinner with
// the byte count).

// barOn reports whether transfer draws a bar rather than lines.
func (a *app) barOn() bool { return a.stderrTTY && !a.g.Quiet && !a.g.JSON }

// transferBar is transfer without a line under --json, whose stderr an
// agent may be reading too; done(false) leaves no "done" line.
func (a *app) transferBar(label string) (sent func(n, total int64), done func(ok bool)) {
	if a.g.JSON {
		return func(int64, int64) {}, func(bool) {}
	}
	s, d := a.transfer(label)
	return s, func(ok bool) {
		if ok {
			d()
		}
	}
}

type countingReader struct {
	r     io.Reader
	n     int64
	total int64
	sent  func(n, total int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.sent(c.n, c.total)
	return n, err
}

type countingWriter struct {
	w     io.Writer
	n     int64
	total int64
	sent  func(n, total int64)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.sent(c.n, c.total)
	return n, err
}
