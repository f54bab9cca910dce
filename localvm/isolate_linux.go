//go:build linux

package localvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/localvm/guestinit"

	"golang.org/x/sys/unix"
)

// How a guest is confined. The emulator executes a sealed in-memory copy
// of the microvm-guest-init beside its own configured agentd when that is
// of this build, else of its own binary (guestInitBinary,
// isolate_exec_linux.go), with argv[0] set to GuestInitArg0 and the clone
// flags of a new user, mount, PID, UTS, IPC, network and cgroup namespace.
// That child is PID 1 of the guest: root
// of the guest's user namespace only (on the host it is an unprivileged uid;
// isolate_userns_linux.go), not dumpable, it builds the guest's root in the
// MicroVM's state directory and starts agentd through its second stage
// (guestExec, in a user namespace nested in the init's, where the init's
// mounts are locked), pivots into the root itself, then reaps every orphan
// until agentd exits.
// Killing it makes the kernel kill everything else in the PID namespace,
// setsid'd grandchildren included. The emulator reaches the guest's ports
// through the init (isolate_broker_linux.go), limits it through cgroups
// (isolate_limits_linux.go) and, for egress, gives its network namespace a
// user-mode network (isolate_egress_linux.go).
//
// The building blocks are the kernel's (clone flags through
// syscall.SysProcAttr, mount, pivot_root through golang.org/x/sys/unix):
// no setuid helper to install, no version skew between hosts, and the same
// code path on CI and on a laptop, as root or not.
//
// GuestInitArg0 is that init's argv[0]: what a guest sees as its PID 1's
// command line, and what Init dispatches on.
const GuestInitArg0 = guestinit.InitArg0

// guestInitEnv is the init's whole environment. The Go runtime would
// otherwise keep the emulator's cgroup-v1 CPU files open for the init's
// life to follow a limit (containermaxprocs); the init's GOMAXPROCS does not
// matter, and a guest must find no host file open in its PID 1.
var guestInitEnv = []string{"GODEBUG=containermaxprocs=0", guestinit.ABIEnv + "=" + guestinit.ABI}

// openSealed opens the file at path as the emulator (the guest's uid need
// not be able to read it) and returns its sealed copy.
func openSealed(path, name string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", name, err)
	}
	defer f.Close()
	return sealedCopy(f, name)
}

// probeArg0 runs the isolation probe (guestinit's probe_linux.go): the
// same namespaces and an overlay mount, then exit 0.
const probeArg0 = guestinit.ProbeArg0

// initCalled is set by Init: a process that launches guests without it
// would re-execute its own main as a guest's init.
var initCalled atomic.Bool

// Init runs this process as one of the runtime's re-executed stages when
// argv[0] names one (a guest's init, its second stage, the isolation
// probe, a user-namespace holder) and never returns then; otherwise it
// returns at once. Every binary that launches local guests, and every test
// binary that does (TestMain), calls it first thing in main, as runc's
// callers call libcontainer's Init: a package's init() must not hijack a
// process, and the earlier the dispatch, the less of the program a guest's
// init runs before it (Go's package initialisers still run; see issue #52).
func Init() {
	initCalled.Store(true)
	if len(os.Args) == 0 {
		return
	}
	guestinit.Main() // a guest's init, its second stage or the probe: never returns
	switch os.Args[0] {
	case userNamespaceHolderArg0:
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
		os.Exit(0)
	}
}

// mustInit refuses to re-execute a binary whose main did not call Init: its
// copy would run the program, not the guest.
func mustInit() {
	if !initCalled.Load() {
		panic("localvm: Init was not called at the top of main (or TestMain); a local guest cannot be started")
	}
}

// isolationError is the refusal of a host that cannot confine a guest. It
// classifies as a precondition (KindPrecondition, exit 12) and names what is
// missing.
func isolationError(missing string, err error) error {
	return &IsolationError{Missing: missing, Err: err}
}

