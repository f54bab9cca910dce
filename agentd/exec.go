package agentd

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// execEntry is one exec, keyed by the caller-minted exec_id. The child is
// owned by its supervise goroutine; handlers only read the log, signal the
// group, or write stdin.
type execEntry struct {
	id   string
	pgid int // captured at spawn: the child's pid, which is its group's id
	log  *outputLog

	// For GET /v1/execs: the argv spawned and when.
	argv    []string
	started time.Time

	// sigMu orders every signal to the group against the reap and the pipe
	// EOFs, so "is this group still ours" and the signal are one step. Once
	// the leader is reaped and no member is known to be left, the number pgid
	// may name another exec's new group, and nothing may be sent to it.
	sigMu     sync.Mutex
	pidfd     *os.File // the leader's pidfd, nil on kernels without one; closed once the group is gone
	reaped    bool     // the leader was waited for; its pid no longer pins the group
	reapTicks uint64   // boot-relative clock ticks at the reap, comparable to /proc/<pid>/stat starttime
	lingered  bool     // the linger deadline passed with a pipe still held
	groupGone bool     // the group is known empty: never signal pgid again
	// finished closes once the child is reaped and its pipes reached EOF or the
	// linger deadline passed. Until then the phase is running.
	finished chan struct{}

	stdinRequested bool
	stdinMu        sync.Mutex
	stdin          *os.File // nil when not requested, after eof, or once the child is gone

	// Guarded by registry.mu.
	acked   bool
	ackedAt time.Time
}

func (e *execEntry) isFinished() bool {
	select {
	case <-e.finished:
		return true
	default:
		return false
	}
}

// registry holds every exec until an ack plus the TTL lets it go.
type registry struct {
	cfg     *Config
	log     *slog.Logger
	devNull *os.File

	mu       sync.Mutex
	execs    map[string]*execEntry
	starting map[string]*startOp

	// escalations counts running SIGTERM-to-SIGKILL escalations. Only tests
	// wait on it (a test hook): nothing in the daemon needs them to have ended.
	escalations sync.WaitGroup
}

// startOp lets a start that races an in-flight start of the same exec_id wait
// for that one's outcome instead of spawning a second child.
type startOp struct {
	done chan struct{}
	err  error
}

func newRegistry(cfg *Config, log *slog.Logger, devNull *os.File) *registry {
	return &registry{cfg: cfg, log: log, devNull: devNull,
		execs: map[string]*execEntry{}, starting: map[string]*startOp{}}
}

func (r *registry) get(id string) *execEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.execs[id]
}

func (r *registry) phase(e *execEntry) protocol.Phase {
	r.mu.Lock()
	acked := e.acked
	r.mu.Unlock()
	switch {
	case acked:
		return protocol.PhaseAcked
	case e.isFinished():
		return protocol.PhaseExited
	default:
		return protocol.PhaseRunning
	}
}

// activity is health's busy (some child still producing; an exited-but-unacked
// exec is not busy) and execs (entries in any phase).
func (r *registry) activity() (busy bool, count int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.execs {
		if !e.isFinished() {
			busy = true
		}
	}
	return busy, len(r.execs)
}

// collectLoop removes acked entries older than the TTL. Only acked entries are
// ever collected: an unacked one holds output the caller has not read.
func (r *registry) collectLoop(stop <-chan struct{}) {
	every := min(max(r.cfg.ExecTTL/4, 10*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			r.collect(now)
		}
	}
}

func (r *registry) collect(now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id, e := range r.execs {
		if e.acked && now.Sub(e.ackedAt) >= r.cfg.ExecTTL {
			delete(r.execs, id)
			e.sigMu.Lock()
			e.markGoneLocked() // an uncollected id can no longer be killed
			e.sigMu.Unlock()
			n++
		}
	}
	if n > 0 {
		r.log.Debug("collected acked execs", "count", n)
	}
	return n
}

