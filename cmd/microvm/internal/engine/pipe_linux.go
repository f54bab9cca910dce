package engine

import (
	"os"

	"golang.org/x/sys/unix"
)

// sinkPipeBytes is a FIFO sink's buffer: 1 MiB holds a whole frame, so the
// engine writes one before its reader must wake, and a reader's one large
// read takes up to 1 MiB instead of the default 64 KiB (Node cannot set it
// on its end; Python sets it too).
const sinkPipeBytes = 1 << 20

// widenPipe gives the FIFO f sinkPipeBytes of buffer; past the system's
// pipe-max-size it keeps the default, which works, only slower. Through
// SyscallConn, as f.Fd() would make the descriptor blocking.
func widenPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, sinkPipeBytes) })
	}
}
