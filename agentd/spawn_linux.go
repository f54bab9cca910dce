package agentd

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spawn forks the child in its own process group with pipes for stdout and
// stderr (and stdin when asked), then hands it to supervise. Pipes, not temp
// files: a grandchild inherits the write end, so EOF comes only when the last
// writer closes and nothing it writes after the child exits is lost.
func (r *registry) spawn(id string, sp *spec) (_ *execEntry, err error) {
	if err := checkCwd(sp.dir); err != nil {
		return nil, err
	}
	path, err := lookPath(sp.path, sp.env, sp.dir)
	if err != nil {
		return nil, err
	}
	if sp.tty != nil {
		return r.spawnTTY(id, sp, path)
	}
	outR, outW, err := childPipe(true)
	if err != nil {
		return nil, err
	}
	errR, errW, err := childPipe(true)
	if err != nil {
		outR.Close()
		unix.Close(outW)
		return nil, err
	}
	stdinChild := int(r.devNull.Fd())
	var stdinW *os.File
	if sp.stdin {
		var stdinR int
		if stdinW, stdinR, err = childPipe(false); err != nil {
			outR.Close()
			unix.Close(outW)
			errR.Close()
			unix.Close(errW)
			return nil, err
		}
		stdinChild = stdinR
		defer unix.Close(stdinR)
	}
	cg, err := r.cgroups.prepare(sp.limits)
	if err != nil {
		outR.Close()
		unix.Close(outW)
		errR.Close()
		unix.Close(errW)
		if stdinW != nil {
			stdinW.Close()
		}
		return nil, err
	}
	pidfd := -1
	// Its own group, so kill reaches everything the child started. The
	// pidfd comes from clone itself, so it can never name another process.
	attr := &syscall.SysProcAttr{Setpgid: true, Credential: sp.cred, PidFD: &pidfd}
	cg.attach(attr)
	var pid int
	err = cg.forkIntoV1(func() (err error) {
		pid, err = syscall.ForkExec(path, sp.argv, &syscall.ProcAttr{
			Dir:   sp.dir,
			Env:   sp.env,
			Files: []uintptr{uintptr(stdinChild), uintptr(outW), uintptr(errW)},
			Sys:   attr,
		})
		return err
	})
	cg.closeFd()
	unix.Close(outW)
	unix.Close(errW)
	if err != nil {
		r.cgroups.release(cg)
		outR.Close()
		errR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		return nil, spawnOrLimitsError(sp, err)
	}
	e := &execEntry{
		id:             id,
		pgid:           pid,
		log:            newOutputLog(r.cfg.StreamReplayBytes, r.cfg.MaxOutputBytes, r.cfg.StreamStall, r.cfg.StreamAttachGrace),
		finished:       make(chan struct{}),
		stdinRequested: sp.stdin,
		stdin:          stdinW,
		argv:           sp.argv,
		started:        time.Now(),
		cg:             cg,
	}
	if pidfd >= 0 {
		// Without it (closed on failure) waitChild blocks a thread instead.
		e.pidfd, _ = onPoller(pidfd, "pidfd")
	}
	stdin, timeout := sp.stdin, sp.timeout
	go func() {
		// Logged here rather than before the return: the line is a write to
		// stderr, and the start's reply need not wait for it. It still
		// comes before the exec's "finished", from the same goroutine.
		r.log.Info("exec started", "exec_id", id, "pid", pid, "stdin", stdin)
		r.supervise(e, pid, outR, errR, timeout)
	}()
	return e, nil
}

// childPipe makes a pipe for one of a child's stdio descriptors. The child's
// end is a plain blocking descriptor, as a child expects, that never touches
// the runtime poller: it is only handed to the fork and closed. The daemon's
// end is non-blocking on the poller, so a pump parks instead of holding a
// thread and honours the linger deadline. (os.Pipe registers both ends with
// the poller and Fd then takes the child's end off again: twice the
// syscalls, on every exec's critical path.) daemonReads says which end is
// the daemon's: the read end for stdout and stderr, the write end for stdin.
// A non-blocking child end fails TestStreamAttachedAfterTheStartLosesNothing
// (head -c meets EAGAIN); a blocking daemon end fails
// TestLingerDeadlineReportsWritersMayBeAlive (the deadline never fires).
func childPipe(daemonReads bool) (daemon *os.File, child int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, os.NewSyscallError("pipe2", err)
	}
	mine, theirs, name := p[0], p[1], "|0"
	if !daemonReads {
		mine, theirs, name = p[1], p[0], "|1"
	}
	f, err := onPoller(mine, name)
	if err != nil {
		unix.Close(theirs)
		return nil, -1, os.NewSyscallError("fcntl", err)
	}
	return f, theirs, nil
}

