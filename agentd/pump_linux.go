package agentd

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// pumpBuffers holds read buffers only while a read is in progress, so an exec
// whose child is quiet costs no buffer at all.
var pumpBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

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
			bp = pumpBuffers.Get().(*[]byte)
			n, rerr = unix.Read(int(fd), *bp)
			if n == len(*bp) && !grown {
				// A full read means the child outruns the default 64 KiB
				// pipe: widen it, so a busy child blocks (and switches)
				// far less often. Only busy pipes pay for the pages; a
				// refusal (pipe-user-pages limits) just keeps the default.
				grown = true
				_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, busyPipeBytes)
			}
			if rerr == unix.EAGAIN {
				pumpBuffers.Put(bp)
				bp = nil
				return false // park on the poller until readable
			}
			if rerr == unix.EINTR {
				pumpBuffers.Put(bp)
				bp = nil
				return false
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