var probe struct {
	once sync.Once
	err  error
}

// CheckIsolation reports whether this host can confine a guest the way
// AgentdLauncher does: Linux, privileged enough to create mount, PID, UTS,
// IPC and network namespaces, and able to mount an overlay. The answer is
// measured once, by running the probe in real namespaces, and kept. A nil
// answer means AgentdLauncher's guests are isolated; an error is an
// *IsolationError naming what is missing.
func CheckIsolation() error {
	mustInit()
	probe.once.Do(func() { _, probe.err = runProbe("") })
	return probe.err
}

// CheckIsolationFor is CheckIsolation with the probe run from the
// microvm-guest-init beside agentd when that is of this build
// (guestInitBinary), as that agentd's guests' inits are: a copy of a binary
// a tenth the emulator's size, which starts in about a millisecond,
// where the emulator's own re-execution costs tens (issue 52: every
// `microvm run --local` probes once before it launches). The answer is the
// same one CheckIsolation keeps.
func CheckIsolationFor(agentd string) error {
	mustInit()
	probe.once.Do(func() { _, probe.err = runProbe(agentd) })
	return probe.err
}

// runProbe runs the probe from the init beside own (the emulator's own
// binary when own is empty or holds none of this build) and returns the
// name of the sealed copy it ran, which a test checks.
func runProbe(own string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", isolationError("/proc/self/exe (the emulator re-executes itself as the guest's init)", err)
	}
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		return "", isolationError("/proc/self/exe (the emulator re-executes itself as the guest's init)", err)
	}
	if !seccomp.Supported() {
		return "", isolationError("seccomp filters (a kernel built with CONFIG_SECCOMP_FILTER)", nil)
	}
	if _, err := guestDeniedSyscalls(); err != nil {
		return "", isolationError("a syscall table for this architecture", err)
	}
	dir, err := os.MkdirTemp("", "emulator-probe-")
	if err != nil {
		return "", isolationError("a writable temporary directory", err)
	}
	defer os.RemoveAll(dir)
	m := guestIDMapping()
	if m.byRoot {
		if err := os.Chown(dir, m.ownerUID, m.ownerGID); err != nil {
			return "", isolationError("permission to hand a directory to the guest's uid", err)
		}
	}
	// The probe runs as a guest's init does: from the sealed copy, which
	// a host forbidding executable memfds (vm.memfd_noexec=2) refuses here.
	var initExe *os.File
	if own != "" {
		initExe, err = guestInitBinary(own)
	} else {
		initExe, err = sealedSelf()
	}
	if err != nil {
		return "", err
	}
	defer initExe.Close()
	from, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(initExe.Fd())))
	cmd := exec.Command("/proc/self/fd/3", dir)
	cmd.Args[0] = probeArg0
	cmd.ExtraFiles = []*os.File{initExe}
	cmd.Env = guestInitEnv
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: guestCloneFlags}
	m.apply(cmd.SysProcAttr)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := startOwnedBy(cmd, m); err != nil {
		// clone itself failed: no user namespaces, or not permitted.
		what := "permission to create user, mount, PID, UTS, IPC, network and cgroup namespaces"
		if why := userNamespacesRefusal(); why != "" && os.Geteuid() != 0 {
			what = why
		} else if errors.Is(err, syscall.EINVAL) {
			what = "kernel support for user, mount, PID, UTS, IPC, network and cgroup namespaces"
		}
		return "", isolationError(what, fmt.Errorf("starting %s: %w", exe, err))
	}
	if err := cmd.Wait(); err != nil {
		msg := strings.TrimSpace(out.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", isolationError(msg, nil)
	}
	return from, nil
}

