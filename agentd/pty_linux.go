package agentd

import (
	"fmt"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// An exec started with tty runs on a pseudo-terminal. The child
// gets the terminal's slave side as stdin, stdout and stderr, in a session
// of its own whose controlling terminal it is, so job control, line
// discipline and SIGWINCH behave as in a shell. The daemon keeps the master
// side twice: one descriptor the output pump reads (everything arrives as
// stdout, in the exec's one offset space, so the stream resumes as any
// other), and one in the exec's stdin slot, which the stdin route writes to
// and the resize route sizes. github.com/creack/pty opens the pair (posix
// openpt, grantpt, unlockpt and the slave's name across libc variants) and
// sets the size: small, but exactly the code that differs per platform.

// spawnTTY is spawn's pseudo-terminal path.
func (r *registry) spawnTTY(id string, sp *spec, path string) (_ *execEntry, err error) {
	// The guest's PTY pool is shared with every process; a caller may hold at
	// most limits.max_ptys of it, until each exec finishes.
	select {
	case r.ptySlots <- struct{}{}:
	default:
		return nil, &capacityError{fmt.Sprintf("%d terminals are held by running execs (limits.max_ptys); retry when one exits", cap(r.ptySlots))}
	}
	defer func() {
		if err != nil {
			<-r.ptySlots
		}
	}()
	master, slave, err := pty.Open()
	if err != nil {
		return nil, err
	}
	defer slave.Close()
	if err := pty.Setsize(master, &pty.Winsize{Rows: sp.tty.Rows, Cols: sp.tty.Cols}); err != nil {
		master.Close()
		return nil, err
	}
	// A second master descriptor for input and resize, closed independently
	// of the one the pump reads (eof closes it; the pump's ends with output).
	inFd, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, err
	}
	// The stderr pump gets a pipe that is already at EOF: a terminal has one
	// output stream.
	errR, errW, err := childPipe(true)
	if err != nil {
		master.Close()
		unix.Close(inFd)
		return nil, err
	}
	unix.Close(errW)
	cg, err := r.cgroups.prepare(sp.limits)
	if err != nil {
		master.Close()
		unix.Close(inFd)
		errR.Close()
		return nil, err
	}
	pidfd := -1
	// Setsid makes the child a session and process group leader, so its
	// pid is the group id kill and signal address, as on the pipe path.
	attr := &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: sp.cred, PidFD: &pidfd}
	cg.attach(attr)
	var pid int
	err = cg.forkIntoV1(func() (err error) {
		pid, err = syscall.ForkExec(path, sp.argv, &syscall.ProcAttr{
			Dir:   sp.dir,
			Env:   sp.env,
			Files: []uintptr{slave.Fd(), slave.Fd(), slave.Fd()},
			Sys:   attr,
		})
		return err
	})
	cg.closeFd()
	if err != nil {
		r.cgroups.release(cg)
		master.Close()
		unix.Close(inFd)
		errR.Close()
		return nil, spawnOrLimitsError(sp, err)
	}
	// Both master descriptors go on the runtime poller: the pump parks there,
	// and stdin writes honour their deadline.
	out, oerr := pollable(int(master.Fd()), "pty")
	master.Close()
	in, ierr := pollable(inFd, "pty-input")
	unix.Close(inFd)
	if oerr != nil || ierr != nil {
		// Out of descriptors after the fork: the child runs on, so it is
		// killed rather than left with nobody reading its terminal.
		_ = unix.Kill(-pid, unix.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		for _, f := range []*os.File{out, in, errR} {
			if f != nil {
				f.Close()
			}
		}
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		r.cgroups.release(cg)
		return nil, unix.EMFILE
	}
	e := &execEntry{
		id:             id,
		pgid:           pid,
		log:            newOutputLog(r.cfg.StreamReplayBytes, r.cfg.MaxOutputBytes, r.cfg.StreamStall, r.cfg.StreamAttachGrace),
		finished:       make(chan struct{}),
		stdinRequested: true,
		stdin:          in,
		argv:           sp.argv,
		started:        time.Now(),
		tty:            true,
		cg:             cg,
	}
	if pidfd >= 0 {
		if unix.SetNonblock(pidfd, true) == nil {
			e.pidfd = os.NewFile(uintptr(pidfd), "pidfd")
		} else {
			unix.Close(pidfd)
		}
	}
	r.log.Info("exec started", "exec_id", id, "pid", pid, "tty", true, "rows", sp.tty.Rows, "cols", sp.tty.Cols)
	// The master reads EIO once every slave descriptor is closed, which the
	// pump takes as the end of output, as EOF on a pipe.
	go r.supervise(e, pid, out, errR, sp.timeout)
	go func() {
		// Finished means the pump has ended and closed its master; the input
		// master closes right after.
		<-e.finished
		<-r.ptySlots
	}()
	return e, nil
}

// pollable returns a duplicate of fd on the runtime poller (onPoller); fd
// stays the caller's.
func pollable(fd int, name string) (*os.File, error) {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return onPoller(d, name)
}

// ExecResize sets an exec's terminal size.
func (s *Server) ExecResize(w http.ResponseWriter, _ *http.Request, id protocol.ExecID, p protocol.ExecResizeParams) {
	if p.Rows == 0 || p.Cols == 0 {
		writeError(w, taxonomy.SlugMalformedRequest, "rows and cols must both be at least 1")
		return
	}
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	if !e.tty {
		writeError(w, taxonomy.SlugNotATty, "this exec was started without tty, so it has no terminal to size")
		return
	}
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	// Finished is checked, not only the terminal's handle: the handle is
	// closed in the background just after the exit, and a poll that has
	// already said exited must not be followed by a resize that succeeds.
	if e.stdin == nil || e.isFinished() {
		writeError(w, taxonomy.SlugStdinClosed, "the terminal is gone: the exec exited or its input was closed with eof")
		return
	}
	rc, err := e.stdin.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			err = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: p.Rows, Col: p.Cols})
		})
		if cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		writeError(w, taxonomy.SlugStdinClosed, "the terminal could not be sized: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, protocol.ResizeResponse{ExecID: id, Rows: p.Rows, Cols: p.Cols})
}