// spec is a validated start request, ready to spawn.
type spec struct {
	path    string
	argv    []string
	env     []string
	dir     string
	cred    *syscall.Credential
	stdin   bool
	timeout time.Duration // 0: none
}

// startError carries the status and slug of a refused start.
type startError struct {
	status int
	slug   string
	detail string
}

func (e *startError) Error() string { return e.detail }

func malformed(format string, args ...any) *startError {
	return &startError{http.StatusBadRequest, taxonomy.SlugMalformedRequest, fmt.Sprintf(format, args...)}
}

// buildSpec validates a start request before anything is spawned.
func buildSpec(req *protocol.StartRequest, launchEnv map[string]string) (*spec, *startError) {
	if req.ExecID == "" {
		return nil, malformed("exec_id must not be empty")
	}
	if req.Command == nil {
		return nil, malformed("command is required: an argv array, or with shell true one script")
	}
	sp := &spec{stdin: req.Stdin}
	if t := req.TimeoutSec; t != nil {
		// Checked here, not in the waiter: a bad value found after the spawn
		// would leave a running child nobody reaps.
		if math.IsNaN(*t) || math.IsInf(*t, 0) || *t <= 0 {
			return nil, malformed("timeout_sec must be a finite positive number of seconds")
		}
		sp.timeout = seconds(*t)
	}
	// Launch env first, request env over it, and nothing else: the daemon's own
	// environment (and so the agent token) never reaches a child.
	merged := make(map[string]string, len(launchEnv)+len(req.Env))
	for k, v := range launchEnv {
		merged[k] = v
	}
	for k, v := range req.Env {
		if !validEnvKey(k) {
			return nil, malformed("env has a key that is empty or contains '=' or NUL")
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, malformed("env value for %q contains NUL", k)
		}
		merged[k] = v
	}
	sp.env = make([]string, 0, len(merged))
	for k, v := range merged {
		sp.env = append(sp.env, k+"="+v)
	}
	if req.Shell {
		// One argument to sh -c, never a constructed wrapper: a wrapper turns an
		// empty or comment-terminated script into a syntax error and lets an
		// unbalanced brace escape it.
		sp.path = "/bin/sh"
		sp.argv = []string{"sh", "-c", strings.Join(req.Command, "\n")}
	} else {
		if len(req.Command) == 0 {
			return nil, malformed("command must not be empty when shell is false")
		}
		sp.argv = req.Command
		sp.path = req.Command[0]
	}
	for _, a := range sp.argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, malformed("command contains NUL")
		}
	}
	if req.Cwd != nil {
		// Only when given: an omitted cwd inherits the daemon's, which is the
		// image WORKDIR because the daemon is the container CMD.
		if bad := badPath(*req.Cwd); bad != "" {
			// The caller's mistake, not a failed spawn.
			return nil, malformed("cwd: %s", bad)
		}
		sp.dir = *req.Cwd
	}
	if req.User != nil || req.Group != nil {
		uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
		if req.User != nil {
			uid = *req.User
		}
		if req.Group != nil {
			gid = *req.Group
		}
		// setgroups needs privilege; an unprivileged daemon can only keep its
		// own groups, and asking would fail every demoting spawn.
		sp.cred = &syscall.Credential{Uid: uid, Gid: gid, NoSetGroups: os.Getuid() != 0}
	}
	return sp, nil
}