// guestCloneFlags are the namespaces every guest gets besides its user
// namespace (idMapping.apply adds that). A guest always has its own network
// namespace: egress is a user-mode network inside it, never the host's.
const guestCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// AgentdLauncher is a Launcher that runs a real agentd binary as the guest,
// confined the way a MicroVM is:
//
//   - its own user namespace: the guest's root is an unprivileged uid on the
//     host, and the namespace is owned by that uid, so every capability the
//     guest holds is over its own namespaces only, and its kernel objects
//     count against that uid; the emulator needs no root to make it;
//   - its own root: a tmpfs of bounded size holding everything the guest can
//     write, under which the image's root (GuestSpec.RootDir) is the lower
//     layer, or else the host's system directories bound read-only and an
//     /etc holding only what a shell and TLS need; never the host's home
//     directories, /root, sockets or credentials; its own /proc (runc's
//     masked and read-only paths applied), /sys, /dev, /tmp;
//   - its own PID namespace under a tiny init: terminate leaves nothing,
//     whatever the guest started;
//   - its own hostname and machine-id: identity repair runs (inside the
//     guest, as on the platform);
//   - a syscall filter after Docker's default profile, and no new privileges;
//   - memory, process and CPU limits from its size class, where the host
//     lets the emulator set them (Guest.Limits says which hold);
//   - its own network namespace: only a loopback, or with egress
//     (GuestSpec.Egress) a user-mode network (slirp4netns) that reaches outward
//     but never the host's loopback.
//
// The emulator reaches the guest's ports through its init, never through a
// listener on the host. A host that cannot provide this gets a launch that
// dies naming what is missing (CheckIsolation says so before any launch);
// there is no fallback to an unconfined guest. UnsafeUnisolatedAgentdLauncher
// is the old, unconfined mode, for tests that need it.
//
// stderr receives the daemon's log lines; nil discards them.
func AgentdLauncher(bin string, stderr io.Writer) Launcher {
	if stderr == nil {
		stderr = io.Discard
	}
	return func(ctx context.Context, spec GuestSpec) (*Guest, error) {
		if err := CheckIsolationFor(bin); err != nil {
			return nil, err
		}
		if spec.Egress && spec.Network == nil {
			if err := CheckEgress(); err != nil {
				return nil, err
			}
		}
		if spec.Network != nil {
			if err := CheckNetworkPolicy(); err != nil {
				return nil, err
			}
		}
		daemon := bin
		if spec.Daemon != "" {
			daemon = spec.Daemon // the agentd the image's artifact carries
		}
		SweepStaleStateOnce()
		dir, err := os.MkdirTemp("", StateDirPrefix(spec.MicrovmID))
		if err != nil {
			return nil, err
		}
		g, err := startIsolated(ctx, daemon, bin, dir, spec, stderr)
		if err != nil {
			_ = removeState(dir)
			return nil, err
		}
		return g, nil
	}
}