// onPoller makes fd non-blocking and wraps it, so the runtime poller owns it
// (os.NewFile registers only non-blocking descriptors). The file owns fd from
// here on; on failure fd is closed.
func onPoller(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// checkCwd names a missing or unusable cwd. Without it the chdir inside the
// spawn fails with the same ENOENT as a missing argv[0], and the error blames
// the command.
func checkCwd(dir string) error {
	if dir == "" {
		return nil
	}
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("cwd %q: %w", dir, unwrapPathError(err))
	case !st.IsDir():
		return fmt.Errorf("cwd %q: %w", dir, syscall.ENOTDIR)
	}
	return nil
}

// spawnError describes a failed fork/exec. The cwd is checked again, since it
// may have gone between checkCwd and the spawn; an env value is never quoted.
func spawnError(sp *spec, err error) error {
	if cerr := checkCwd(sp.dir); cerr != nil {
		return cerr
	}
	return fmt.Errorf("start %s: %w", sp.argv[0], err)
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// supervise drains both pipes while waiting for the child, then lingers up to
// output_linger for descendants still holding the pipes, then records the end.
// Draining concurrently with the wait matters: a child that fills a pipe
// blocks in write forever if nobody reads.
func (r *registry) supervise(e *execEntry, pid int, outR, errR *os.File, timeout time.Duration) {
	var wg sync.WaitGroup
	wg.Add(2)
	go r.pump(&wg, outR, stdoutKind, e)
	go r.pump(&wg, errR, stderrKind, e)

	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() {
			if r.escalate(e) {
				r.log.Warn("exec exceeded its timeout; signalled its process group", "exec_id", e.id)
			}
		})
	}
	var ru syscall.Rusage
	ws, err := waitChild(e, pid, &ru)
	if err != nil {
		r.log.Warn("waiting for exec child failed", "exec_id", e.id, "err", err.Error())
	}
	deadline := time.Now().Add(r.cfg.OutputLinger)
	_ = outR.SetReadDeadline(deadline)
	_ = errR.SetReadDeadline(deadline)
	wg.Wait()
	outR.Close()
	errR.Close()
	if timer != nil {
		// After the pumps, not at the reap: a timed-out grandchild holding the
		// pipes is still the exec's to kill, and a late timer is safe because
		// signalGroup refuses a group that is no longer provably ours.
		timer.Stop()
	}
	// Output is over; if the group is now known gone, signalGroup marks it so
	// and closes the pidfd instead of pinning it until ack plus TTL.
	_, _ = e.signalGroup(0)

	e.sigMu.Lock()
	st := exitStatus{writersMayBeAlive: e.lingered}
	e.sigMu.Unlock()
	// After the output is over, so descendants that held the pipes are
	// counted; the rusage came free with the reap.
	st.usage, st.oomKilled = measureUsage(e, &ru, err == nil)
	r.cgroups.release(e.cg)
	switch {
	case err != nil:
		// The status is unknown; say so rather than invent a code.
	case ws.Exited():
		c := int32(ws.ExitStatus())
		st.code = &c
	case ws.Signaled():
		s := int32(ws.Signal())
		st.signal = &s
	}
	// The phase turns exited in the same critical section that makes the exit
	// event visible: a client that saw the exit event and then polls must not
	// read running.
	e.log.finish(st, func() { close(e.finished) })
	r.log.Info("exec finished", "exec_id", e.id, "exit_code", derefOr(st.code, -1),
		"signal", derefOr(st.signal, 0), "writers_may_be_alive", st.writersMayBeAlive)
	// The child can read no more; our copy of its stdin only pins an fd.
	// In a goroutine, since a stdin write blocked on a full pipe holds
	// stdinMu; an exec that never had stdin has nothing to close.
	if !e.stdinRequested {
		return
	}
	go func() {
		e.stdinMu.Lock()
		defer e.stdinMu.Unlock()
		if e.stdin != nil {
			e.stdin.Close()
			e.stdin = nil
		}
	}()
}

func derefOr(p *int32, d int32) int32 {
	if p == nil {
		return d
	}
	return *p
}

// waitChild reaps the child and marks it reaped under sigMu, so no signal to
// its group can slip in between the reap and the mark. It parks on the pidfd
// through the runtime poller rather than blocking an OS thread in wait4 for
// the child's whole life, which keeps a hundred long-running execs from
// costing a hundred threads.
func waitChild(e *execEntry, pid int, ru *syscall.Rusage) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	reap := func() (done bool, err error) {
		e.sigMu.Lock()
		defer e.sigMu.Unlock()
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, ru)
		if err == syscall.EINTR {
			return false, nil
		}
		if err != nil || got == pid {
			e.reaped = true
			e.reapTicks = bootTicks()
			return true, err
		}
		return false, nil
	}
	if e.pidfd != nil {
		if rc, err := e.pidfd.SyscallConn(); err == nil {
			var werr error
			cerr := rc.Read(func(uintptr) bool {
				var done bool
				done, werr = reap()
				return done
			})
			if cerr == nil {
				return ws, werr
			}
		}
	}
	// No pidfd (kernels before 5.3): block a thread in waitid without reaping,
	// then reap under the lock.
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		done, werr := reap()
		if done || err != nil {
			return ws, werr
		}
	}
}
