// Package linerange selects a 1-based inclusive window of lines from a byte
// stream without buffering the stream, for GET /v1/fs/file?start_line=&end_line=.
//
// The semantics are the AI SDK harness's readTextFile contract, which the route
// exists to serve: both bounds are 1-based and inclusive, an end past EOF reads
// through EOF, a start past EOF is an empty window, and a line owns its
// terminating newline so adjacent windows concatenate back into the file.
// This package must not read past the point where the window closes: lines
// 1..5 of a huge file have to cost one chunk, not the file.
package linerange

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Range is a validated window. End 0 means open-ended (through EOF), which is
// unambiguous because a valid End is never below Start and Start is at least 1.
type Range struct {
	Start uint64
	End   uint64
}

// ErrNotInteger is returned when a bound is present but is not a base-10
// unsigned integer; callers answer 400 with a body distinct from missing path.
var ErrNotInteger = errors.New("start_line and end_line must be integers")

// Parse validates the raw query values. present reports whether any bound was
// given: with none the caller must stream the file untouched, which is not the
// same code path as a window that happens to cover the whole file.
func Parse(start, end string, hasStart, hasEnd bool) (r Range, present bool, err error) {
	if !hasStart && !hasEnd {
		return Range{}, false, nil
	}
	var s, e *uint64
	if hasStart {
		v, err := parseBound(start)
		if err != nil {
			return Range{}, true, err
		}
		s = &v
	}
	if hasEnd {
		v, err := parseBound(end)
		if err != nil {
			return Range{}, true, err
		}
		e = &v
	}
	r, err = FromBounds(s, e)
	return r, true, err
}

// parseBound accepts only plain decimal digits: strconv.ParseUint alone would
// also be fine, but a leading '+' or whitespace is refused so that what the
// client sent is exactly what was understood.
func parseBound(raw string) (uint64, error) {
	if raw == "" {
		return 0, ErrNotInteger
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return 0, ErrNotInteger
		}
	}
	v, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return 0, ErrNotInteger
	}
	return v, nil
}

// FromBounds validates already-decoded bounds (for example the generated
// parameter struct). A nil start means 1 and a nil end means through EOF.
func FromBounds(start, end *uint64) (Range, error) {
	r := Range{Start: 1}
	if start != nil {
		r.Start = *start
	}
	if r.Start == 0 {
		return Range{}, errors.New("start_line is 1-based, so 0 is not a line; the first line is start_line=1")
	}
	if end != nil {
		if *end < r.Start {
			return Range{}, fmt.Errorf("end_line %d is before start_line %d; both bounds are inclusive, and an end_line past the last line is allowed", *end, r.Start)
		}
		r.End = *end
	}
	return r, nil
}

// Window tracks which line the next byte belongs to across chunk boundaries.
type Window struct {
	r    Range
	line uint64
	done bool
}

// NewWindow starts at line 1.
func NewWindow(r Range) *Window { return &Window{r: r, line: 1} }

// Done reports that the window has closed, so the caller must stop reading.
func (w *Window) Done() bool { return w.done }

// Take returns the part of chunk inside the window. The selected bytes of one
// chunk are always contiguous, so this is a subslice of chunk, never a copy.
func (w *Window) Take(chunk []byte) []byte {
	from, to := -1, 0
	pos := 0
	for pos < len(chunk) && !w.done {
		inside := w.line >= w.r.Start && (w.r.End == 0 || w.line <= w.r.End)
		nl := bytes.IndexByte(chunk[pos:], '\n')
		segEnd := len(chunk)
		if nl >= 0 {
			segEnd = pos + nl + 1
		}
		if inside {
			if from < 0 {
				from = pos
			}
			to = segEnd
		}
		pos = segEnd
		if nl >= 0 {
			w.line++
			if w.r.End != 0 && w.line > w.r.End {
				w.done = true
			}
		}
	}
	if from < 0 {
		return nil
	}
	return chunk[from:to]
}

// ChunkSize is how much is read per step. It bounds what a closed window costs
// beyond the bytes it returns.
const ChunkSize = 64 << 10

// Copy writes the window of src to dst and stops reading src as soon as the
// window closes. It returns the bytes written.
func Copy(dst io.Writer, src io.Reader, r Range) (int64, error) {
	return CopyContext(context.Background(), dst, src, r)
}

// CopyContext is Copy that also stops, with ctx's error, once ctx is done. A
// window that opens late in an endless source (start_line=2 of /dev/zero)
// reads without ever writing, so a failed write cannot be what stops it.
func CopyContext(ctx context.Context, dst io.Writer, src io.Reader, r Range) (int64, error) {
	buf := make([]byte, ChunkSize)
	w := NewWindow(r)
	var n int64
	for !w.Done() {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, rerr := src.Read(buf)
		if k > 0 {
			if sel := w.Take(buf[:k]); len(sel) > 0 {
				m, werr := dst.Write(sel)
				n += int64(m)
				if werr != nil {
					return n, werr
				}
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
	return n, nil
}