// lookPath resolves argv[0] the way a shell would: a name with a slash is used
// as given (relative to cwd), otherwise it is searched in the child's PATH, or
// the daemon's when the child has none.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true
		}
	}
	if !found {
		path = os.Getenv("PATH")
		if path == "" {
			path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		check := p
		if !filepath.IsAbs(p) && dir != "" {
			check = filepath.Join(dir, p)
		}
		if st, err := os.Stat(check); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in PATH", name)
}

// start registers and spawns an exec, or returns the phase of the one already
// under this id. The id is claimed under the registry lock before spawning, so
// concurrent retries cannot both spawn.
func (r *registry) start(id string, sp *spec) (protocol.Phase, *startError) {
	r.mu.Lock()
	if e, ok := r.execs[id]; ok {
		r.mu.Unlock()
		r.log.Info("start retried; not spawning again", "exec_id", id)
		return r.phase(e), nil
	}
	if op, ok := r.starting[id]; ok {
		r.mu.Unlock()
		<-op.done
		if op.err != nil {
			return "", &startError{http.StatusInternalServerError, taxonomy.SlugSpawnFailed, op.err.Error()}
		}
		if e := r.get(id); e != nil {
			return r.phase(e), nil
		}
		return protocol.PhaseRunning, nil
	}
	op := &startOp{done: make(chan struct{})}
	r.starting[id] = op
	r.mu.Unlock()

	e, err := r.spawn(id, sp)

	r.mu.Lock()
	delete(r.starting, id)
	if err == nil {
		r.execs[id] = e
	}
	r.mu.Unlock()
	op.err = err
	close(op.done)
	if err != nil {
		r.log.Warn("spawn failed", "exec_id", id, "err", err.Error())
		// 500, deliberately not 404: 404 means an unknown exec.
		return "", &startError{http.StatusInternalServerError, taxonomy.SlugSpawnFailed, err.Error()}
	}
	return protocol.PhaseRunning, nil
}

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
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	stdinChild := r.devNull
	var stdinW *os.File
	if sp.stdin {
		var stdinR *os.File
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, err
		}
		stdinChild = stdinR
		defer stdinR.Close()
	}
	// Fd puts the child's ends in blocking mode, which is what a child expects;
	// the daemon's ends stay non-blocking on the poller.
	pidfd := -1
	pid, err := syscall.ForkExec(path, sp.argv, &syscall.ProcAttr{
		Dir:   sp.dir,
		Env:   sp.env,
		Files: []uintptr{stdinChild.Fd(), outW.Fd(), errW.Fd()},
		// Its own group, so kill reaches everything the child started. The
		// pidfd comes from clone itself, so it can never name another process.
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: sp.cred, PidFD: &pidfd},
	})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		return nil, spawnError(sp, err)
	}
	e := &execEntry{
		id:             id,
		pgid:           pid,
		log:            newOutputLog(r.cfg.StreamReplayBytes, r.cfg.MaxOutputBytes, r.cfg.StreamStallTimeout),
		finished:       make(chan struct{}),
		stdinRequested: sp.stdin,
		stdin:          stdinW,
		argv:           sp.argv,
		started:        time.Now(),
	}
	if pidfd >= 0 {
		// Non-blocking before NewFile, so the file lands on the poller.
		if unix.SetNonblock(pidfd, true) == nil {
			e.pidfd = os.NewFile(uintptr(pidfd), "pidfd")
		} else {
			unix.Close(pidfd)
		}
	}
	r.log.Info("exec started", "exec_id", id, "pid", pid, "stdin", sp.stdin)
	go r.supervise(e, pid, outR, errR, sp.timeout)
	return e, nil
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
	ws, err := waitChild(e, pid)
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

