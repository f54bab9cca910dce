package agentd

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// diskProbeInterval is how many bytes a guarded write may land between two
// statvfs calls. One pre-flight check cannot hold the line on its own: a
// single accepted body (max_body_bytes defaults to 512 MiB) can be twice the
// default reserve.
const diskProbeInterval = 8 << 20

// diskReading is one statvfs measurement against the configured reserve.
type diskReading struct {
	Available uint64
	Reserve   uint64
}

// underPressure is the comparison both health and the write path use, so a
// client reading health sees exactly what a write would be judged by.
func (r diskReading) underPressure() bool { return r.Reserve > 0 && r.Available < r.Reserve }

// availableBytes measures the filesystem a path is on, or would be on once
// created, from the nearest existing ancestor. f_bavail is what an
// unprivileged writer can use; f_bfree would count root's reserved blocks.
func availableBytes(path string) (uint64, error) {
	p := filepath.Clean(path)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			return st.Bavail * uint64(st.Frsize), nil
		}
		if err != unix.ENOENT && err != unix.ENOTDIR {
			return 0, err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return 0, err
		}
		p = parent
	}
}

// PressureError is a write refused because it would take the target
// filesystem below the reserve. It becomes 507, never 500: a 500 reads as a
// daemon defect that clients retry, which is harmful on a full disk.
type PressureError struct {
	Path     string
	Reading  diskReading
	Incoming int64 // bytes the refused write declared, 0 when unknown
}

func (e *PressureError) Error() string {
	if e.Incoming > 0 {
		return fmt.Sprintf("refusing to write %s: %d bytes available on the target filesystem, and writing %d more would go below the %d byte reserve",
			e.Path, e.Reading.Available, e.Incoming, e.Reading.Reserve)
	}
	return fmt.Sprintf("refusing to write %s: %d bytes available on the target filesystem, below the %d byte reserve",
		e.Path, e.Reading.Available, e.Reading.Reserve)
}

// diskGuard judges writes against the reserve. probe is injectable so tests
// can play a full disk without filling one.
type diskGuard struct {
	probe   func(string) (uint64, error)
	reserve uint64
	warn    func(msg string, args ...any)
}

func (g diskGuard) read(path string) (diskReading, error) {
	avail, err := g.probe(path)
	return diskReading{Available: avail, Reserve: g.reserve}, err
}

// preflight refuses a write before anything lands when the filesystem is
// already under the reserve, or when a declared length would take it there.
// An unmeasurable filesystem is allowed: refusing every write because
// statvfs failed would turn a monitoring gap into an outage.
func (g diskGuard) preflight(path string, incoming int64) *PressureError {
	if g.reserve == 0 {
		return nil
	}
	r, err := g.read(path)
	if err != nil {
		if g.warn != nil {
			g.warn("cannot measure free space; allowing the write", "path", path, "err", err)
		}
		return nil
	}
	if incoming < 0 {
		incoming = 0
	}
	if r.underPressure() || r.Available-r.Reserve < uint64(incoming) {
		return &PressureError{Path: path, Reading: r, Incoming: incoming}
	}
	return nil
}

// diskPacer re-runs the guard every diskProbeInterval bytes of a streaming write.
type diskPacer struct {
	guard diskGuard
	path  string // where the bytes land, i.e. which filesystem to measure
	name  string // what the refusal names to the caller
	since int64
}

func (p *diskPacer) add(n int64) error {
	p.since += n
	if p.since < diskProbeInterval {
		return nil
	}
	p.since = 0
	if perr := p.guard.preflight(p.path, 0); perr != nil {
		perr.Path = p.name
		return perr
	}
	return nil
}

// diskPacedWriter is a guarded copy destination: it writes, then lets the pacer
// veto the next chunk.
type diskPacedWriter struct {
	f *os.File
	p *diskPacer
}

func (w diskPacedWriter) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	if err != nil {
		return n, &diskWriteError{err}
	}
	if perr := w.p.add(int64(n)); perr != nil {
		return n, perr
	}
	return n, nil
}

// diskWriteError marks a failure on the disk side of a copy, as opposed to the
// network side, so the two map to 500 and 400 respectively.
type diskWriteError struct{ err error }

func (e *diskWriteError) Error() string { return e.err.Error() }
func (e *diskWriteError) Unwrap() error { return e.err }
