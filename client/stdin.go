package client

import (
	"context"
	"io"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// stdinChunk is the data of one stdin request CopyStdin sends: never more
// than the daemon's max_stdin_write_bytes (a 413 beyond it), and 256 KiB, a
// quarter of its default, so one request's body is a few hundred KiB of
// base64 that a child reading at an ordinary pace takes well inside
// stdin_write_timeout_secs.
const stdinChunk = min(256<<10, protocol.DefaultMaxStdinWriteBytes)

// stdinEmptyReads is how many (0, nil) reads in a row CopyStdin tolerates
// from its reader before calling it broken rather than slow.
const stdinEmptyReads = 1000

// CopyStdin writes everything r yields to the exec's stdin, in requests of
// at most 256 KiB (under the daemon's max_stdin_write_bytes), and reports
// how many bytes the daemon put into the pipe. The exec must have been
// started with StartOptions.Stdin.
//
// With closeAtEOF the last chunk and the EOF travel in one request
// (WriteStdinAndClose), so a short input costs one round trip and no other
// writer can slip in between the data and the close; an empty r only
// closes. CopyStdin reads one chunk ahead to know which chunk is the last,
// so an input that is a whole number of chunks still closes with its last
// one rather than with an empty request after it. Each chunk is filled
// before it is sent (fewer requests; the feeding is a batch, not an
// interactive echo), so nothing is sent for a chunk until r has yielded it
// whole or ended. Without closeAtEOF stdin is left open.
//
// A failure reading r is an InvalidArg *Error (the caller's input, not the
// daemon); a failed write is the write's own error and, since stdin writes
// are never retried (a 408 may have written part of a chunk), written
// counts only what the daemon acknowledged. CopyStdin may run while the
// exec's output is being followed: it touches only the stdin route.
func (e *Exec) CopyStdin(ctx context.Context, r io.Reader, closeAtEOF bool) (written int64, err error) {
	cur, next := make([]byte, stdinChunk), make([]byte, stdinChunk)
	n, ended, err := readChunk(r, cur)
	if err != nil {
		return 0, err
	}
	for {
		if ended {
			var w int
			if closeAtEOF {
				w, err = e.WriteStdinAndClose(ctx, cur[:n])
			} else {
				w, err = e.WriteStdin(ctx, cur[:n])
			}
			return written + int64(w), err
		}
		m, nextEnded, err := readChunk(r, next)
		if err != nil {
			return written, err
		}
		if m == 0 && nextEnded {
			ended = true // cur is the last chunk
			continue
		}
		w, werr := e.WriteStdin(ctx, cur[:n])
		written += int64(w)
		if werr != nil {
			return written, werr
		}
		cur, next, n, ended = next, cur, m, nextEnded
	}
}

// readChunk fills buf from r, short only at r's end, which ended reports.
func readChunk(r io.Reader, buf []byte) (n int, ended bool, err error) {
	for empty := 0; n < len(buf); {
		m, err := r.Read(buf[n:])
		n += m
		switch {
		case err == io.EOF:
			return n, true, nil
		case err != nil:
			return n, false, Errorf(taxonomy.KindInvalidArg, "", "reading the stdin to copy: %v", err).WithCause(err)
		case m == 0:
			if empty++; empty > stdinEmptyReads { // a reader returning (0, nil) forever is broken
				return n, false, Errorf(taxonomy.KindInvalidArg, "", "reading the stdin to copy: no progress after %d empty reads", empty)
			}
		default:
			empty = 0
		}
	}
	return n, false, nil
}