// waitChild reaps the child and marks it reaped under sigMu, so no signal to
// its group can slip in between the reap and the mark. It parks on the pidfd
// through the runtime poller rather than blocking an OS thread in wait4 for
// the child's whole life, which keeps a hundred long-running execs from
// costing a hundred threads.
func waitChild(e *execEntry, pid int) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	reap := func() (done bool, err error) {
		e.sigMu.Lock()
		defer e.sigMu.Unlock()
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
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

// pidfdGroupSignals is whether pidfd_send_signal takes
// PIDFD_SIGNAL_PROCESS_GROUP (Linux 6.9+); it turns false on the first EINVAL.
// A var so tests can exercise the fallback the platform's 6.1 kernel uses.
var pidfdGroupSignals atomic.Bool

func init() { pidfdGroupSignals.Store(true) }

// signalGroup sends sig (0 probes) to the exec's process group if the group can
// still be this exec's, and reports whether it reached a live member.
//
// A process group persists while any member lives, and its number is pinned
// as long as it does; once it is empty the number can name another exec's
// new group. Through the leader's pidfd (Linux 6.9+) the kernel resolves the
// group from the leader's struct pid, which a reused number never matches, so
// that is exact. Without it the group is signalled by number while the leader
// is unreaped (its zombie pins the number); after the reap, only while
// ownGroupLocked proves some member of the group started no later than the
// reap. Whether a pipe is still held proves nothing either way: a member may
// hold none (it redirected to /dev/null), and a holder may have left the group.
func (e *execEntry) signalGroup(sig unix.Signal) (bool, error) {
	e.sigMu.Lock()
	defer e.sigMu.Unlock()
	if e.groupGone {
		return false, nil
	}
	if e.pidfd != nil && pidfdGroupSignals.Load() {
		err := unix.PidfdSendSignal(int(e.pidfd.Fd()), sig, nil, unix.PIDFD_SIGNAL_PROCESS_GROUP)
		switch err {
		case nil:
			return true, nil
		case unix.ESRCH:
			e.markGoneLocked()
			return false, nil
		case unix.EINVAL:
			pidfdGroupSignals.Store(false)
		default:
			return false, err
		}
	}
	if e.reaped && !e.ownGroupLocked() {
		// No member older than the reap: the group is empty, or the number
		// names a newer group. Either way it is never ours again, since no
		// original member is left to rejoin it.
		e.markGoneLocked()
		return false, nil
	}
	err := unix.Kill(-e.pgid, sig)
	if err == unix.ESRCH {
		if e.reaped {
			e.markGoneLocked()
		}
		return false, nil
	}
	return err == nil, err
}

// ownGroupLocked reports, after the leader's reap, whether pgid still names
// this exec's group: kill(-pgid, 0) finds it, and some process in it started
// no later than the reap. A group's number cannot be reused while any member
// lives, so a member that was already running at the reap has been holding
// the number since before the group could have emptied. Start times are clock
// ticks (USER_HZ, 10 ms), so a process started in the same tick just after the
// reap also counts; a recycled group inside 10 ms would need the pid counter
// to wrap all the way round in that time, which it cannot.
func (e *execEntry) ownGroupLocked() bool {
	if err := unix.Kill(-e.pgid, 0); err == unix.ESRCH {
		return false
	}
	return groupHasMemberStartedBy(e.pgid, e.reapTicks)
}

// userHZ is the unit of /proc/<pid>/stat's starttime: sysconf(_SC_CLK_TCK),
// which the Linux ABI fixes at 100 on every architecture Go supports.
const userHZ = 100

// bootTicks is now as /proc/<pid>/stat's starttime counts it: CLOCK_BOOTTIME
// (which includes suspend, as starttime does since Linux 5.3) in USER_HZ
// ticks, rounded down as the kernel rounds starttime.
func bootTicks() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		// Cannot happen on Linux; zero makes no member count as older, which
		// refuses the signal rather than risk another exec's group.
		return 0
	}
	return uint64(ts.Sec)*userHZ + uint64(ts.Nsec)/(1e9/userHZ)
}

// groupHasMemberStartedBy scans /proc for a process in group pgid whose start
// time (stat field 22) is at most ticks. Zombies count: they pin the number.
func groupHasMemberStartedBy(pgid int, ticks uint64) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false
	}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		pg, start, ok := procGroupAndStart(name)
		if ok && pg == pgid && start <= ticks {
			return true
		}
	}
	return false
}

// procGroupAndStart reads pgrp (field 5) and starttime (field 22) of
// /proc/<pid>/stat. The fields are counted after the last ')', since comm may
// hold spaces and parentheses.
func procGroupAndStart(pid string) (pgrp int, start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0, 0, false
	}
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	return pgrp, start, err1 == nil && err2 == nil
}

