// Package sparse writes a file sequentially with runs of zero blocks left
// as holes, so a download of a sparse guest file (or a tar's sparse
// member, which the tar reader expands to zeros) takes on this machine's
// disk only the bytes that are not zero. It never reads the file and never
// decides what is written: the caller bounds that.
package sparse

import (
	"errors"
	"io"
	"os"
)

// Block is the unit checked for zeros: a whole zero block becomes a hole,
// anything else is written.
const Block = 4096

// ErrDiskLimit is returned by Write when the bytes actually written would
// pass Writer.DiskLimit.
var ErrDiskLimit = errors.New("the bytes written would pass the disk limit")

// Writer writes to F from its current offset on, seeking over whole zero
// blocks instead of writing them. Finish sets the length, so a file that
// ends in a hole has its full size.
type Writer struct {
	F *os.File
	// DiskLimit bounds the bytes actually written (what takes disk space);
	// negative means none.
	DiskLimit int64
	off       int64 // logical bytes taken, written or skipped
	disk      int64 // bytes actually written
}

// New is a Writer to f with no disk limit.
func New(f *os.File) *Writer { return &Writer{F: f, DiskLimit: -1} }

// Written is the logical length so far; OnDisk the bytes actually written.
func (w *Writer) Written() int64 { return w.off }

// OnDisk is the bytes actually written so far.
func (w *Writer) OnDisk() int64 { return w.disk }

func (w *Writer) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		end := min(done+Block, len(p))
		if allZero(p[done:end]) {
			if _, err := w.F.Seek(int64(end-done), io.SeekCurrent); err != nil {
				return done, err
			}
			w.off += int64(end - done)
			done = end
			continue
		}
		// The run of non-zero blocks, written in one call.
		for end < len(p) {
			next := min(end+Block, len(p))
			if allZero(p[end:next]) {
				break
			}
			end = next
		}
		if w.DiskLimit >= 0 && w.disk+int64(end-done) > w.DiskLimit {
			return done, ErrDiskLimit
		}
		n, err := w.F.Write(p[done:end])
		w.off += int64(n)
		w.disk += int64(n)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// Finish gives the file its logical length: a trailing hole has no bytes
// written to make it.
func (w *Writer) Finish() error {
	start, err := w.F.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	return w.F.Truncate(start)
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
