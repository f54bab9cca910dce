package render

import "io"

// cp's progress is the lifecycle commands' transfer bar (progress.go): a
// byte bar on a terminal's stderr, one line per transfer off a terminal,
// nothing under --quiet or --json. These count the bytes through it; a
// download's size is not known ahead, so its total is -1 (a spinner with
// the byte count).

// BarOn reports whether transfer draws a bar rather than lines.
func (a *IO) BarOn() bool { return a.StderrTTY && !a.Quiet && !a.JSON }

// TransferBar is transfer without a line under --json, whose stderr an
// agent may be reading too; done(false) leaves no "done" line.
func (a *IO) TransferBar(label string) (sent func(n, total int64), done func(ok bool)) {
	if a.JSON {
		return func(int64, int64) {}, func(bool) {}
	}
	s, d := a.Transfer(label)
	return s, func(ok bool) {
		if ok {
			d()
		}
	}
}

type CountingReader struct {
	R     io.Reader
	N     int64
	Total int64
	Sent  func(n, total int64)
}

func (c *CountingReader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	c.Sent(c.N, c.Total)
	return n, err
}

type CountingWriter struct {
	W     io.Writer
	N     int64
	Total int64
	Sent  func(n, total int64)
}

func (c *CountingWriter) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	c.Sent(c.N, c.Total)
	return n, err
}
