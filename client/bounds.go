package client

// Bounds on what this client reads of answers whose bytes the guest
// controls. agentd is inside the guest, and a guest can take its port over:
// nothing it sends may make this process (in --local, MCP and engine mode,
// the emulator every other guest runs under) hold more than a fixed amount.
// Each bound is a constant of api/errors.yaml; past one, the read stops
// with a TooLarge error that names it, and ErrOverBound is in its chain.

import (
	"errors"
	"fmt"
	"io"

	"github.com/microvms/microvms/gen/taxonomy"
)

// ErrOverBound is in the chain of every error a read returns because an
// answer went past one of this client's bounds. The error's wire kind is
// TooLarge and its message names the bound (its key in `microvm
// constants`).
var ErrOverBound = errors.New("over a client read bound")

// BoundError says which bound an answer went past.
type BoundError struct {
	Key   string // the bound's key in `microvm constants`, e.g. MAX_SSE_LINE_BYTES
	Limit int64  // its value, in bytes (or entries, for a count)
	What  string // what went past it: "an SSE line", "the answer", ...
}

func (e *BoundError) Error() string {
	return fmt.Sprintf("%s is over %s (%d)", e.What, e.Key, e.Limit)
}

func (e *BoundError) Unwrap() error { return ErrOverBound }

// overBound is the error for op's answer going past a bound; hint says what
// to do instead (empty: the bound is one only a broken or hostile daemon
// reaches, and the message says so).
func overBound(op string, b *BoundError, hint string) *Error {
	msg := fmt.Sprintf("%s: %v", op, b)
	if hint == "" {
		// A bound no conforming daemon comes near.
		hint = "the daemon (or whatever answers on its port) sent more than this client reads"
	}
	msg += "; " + hint
	return WireError(taxonomy.WireTooLarge, msg).WithCause(b)
}

// OverBound is the TooLarge *Error for op's answer going past the bound
// named key (limit bytes, or entries), with ErrOverBound and a *BoundError
// in its chain: the one error every bounded reader of this module returns,
// the library's packages above this one included.
func OverBound(op, key string, limit int64, what, hint string) *Error {
	return overBound(op, &BoundError{Key: key, Limit: limit, What: what}, hint)
}

// boundedReader reads at most limit bytes of r; one more is a *BoundError
// rather than an early EOF, so a decoder fails on the bound instead of
// calling the answer truncated JSON.
type boundedReader struct {
	r     io.Reader
	left  int64
	bound *BoundError
}

func newBoundedReader(r io.Reader, b *BoundError) *boundedReader {
	return &boundedReader{r: r, left: b.Limit, bound: b}
}

func (br *boundedReader) Read(p []byte) (int, error) {
	if br.left <= 0 {
		// Probe one byte: an answer of exactly limit bytes is within the
		// bound, and only a byte past it is refused.
		var one [1]byte
		n, err := br.r.Read(one[:])
		if n > 0 {
			return 0, br.bound
		}
		return 0, err
	}
	if int64(len(p)) > br.left {
		p = p[:br.left]
	}
	n, err := br.r.Read(p)
	br.left -= int64(n)
	return n, err
}

// BoundedWriter passes writes to W until Limit bytes have gone through; a
// write past that is refused whole, with a TooLarge *Error naming Key, and
// W has then received exactly Limit bytes at most. Op names the operation in
// the error and Hint says how to raise or avoid the bound.
type BoundedWriter struct {
	W     io.Writer
	Limit int64
	Key   string
	Op    string
	What  string
	Hint  string
	n     int64
}

// Written is how many bytes went through to W.
func (bw *BoundedWriter) Written() int64 { return bw.n }

func (bw *BoundedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > bw.Limit-bw.n {
		return 0, overBound(bw.Op, &BoundError{Key: bw.Key, Limit: bw.Limit, What: bw.What}, bw.Hint)
	}
	n, err := bw.W.Write(p)
	bw.n += int64(n)
	return n, err
}
