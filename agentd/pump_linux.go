package agentd

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// pumpBuffers holds read buffers only while a read is in progress, so an exec
// whose child is quiet costs no buffer at all. A pump reads into one only when
// the pipe reported nothing waiting (EOF, or bytes that raced the check):
// bytes it knows of go straight into the ring (outputLog.readPipe).
var pumpBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// pipeReadBytes is the most one read moves from a pipe into the ring: a
// quarter of a widened pipe, so a busy child is read in four reads per
// pipeful rather than sixteen, each a ring publish and a stream wakeup.
const pipeReadBytes = 256 << 10

// busyPipeBytes is the pipe size a child that fills its stdout or stderr pipe
// gets (Linux's default pipe-max-size).
const busyPipeBytes = 1 << 20

// pump reads one pipe into the log until EOF or the linger deadline.
func (r *registry) pump(wg *sync.WaitGroup, f *os.File, kind streamKind, e *execEntry) {
	defer wg.Done()
	log := e.log
	held := false // the linger deadline ended this pump with the pipe still held
	defer func() {
		e.sigMu.Lock()
		e.lingered = e.lingered || held
		e.sigMu.Unlock()
	}()
	rc, err := f.SyscallConn()
	if err != nil {
		r.log.Warn("exec pipe has no raw conn", "err", err.Error())
		return
	}
	grown := false
	for {
		var n int
		var rerr error
		var bp *[]byte
		cerr := rc.Read(func(fd uintptr) bool {
			bp = nil
			// TIOCINQ is FIONREAD: the bytes the pipe (or terminal) holds.
			if avail, ierr := unix.IoctlGetInt(int(fd), unix.TIOCINQ); ierr == nil && avail > 0 {
				// Straight into the ring: no copy through a buffer. The
				// pipe holds avail bytes and only this pump reads it, so
				// the read takes exactly what the ring made room for.
				n, rerr = log.readPipe(kind, int(fd), min(avail, pipeReadBytes))
			} else {
				bp = pumpBuffers.Get().(*[]byte)
				n, rerr = unix.Read(int(fd), *bp)
			}
			if n >= 64<<10 && !grown {
				// The child filled a default 64 KiB pipe: widen it, so a
				// busy child blocks (and switches) far less often. Only
				// busy pipes pay for the pages; a refusal
				// (pipe-user-pages limits) just keeps the default.
				grown = true
				_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, busyPipeBytes)
			}
			if rerr == unix.EAGAIN || rerr == unix.EINTR {
				if bp != nil {
					pumpBuffers.Put(bp)
					bp = nil
				}
				n = 0
				return false // park on the poller until readable
			}
			return true
		})
		if n > 0 && bp != nil {
			log.publish(kind, (*bp)[:n])
		}
		if bp != nil {
			pumpBuffers.Put(bp)
		}
		switch {
		case cerr != nil:
			if errors.Is(cerr, os.ErrDeadlineExceeded) {
				held = true
			}
			return
		case rerr != nil || n == 0:
			return // EOF: the last writer closed
		}
	}
}

// readPipe reads up to want bytes from fd (a non-blocking pipe holding at
// least that many, read by no one else) straight into the ring, with the
// same room-making, head and wakeup rules as publish. The read happens under
// l.mu, as publish's copy does: it moves only bytes already in the pipe, so
// it never waits. want is cut to the contiguous space at the ring's write
// position; the pump reads the rest next time round.
func (l *outputLog) readPipe(kind streamKind, fd int, want int) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	want = min(want, l.capacity)
	l.makeRoom(uint64(want))
	l.grow(l.total + uint64(want))
	i := int(l.total % uint64(l.capacity))
	want = min(want, len(l.ring)-i)
	n, err := unix.Read(fd, l.ring[i:i+want])
	if n <= 0 {
		return 0, err
	}
	l.keepHead(kind, l.ring[i:i+n])
	l.advance(kind, uint64(n))
	l.wakeReaders()
	return n, err
}