func (e *execEntry) markGoneLocked() {
	e.groupGone = true
	if e.pidfd != nil {
		e.pidfd.Close()
		e.pidfd = nil
	}
}

// escalate sends SIGTERM to the exec's process group and, if any member is
// still alive after kill_grace, SIGKILL. Before each signal it re-checks that
// the group can still be this exec's (signalGroup). It returns whether SIGTERM
// reached a live group; the escalation runs on its own so the caller is
// answered now.
func (r *registry) escalate(e *execEntry) bool {
	sent, err := e.signalGroup(unix.SIGTERM)
	if err != nil {
		r.log.Warn("killpg failed", "exec_id", e.id, "pgid", e.pgid, "err", err.Error())
	}
	if !sent {
		return false
	}
	r.escalations.Add(1)
	go func() {
		defer r.escalations.Done()
		grace := time.NewTimer(r.cfg.KillGrace)
		defer grace.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-grace.C:
				if alive, _ := e.signalGroup(0); alive {
					r.log.Warn("process group survived SIGTERM; sending SIGKILL", "exec_id", e.id, "pgid", e.pgid)
					_, _ = e.signalGroup(unix.SIGKILL)
				}
				return
			case <-tick.C:
				if alive, _ := e.signalGroup(0); !alive {
					return // the whole group is gone, or no longer provably ours
				}
			}
		}
	}()
	return true
}

// writeJSON answers with a JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error: response encoding failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError answers with the exec routes' JSON ErrorBody. The status is always
// the caller's choice, never inferred: a bad key must be 400 and an absent id
// 404, and collapsing them made a protocol typo look like a missing artifact.
func writeError(w http.ResponseWriter, status int, slug, detail string) {
	writeJSON(w, status, protocol.ErrorBody{Error: slug, Detail: detail})
}

// readJSON decodes a capped request body, mapping an over-cap body to 413:
// with tooLargeSlug, a JSON ErrorBody; without, the spec's text/plain
// BodyTooLarge, whose text is tooLargeText (or max_body_bytes' when empty).
func readJSON(w http.ResponseWriter, r *http.Request, v any, limit int64, tooLargeSlug, tooLargeText string) bool {
	body := r.Body
	if limit > 0 {
		body = http.MaxBytesReader(w, body, limit)
	}
	data, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			if tooLargeSlug == "" {
				if tooLargeText == "" || tooLarge.Limit != limit {
					tooLargeText = bodyTooLargeText(tooLarge.Limit)
				}
				http.Error(w, strings.TrimSuffix(tooLargeText, "\n"), http.StatusRequestEntityTooLarge)
			} else {
				writeError(w, http.StatusRequestEntityTooLarge, tooLargeSlug, fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit))
			}
			return false
		}
		writeError(w, http.StatusBadRequest, taxonomy.SlugMalformedRequest, "the request body could not be read")
		return false
	}
	if err := json.Unmarshal(data, v); err != nil {
		writeError(w, http.StatusBadRequest, taxonomy.SlugMalformedRequest, "the body is not a valid request: "+jsonFault(err))
		return false
	}
	return true
}

// jsonFault describes a decode error by position and type, not by quoting input.
func jsonFault(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("field %q must be %s, not a JSON %s", typeErr.Field, typeErr.Type, typeErr.Value)
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return fmt.Sprintf("invalid JSON at byte %d", syntaxErr.Offset)
	}
	return "invalid JSON"
}

func startBodyTooLargeText(limit int64) string {
	return "exec start body is larger than " + strconv.FormatInt(limit, 10) + " bytes; argv and env must fit in it\n"
}