func guestEnv(spec GuestSpec) []string {
	vars := map[string]string{}
	for k, v := range spec.Env {
		vars[k] = v
	}
	// The confined guest is told it is a MicroVM guest (agentd repairs
	// identity only when told; docs/PLATFORM.md, "Nothing inside a guest
	// tells it from a development machine") unless the image says otherwise.
	// Inside the guest repair renames the guest's UTS namespace and rewrites
	// the guest's own /etc/machine-id, never the host's.
	_, set := vars["AGENTD_REPAIR_IDENTITY"]
	if _, alias := vars["AGENTD_IDENTITY_REPAIR"]; !set && !alias {
		vars["AGENTD_REPAIR_IDENTITY"] = "1"
	}
	// Replaced, not appended: the init starts agentd with os.StartProcess,
	// which keeps duplicates, and a duplicate's first value is the one read.
	// An image cannot point the daemon at another port or address: loopback
	// is all the init dials.
	if spec.Network != nil {
		// Over the image's: a placeholder must win over any value of the
		// same name, and the CA bundle over the image's own.
		maps.Copy(vars, NetworkEnv(spec.Network))
	}
	vars["AGENTD_PORT"] = strconv.Itoa(spec.HookPort)
	vars["AGENTD_LISTEN"] = "127.0.0.1"
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		if k != "PATH" && k != "HOME" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// startIsolated starts a guest whose daemon is the agentd at bin, its init
// run from the microvm-guest-init beside own when that is of this build
// (guestInitBinary).
func startIsolated(ctx context.Context, bin, own, dir string, spec GuestSpec, stderr io.Writer) (*Guest, error) {
	m := guestIDMapping()
	for _, d := range []string{filepath.Join(dir, "rw"), filepath.Join(dir, "image")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	if m.byRoot {
		// The guest's root mounts its writable layer under this directory.
		if err := os.Chown(dir, m.ownerUID, m.ownerGID); err != nil {
			return nil, err
		}
	}
	writable := spec.WritableMiB
	if writable <= 0 {
		writable = taxonomy.LocalGuestWritableMiB
	}
	cfg := guestinit.Config{
		State: dir, WritableBytes: int64(writable) << 20, ImageRoot: spec.RootDir,
		Env: guestEnv(spec), Hostname: spec.MicrovmID, Workdir: spec.Workdir, Inherited: inheritedFDs(),
	}
	if cfg.Hostname == "" {
		cfg.Hostname = "microvm"
	}
	filter, err := guestFilter()
	if err != nil {
		return nil, isolationError("a syscall table for this architecture", err)
	}
	cfg.Filter = filter
	// Opened here, as the emulator: the guest's uid need not be able to
	// read the daemon's binary or reach the image's directory.
	agentd, err := openSealed(bin, filepath.Base(bin))
	if err != nil {
		return nil, err
	}
	defer agentd.Close()
	initExe, err := guestInitBinary(own)
	if err != nil {
		return nil, err
	}
	defer initExe.Close()
	files := []*os.File{nil, agentd, nil, initExe}
	netConn := -1         // the emulator's end of guestinit.FDNet, for a guest under a policy
	var guestNet *os.File // the init's end, closed here once the init holds it
	if spec.Network != nil {
		cfg.Network = &guestinit.NetConfig{CAPEM: spec.Network.CACertPEM()}
		np, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		netConn = np[0]
		guestNet = os.NewFile(uintptr(np[1]), "guest-net")
		defer guestNet.Close() // on the paths that return before the start
		files = append(files, guestNet)
		defer func() {
			if netConn >= 0 {
				unix.Close(netConn)
			}
		}()
	}
	if spec.RootDir != "" && m.byRoot {
		image, err := bindImageRoot(spec.RootDir, dir, m, false)
		if err != nil {
			return nil, err
		}
		defer detachImage(dir) // on every path; after the start, at once
		cfg.ImageRoot = image
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	broker := pair[0]
	guestEnd := os.NewFile(uintptr(pair[1]), "guest-broker")
	files[2] = guestEnd
	// fd 3 of the init: the config, then held open for the guest's whole
	// life. The init treats its end-of-file as the emulator's death, so a
	// crashed emulator leaves no guest behind.
	r, w, err := os.Pipe()
	if err != nil {
		unix.Close(broker)
		guestEnd.Close()
		return nil, err
	}
	files[0] = r
	var logTail tail
	cmd := exec.Command(guestinit.InitPath)
	cmd.Args = []string{GuestInitArg0}
	cmd.Env = guestInitEnv
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = io.MultiWriter(stderr, &logTail), io.MultiWriter(stderr, &logTail)
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: guestCloneFlags, Setsid: true}
	m.apply(cmd.SysProcAttr)
	err = startOwnedBy(cmd, m)
	r.Close()
	guestEnd.Close()
	if guestNet != nil {
		// Only the init holds its end now: its death reads as end of file.
		guestNet.Close()
	}
	// The clone copied the image's bind into the guest's mount namespace;
	// the host's copy goes now, before anything could remove the state
	// directory through it.
	detachImage(dir)
	if err != nil {
		w.Close()
		unix.Close(broker)
		return nil, isolationError("permission to create the guest's namespaces", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	leader := cmd.Process.Pid
	var brokerMu sync.RWMutex
	brokerOpen := true
	var limits *guestLimits
	var stopEgress func()
	var stopNet func()
	release := func() {
		_ = syscall.Kill(leader, syscall.SIGKILL)
		<-exited
		w.Close()
		brokerMu.Lock()
		if brokerOpen {
			brokerOpen = false
			unix.Close(broker)
		}
		brokerMu.Unlock()
		if stopEgress != nil {
			stopEgress()
		}
		if stopNet != nil {
			stopNet()
		}
		limits.remove()
	}
	// The config first: the init builds the guest's root (the emulator's
	// work) while it is placed in its cgroups here. It starts nothing of
	// the guest's until the empty line below says it is placed: nothing the
	// guest starts runs outside its limits, not even for a moment. (The
	// memory group's attach alone waited 7.5 ms for the kernel on this
	// 2-core host, all of it on the launch's path before.)
	if _, err := w.Write(append(raw, '\n')); err != nil {
		release()
		return nil, fmt.Errorf("configuring the guest's init: %w", err)
	}
	limits = applyLimits(spec, leader)
	if spec.Egress && spec.Network == nil {
		if stopEgress, err = startEgress(leader, stderr); err != nil {
			release()
			return nil, err
		}
	}
	if spec.Network != nil {
		if err := offerTun(netConn, leader); err != nil {
			release()
			return nil, fmt.Errorf("offering the guest its tun: %w", err)
		}
	}
	if _, err := w.Write([]byte{'\n'}); err != nil {
		release()
		return nil, fmt.Errorf("configuring the guest's init: %w", err)
	}
	if spec.Network != nil {
		// The init sends the tun before it lets the daemon start; bounded
		// as the daemon's listen is.
		c := netConn
		netConn = -1 // receiveTun closes it
		tun, err := receiveTun(c, exited, 30*time.Second)
		if err != nil {
			release()
			return nil, fmt.Errorf("setting up the guest's network under its policy: %w: %s", err, logTail.String())
		}
		stopNet = serveNetwork(spec.Network, tun)
	}
	// The init exits when agentd does (it is the daemon's reaper and returns
	// with its status): the control plane learns of a dead guest at once.
	g := &Guest{Limits: limits.report(), Exited: exited}
	g.Ports = map[int]string{spec.HookPort: "127.0.0.1:" + strconv.Itoa(spec.HookPort)}
	g.Dial = func(ctx context.Context, p int) (net.Conn, error) {
		// Held across the request: once Stop closed the channel its
		// descriptor number may name something else.
		brokerMu.RLock()
		defer brokerMu.RUnlock()
		if !brokerOpen {
			return nil, errors.New("the guest has stopped")
		}
		return brokerDial(ctx, broker, p)
	}
	pidns, err := os.Readlink("/proc/" + strconv.Itoa(leader) + "/ns/pid")
	if err != nil {
		release()
		return nil, fmt.Errorf("reading the guest's PID namespace: %w", err)
	}
	var once sync.Once
	g.Stop = func() {
		once.Do(func() {
			// The init is PID 1 of the guest's namespace: when it dies the
			// kernel kills every other process in it, and the init is reaped
			// only once they are all gone.
			release()
			_ = removeState(dir)
		})
	}
	g.Freeze = func() error {
		// Every guest process but the init stops: the init must stay able
		// to see the emulator's lifeline close, or a guest frozen when its
		// emulator died would stay frozen forever (its processes, cgroups
		// and uid with it). The init only reaps and dials; it runs nothing
		// of the guest's.
		pids, err := signalPidns(leader, pidns, syscall.SIGSTOP, false)
		if err != nil {
			return err
		}
		// kill(2) returns before the target stops; the platform's suspend
		// is complete only when the guest is frozen, so wait for it.
		return waitStopped(pids, 5*time.Second)
	}
	g.Thaw = func() error { _, err := signalPidns(leader, pidns, syscall.SIGCONT, true); return err }

	// Bounded: thirty seconds for the daemon to listen, generous for a
	// loaded machine; a healthy guest listens within tens of milliseconds.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			g.Stop()
			return nil, fmt.Errorf("the guest exited (%v) before agentd listened on port %d: %s", cmd.ProcessState, spec.HookPort, logTail.String())
		case <-ctx.Done():
			g.Stop()
			return nil, ctx.Err()
		default:
		}
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := g.Dial(dctx, spec.HookPort)
		cancel()
		if err == nil {
			c.Close()
			watchDaemon(leader, exited)
			return g, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	g.Stop()
	return nil, fmt.Errorf("agentd did not listen on guest port %d within thirty seconds: %s", spec.HookPort, logTail.String())
}

// signalPidns sends sig to every process in the guest's PID namespace (the
// init too when leaderToo), scanning /proc until a pass finds none it has
// not signalled (a process forked mid-scan is caught by the next pass). It
// returns the pids it signalled.
func signalPidns(leader int, ns string, sig syscall.Signal, leaderToo bool) ([]int, error) {
	var err error
	if leaderToo {
		if err = syscall.Kill(leader, sig); errors.Is(err, syscall.ESRCH) {
			err = nil
		}
	}
	done := map[int]bool{leader: true}
	for pass := 0; pass < 8; pass++ {
		entries, rerr := os.ReadDir("/proc")
		if rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		fresh := 0
		for _, e := range entries {
			pid, perr := strconv.Atoi(e.Name())
			if perr != nil || done[pid] {
				continue
			}
			if l, lerr := os.Readlink("/proc/" + e.Name() + "/ns/pid"); lerr != nil || l != ns {
				continue
			}
			done[pid] = true
			fresh++
			if kerr := syscall.Kill(pid, sig); kerr != nil && !errors.Is(kerr, syscall.ESRCH) && err == nil {
				err = kerr
			}
		}
		if fresh == 0 {
			break
		}
	}
	pids := make([]int, 0, len(done))
	for pid := range done {
		if pid != leader || leaderToo {
			pids = append(pids, pid)
		}
	}
	return pids, err
}

// removeState deletes a MicroVM's state directory. The guest's mounts died
// with its mount namespace; a busy directory is retried briefly.
func removeState(dir string) error {
	// Never recurse through a bound image root into the image itself.
	if err := detachImage(dir); err != nil {
		return err
	}
	var err error
	for i := 0; i < 50; i++ {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// detachImage detaches the image root bound at dir/image in this mount
// namespace, if one is; it fails only when one may be there and stays. A
// bind of a directory on the same filesystem has the same device number,
// so the unmount itself is the test.
func detachImage(dir string) error {
	err := unix.Unmount(filepath.Join(dir, "image"), unix.MNT_DETACH)
	switch {
	case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		return nil // detached, or nothing mounted there
	case errors.Is(err, unix.EPERM) && os.Geteuid() != 0:
		return nil // only root binds an image root
	}
	return fmt.Errorf("detaching the image root bound at %s/image (the state directory is left in place): %w", dir, err)
}

// inheritedFDs lists this process's descriptors above 3 that lack
// close-on-exec, which every child inherits. Go opens its own with
// close-on-exec, so these came from the emulator's parent.
func inheritedFDs() []int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 3 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			out = append(out, fd)
		}
	}
	return out
}

// bindImageRoot mounts a root-started guest's image root under its state
// directory dir and returns where. The guest's uid may not be able to reach
// the image's directory, and overlayfs takes its layers only from the
// mounter's own mount namespace: the image is mounted here, copied into the
// guest's namespace by its clone, and detached from the host's as soon as
// the guest has started (the caller unmounts it). The mount is idmapped
// with the guest's mapping (isolate_idmap_linux.go), so the image's own ids
// are the guest's.
//
// A run-time guest on a filesystem without idmapped mounts still gets the
// image, bound as it is (its files then read-only to the guest, shown as
// nobody); a build step (required) does not, since its RUN could not
// write the image.
func bindImageRoot(root, dir string, m idMapping, required bool) (string, error) {
	image := filepath.Join(dir, "image")
	if err := mountIDMapped(root, image, m); err != nil {
		if required {
			return "", err
		}
		if err := unix.Mount(root, image, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", fmt.Errorf("binding the image's root: %w", err)
		}
	}
	if err := unix.Mount("", image, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		_ = unix.Unmount(image, unix.MNT_DETACH)
		return "", fmt.Errorf("binding the image's root: %w", err)
	}
	return image, nil
}

// StateDirPrefix starts the name of every directory an emulator makes under
// the temporary directory: "emulator-<its pid>-<what>-". A directory whose
// emulator was killed (SIGKILL, or an interrupted run --local) is found by
// that pid and removed by the next emulator on the host (sweepStaleState),
// as its cgroups are.
func StateDirPrefix(what string) string {
	return "emulator-" + strconv.Itoa(os.Getpid()) + "-" + what + "-"
}

var stateSweep sync.Once

// SweepStaleStateOnce sweeps the temporary directory once per process.
func SweepStaleStateOnce() { stateSweep.Do(func() { sweepStaleState(os.TempDir()) }) }

// sweepStaleState removes the directories under tmp of emulators that no
// longer run: state directories of guests and build steps (empty mount
// points, owned by a root-started guest's ids) and the store of a server
// without a state directory of its own. A directory whose emulator runs,
// or whose pid some other live process has, is left alone; one this user
// may not remove is skipped.
func sweepStaleState(tmp string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() { // a symlink is never followed
			continue
		}
		rest, ok := strings.CutPrefix(e.Name(), "emulator-")
		if !ok {
			rest, ok = strings.CutPrefix(e.Name(), "microvm-emulator-")
		}
		owner, _, named := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(owner)
		if !ok || !named || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); err == nil || errors.Is(err, unix.EPERM) {
			continue // its emulator still runs
		}
		dir := filepath.Join(tmp, e.Name())
		// Never recurse through an image root a killed launch left bound.
		if detachImage(dir) == nil {
			_ = os.RemoveAll(dir)
		}
	}
}

// watchDaemon ends the guest (kills its init, leader) as soon as the
// daemon, the init's one child, exits, whatever state the init is in. The
// init itself exits when it reaps the daemon; this is for an init that
// cannot, because it is stopped or frozen: its guest would stay RUNNING
// with the daemon's port free for any guest process to take. It watches a
// pidfd of the daemon, through the runtime's poller, until it is readable
// (the daemon exited) or the guest has ended.
func watchDaemon(leader int, exited <-chan struct{}) {
	pid := childOf(leader)
	if pid <= 0 {
		return
	}
	// The init is signalled through a pidfd too: once reaped, its pid may
	// name another process.
	initFD, err := unix.PidfdOpen(leader, 0)
	if err != nil {
		return // a kernel before 5.10: the init's reaping is the one watch
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		unix.Close(initFD)
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		unix.Close(initFD)
		return
	}
	go func() {
		<-exited
		f.Close() // ends the wait below
	}()
	go func() {
		defer unix.Close(initFD)
		polled := false
		err := rc.Read(func(uintptr) bool {
			done := polled
			polled = true
			return done
		})
		if err == nil {
			_ = unix.PidfdSendSignal(initFD, unix.SIGKILL, nil, 0)
		}
	}()
}

// childOf is the pid of a child of host process parent (the init has one:
// the daemon), or 0.
func childOf(parent int) int {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", parent, parent)); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			pid, _ := strconv.Atoi(f[0])
			return pid
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if f := strings.Fields(string(b[i+1:])); i > 0 && len(f) > 1 && f[1] == strconv.Itoa(parent) {
			return pid
		}
	}
	return 0
}
