package linerange

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// endless yields newline-terminated lines forever and counts what was read.
type endless struct{ read int }

func (e *endless) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = 'x'
		if i%10 == 9 {
			b[i] = '\n'
		}
	}
	e.read += len(b)
	return len(b), nil
}

// Lines 1..5 of an unbounded stream cost one chunk. Catches: filtering to
// EOF instead of stopping (this test would never return, so it is bounded by
// the reader erroring past 1 MiB).
func TestCopyStopsOnceTheWindowCloses(t *testing.T) {
	src := &capped{r: &endless{}, left: 1 << 20}
	var out bytes.Buffer
	if _, err := Copy(&out, src, Range{Start: 1, End: 5}); err != nil {
		t.Fatal(err)
	}
	if out.String() != strings.Repeat("xxxxxxxxx\n", 5) {
		t.Fatalf("%q", out.String())
	}
	if src.used > ChunkSize {
		t.Fatalf("read %d bytes for five lines", src.used)
	}
}

type capped struct {
	r    io.Reader
	left int
	used int
}

func (c *capped) Read(b []byte) (int, error) {
	if c.left <= 0 {
		return 0, errors.New("read past the window")
	}
	if len(b) > c.left {
		b = b[:c.left]
	}
	n, err := c.r.Read(b)
	c.left -= n
	c.used += n
	return n, err
}

// oneByte forces every chunk boundary to fall inside a line.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(b []byte) (int, error) { return o.r.Read(b[:1]) }

// The line counter survives chunk boundaries. Catches: resetting per chunk.
func TestWindowAcrossChunkBoundaries(t *testing.T) {
	var out bytes.Buffer
	Copy(&out, oneByte{strings.NewReader("a\nbb\nccc\ndddd")}, Range{Start: 2, End: 3})
	if out.String() != "bb\nccc\n" {
		t.Fatalf("%q", out.String())
	}
}

// reference selects lines the obvious, buffering way.
func reference(data string, r Range) string {
	lines := strings.SplitAfter(data, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var b strings.Builder
	for i, l := range lines {
		n := uint64(i + 1)
		if n >= r.Start && (r.End == 0 || n <= r.End) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// FuzzParse: any pair of raw bounds either is refused or yields a window
// that agrees with the buffering reference on arbitrary data, whatever the
// chunking. Never panics.
func FuzzParse(f *testing.F) {
	f.Add("1", "5", true, true, "a\nb\nc\n", uint8(3))
	f.Add("0", "", true, false, "x", uint8(1))
	f.Add("3", "2", true, true, "", uint8(7))
	f.Add("", "99999999999999999999", false, true, "\n\n", uint8(2))
	f.Add("+1", " 2", true, true, "a", uint8(1))
	f.Fuzz(func(t *testing.T, start, end string, hasStart, hasEnd bool, data string, chunk uint8) {
		r, present, err := Parse(start, end, hasStart, hasEnd)
		if !hasStart && !hasEnd {
			if present || err != nil {
				t.Fatal("no bounds must mean no range")
			}
			return
		}
		if err != nil {
			return
		}
		if r.Start == 0 || (r.End != 0 && r.End < r.Start) {
			t.Fatalf("accepted invalid range %+v from %q %q", r, start, end)
		}
		var out bytes.Buffer
		src := &sized{r: strings.NewReader(data), n: int(chunk%16) + 1}
		if _, err := Copy(&out, src, r); err != nil {
			t.Fatal(err)
		}
		if want := reference(data, r); out.String() != want {
			t.Fatalf("range %+v of %q: got %q want %q", r, data, out.String(), want)
		}
	})
}

type sized struct {
	r io.Reader
	n int
}

func (s *sized) Read(b []byte) (int, error) {
	if len(b) > s.n {
		b = b[:s.n]
	}
	return s.r.Read(b)
}