// ExecStart starts a command under the caller's exec_id, once.
func (s *Server) ExecStart(w http.ResponseWriter, r *http.Request) {
	// limits.max_start_body_bytes: argv and env are all a start carries (the
	// kernel refuses an exec whose strings exceed a quarter of the stack limit
	// anyway), so a start never holds up to max_body_bytes in memory to decode.
	limit := min(s.cfg.MaxStartBodyBytes, s.cfg.MaxBodyBytes)
	tooLarge := startBodyTooLargeText(limit)
	if limit == s.cfg.MaxBodyBytes {
		tooLarge = bodyTooLargeText(limit)
	}
	if r.ContentLength > limit {
		// Declared over the cap: refused before reading, like the gate does.
		s.refuse(w, r, http.StatusRequestEntityTooLarge, tooLarge)
		return
	}
	var req protocol.StartRequest
	if !readJSON(w, r, &req, limit, "", tooLarge) {
		return
	}
	if max := s.cfg.MaxExecIDBytes; max > 0 && int64(len(req.ExecID)) > max {
		// Before anything holds or logs it: an id lives as long as its exec.
		writeError(w, http.StatusBadRequest, taxonomy.SlugMalformedRequest,
			fmt.Sprintf("exec_id is %d bytes, longer than limits.max_exec_id_bytes (%d)", len(req.ExecID), max))
		return
	}
	sp, serr := buildSpec(&req, s.boot.env())
	if serr != nil {
		writeError(w, serr.status, serr.slug, serr.detail)
		return
	}
	phase, serr := s.execs.start(req.ExecID, sp)
	if serr != nil {
		writeError(w, serr.status, serr.slug, serr.detail)
		return
	}
	writeJSON(w, http.StatusOK, protocol.StartResponse{ExecID: req.ExecID, Phase: phase})
}

// The poll/ack body once the child has exited is the outcome JSON below, written
// by writeOutcome as it goes. Not the generated PollResponse: that omits a
// nil exit_code, and the contract is that a signal-killed child reports
// exit_code null, while a running poll carries no outcome fields at all.

func (s *Server) unknownExec(w http.ResponseWriter, id string) {
	if max := s.cfg.MaxExecIDBytes; max > 0 && int64(len(id)) > max {
		// Never echoed: no exec can have it, and the caller already has it.
		writeError(w, http.StatusNotFound, taxonomy.SlugUnknownExec, fmt.Sprintf("no exec is registered under this %d-byte exec_id (longer than limits.max_exec_id_bytes)", len(id)))
		return
	}
	writeError(w, http.StatusNotFound, taxonomy.SlugUnknownExec, "no exec is registered under exec_id "+fmt.Sprintf("%q", id))
}

// ExecPoll reports an exec's phase and, once exited, its outcome. Read-only.
func (s *Server) ExecPoll(w http.ResponseWriter, r *http.Request, id protocol.ExecID) {
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	phase := s.execs.phase(e)
	if phase != protocol.PhaseExited {
		// Running: nothing to report yet. Acked: the output was released, and
		// reporting it again would contradict the phase.
		writeJSON(w, http.StatusOK, protocol.PollResponse{ExecID: id, Phase: phase})
		return
	}
	stdout, stderr, st, _ := e.log.outcome()
	writeOutcome(w, id, phase, stdout, stderr, st)
}

// ExecAck hands the output over once and starts the TTL clock.
func (s *Server) ExecAck(w http.ResponseWriter, r *http.Request, id protocol.ExecID) {
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	if !e.isFinished() {
		// Acking now would drop output that is still arriving.
		writeError(w, http.StatusConflict, taxonomy.SlugStillRunning, "the exec has not exited; its output is still being written")
		return
	}
	s.execs.mu.Lock()
	already := e.acked
	if !already {
		e.acked = true
		e.ackedAt = time.Now()
	}
	s.execs.mu.Unlock()
	if already {
		// An empty 200 would read as a command that printed nothing.
		writeError(w, http.StatusConflict, taxonomy.SlugAlreadyAcked, "an earlier ack already released this exec's output")
		return
	}
	// The snapshot keeps the heads alive only while this body is written.
	stdout, stderr, st, _ := e.log.outcome()
	e.log.release()
	s.log.Info("exec acked; output released", "exec_id", id)
	writeOutcome(w, id, protocol.PhaseAcked, stdout, stderr, st)
}

// ExecKill signals the exec's whole process group: a shell that backgrounded a
// server leaves the interesting process outside the child's pid.
func (s *Server) ExecKill(w http.ResponseWriter, r *http.Request, id protocol.ExecID) {
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	killed := s.execs.escalate(e)
	s.log.Info("kill requested", "exec_id", id, "pgid", e.pgid, "signalled", killed)
	writeJSON(w, http.StatusOK, protocol.KillResponse{ExecID: id, Killed: killed})
}

// ExecStdin writes to an exec's stdin and/or closes it.
func (s *Server) ExecStdin(w http.ResponseWriter, r *http.Request, id protocol.ExecID) {
	// The body is the base64 of at most max_stdin_write_bytes plus JSON framing;
	// holding a max_body_bytes body in memory for it would be a way to OOM.
	limit := base64.StdEncoding.EncodedLen(int(s.cfg.MaxStdinWriteBytes)) + 4096
	var req protocol.StdinRequest
	if !readJSON(w, r, &req, int64(limit), taxonomy.SlugStdinWriteTooLarge, "") {
		return
	}
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	if !e.stdinRequested {
		writeError(w, http.StatusConflict, taxonomy.SlugStdinNotRequested, "this exec was started without stdin: true, so its stdin is /dev/null")
		return
	}
	eof := false
	if req.Signal != nil {
		if *req.Signal != "eof" {
			writeError(w, http.StatusBadRequest, taxonomy.SlugMalformedRequest, `signal must be "eof"; no other stdin signal is defined`)
			return
		}
		eof = true
	}
	var data []byte
	if req.DataB64 != nil {
		var err error
		if data, err = base64.StdEncoding.DecodeString(*req.DataB64); err != nil {
			writeError(w, http.StatusBadRequest, taxonomy.SlugMalformedRequest, "data_b64 is not valid standard base64")
			return
		}
	}
	if int64(len(data)) > s.cfg.MaxStdinWriteBytes {
		writeError(w, http.StatusRequestEntityTooLarge, taxonomy.SlugStdinWriteTooLarge,
			fmt.Sprintf("%d bytes exceeds the %d-byte stdin write limit; split the write", len(data), s.cfg.MaxStdinWriteBytes))
		return
	}
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	if e.stdin == nil {
		writeError(w, http.StatusGone, taxonomy.SlugStdinClosed, "stdin was already closed by eof, or the child has exited")
		return
	}
	written := 0
	if len(data) > 0 {
		// Bounded: a child that stops reading fills the pipe, and an unbounded
		// write would pin this request and its connection forever.
		_ = e.stdin.SetWriteDeadline(time.Now().Add(s.cfg.StdinWriteTimeout))
		n, err := e.stdin.Write(data)
		written = n
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The pipe stays: the child may drain it, so a retry can succeed.
			writeError(w, http.StatusRequestTimeout, taxonomy.SlugStdinWriteTimeout,
				fmt.Sprintf("the child did not read stdin within the write timeout; %d of %d bytes were written", n, len(data)))
			return
		case errors.Is(err, syscall.EPIPE):
			e.stdin.Close()
			e.stdin = nil
			writeError(w, http.StatusGone, taxonomy.SlugStdinClosed, "the child is no longer reading stdin")
			return
		default:
			writeError(w, http.StatusInternalServerError, taxonomy.SlugStdinWriteFailed, err.Error())
			return
		}
	}
	if eof {
		// Closing our end is the only way the child sees EOF.
		e.stdin.Close()
		e.stdin = nil
	}
	writeJSON(w, http.StatusOK, protocol.StdinResponse{ExecID: id, Written: uint(written), EOF: eof})
}
