//go:build linux

package emulator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// How a guest is confined. The emulator process re-executes itself
// (/proc/self/exe) with argv[0] set to guestInitArg0 and the clone flags of a
// new mount, PID, UTS, IPC and (without egress) network namespace. That
// child is PID 1 of the guest: it builds the guest's root in the MicroVM's
// state directory, pivots into it, starts agentd and reaps every orphan
// until agentd exits. Killing it makes the kernel kill everything else in
// the PID namespace, setsid'd grandchildren included.
//
// The building blocks are the kernel's (clone flags through
// syscall.SysProcAttr, mount, pivot_root and setns through
// golang.org/x/sys/unix, already a dependency): no helper binary to install,
// no version skew between hosts, and the same code path on CI and on a
// laptop.
const guestInitArg0 = "microvms-emulator-guest-init"

// probeArg0 runs the isolation probe: the same namespaces and an overlay
// mount, then exit 0.
const probeArg0 = "microvms-emulator-isolation-probe"

func init() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case guestInitArg0:
		os.Exit(guestInit())
	case probeArg0:
		os.Exit(isolationProbe())
	}
}

// hostSystemDirs are the host directories a guest without an image root
// sees, read-only under a copy-on-write overlay; a symlink among them (a
// merged /usr) is recreated as the same symlink.
var hostSystemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcAllowed are the host /etc entries a guest without an image root gets a
// copy of: what name resolution, the dynamic loader, TLS and a shell need.
// Everything else stays behind: shadow files, ssh host keys, sudoers, the
// host's machine-id and hostname, package-manager credentials, /etc/ssl/private.
var etcAllowed = []string{
	"passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "os-release", "debian_version", "system-release",
	"localtime", "timezone", "alternatives", "ssl/certs", "ssl/openssl.cnf", "ca-certificates.conf",
	"pki/tls/certs", "pki/ca-trust", "profile", "bash.bashrc", "inputrc", "shells", "login.defs",
	"protocols", "services", "networks", "mime.types",
}

// guestConfig is what the launcher tells the guest's init, as JSON on fd 3.
type guestConfig struct {
	State     string   // the MicroVM's state directory
	ImageRoot string   // the image's root filesystem; "" means the host's system directories
	Agentd    string   // host path of the daemon binary, opened before the pivot
	Env       []string // the daemon's whole environment
	Hostname  string   // the name before identity repair renames it
	OwnNet    bool     // a private network namespace: bring its loopback up
	Workdir   string   // the image's WORKDIR inside the guest root; "" is /
	Inherited []int    // descriptors the init inherited from the emulator's parent, to close
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
	probe.once.Do(func() { probe.err = runProbe() })
	return probe.err
}

func runProbe() error {
	exe, err := os.Executable()
	if err != nil {
		return isolationError("/proc/self/exe (the emulator re-executes itself as the guest's init)", err)
	}
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		return isolationError("/proc/self/exe (the emulator re-executes itself as the guest's init)", err)
	}
	dir, err := os.MkdirTemp("", "emulator-probe-")
	if err != nil {
		return isolationError("a writable temporary directory", err)
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command("/proc/self/exe", dir)
	cmd.Args[0] = probeArg0
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: guestCloneFlags(false)}
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			// clone itself failed: no namespaces, or not permitted.
			what := "permission to create mount, PID, UTS, IPC and network namespaces (run as root, or with CAP_SYS_ADMIN)"
			if errors.Is(err, syscall.EINVAL) {
				what = "kernel support for mount, PID, UTS, IPC and network namespaces"
			}
			return isolationError(what, fmt.Errorf("starting %s: %w", exe, err))
		}
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return isolationError(msg, nil)
	}
	return nil
}

// isolationProbe is the probe child: it is in the new namespaces already
// (clone made them); it checks it can make its mounts private and mount an
// overlay, which is what a guest root needs.
func isolationProbe() int {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, "the probe needs a directory")
		return 2
	}
	dir := os.Args[1]
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintf(os.Stderr, "permission to make mounts private in a new mount namespace: %v", err)
		return 1
	}
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "a writable temporary directory: %v", err)
			return 1
		}
	}
	opts := "lowerdir=" + filepath.Join(dir, "lower") + ",upperdir=" + filepath.Join(dir, "upper") + ",workdir=" + filepath.Join(dir, "work")
	if err := unix.Mount("overlay", filepath.Join(dir, "merged"), "overlay", 0, opts); err != nil {
		fmt.Fprintf(os.Stderr, "the overlay filesystem (modprobe overlay), with upper directories under %s: %v", os.TempDir(), err)
		return 1
	}
	if err := unix.Sethostname([]byte("probe")); err != nil {
		fmt.Fprintf(os.Stderr, "permission to set the hostname of a UTS namespace: %v", err)
		return 1
	}
	return 0
}

func guestCloneFlags(egress bool) uintptr {
	f := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC)
	if !egress {
		f |= unix.CLONE_NEWNET
	}
	return f
}

// AgentdLauncher is a Launcher that runs a real agentd binary as the guest,
// confined the way a MicroVM is:
//
//   - its own root: an overlay whose lower layer is the image's root
//     (GuestSpec.RootDir) or else the host's system directories read-only
//     and an /etc holding only what a shell and TLS need, and whose writes
//     land in the MicroVM's state directory, removed by terminate; its own
//     /proc, /dev, /tmp; never the host's home directories, /root, sockets
//     or credentials;
//   - its own PID namespace under a tiny init: terminate leaves nothing,
//     whatever the guest started;
//   - its own hostname and machine-id: identity repair runs (inside the
//     guest, as on the platform);
//   - its own network namespace with only a loopback, unless the launch
//     asked for egress (GuestSpec.Egress), when it shares the host's network
//     for outbound traffic.
//
// The endpoint proxy reaches a guest without egress by dialing from inside
// its network namespace. A host that cannot provide this gets a launch that
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
		if err := CheckIsolation(); err != nil {
			return nil, err
		}
		daemon := bin
		if spec.Daemon != "" {
			daemon = spec.Daemon // the agentd the image's artifact carries
		}
		abs, err := filepath.Abs(daemon)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "emulator-"+spec.MicrovmID+"-")
		if err != nil {
			return nil, err
		}
		var last error
		// With egress the daemon binds a host port, which can be taken
		// between probing and binding; a few attempts make that race
		// irrelevant. In its own namespace it owns every port.
		for attempt := 0; attempt < 3; attempt++ {
			g, err := startIsolated(ctx, abs, dir, spec, stderr)
			if err == nil {
				return g, nil
			}
			last = err
			if ctx.Err() != nil || !spec.Egress {
				break
			}
			// A failed attempt may have left a half-built root behind.
			_ = removeState(dir)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
		}
		_ = removeState(dir)
		return nil, last
	}
}

func guestEnv(spec GuestSpec, port int) []string {
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
	// is all the proxy dials, and with egress the guest shares the host's
	// network, where every interface would be exposed.
	vars["AGENTD_PORT"] = strconv.Itoa(port)
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

func startIsolated(ctx context.Context, bin, dir string, spec GuestSpec, stderr io.Writer) (*Guest, error) {
	port := spec.HookPort
	if spec.Egress {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		port = p
	}
	cfg := guestConfig{
		State: dir, ImageRoot: spec.RootDir, Agentd: bin, Env: guestEnv(spec, port),
		Hostname: spec.MicrovmID, OwnNet: !spec.Egress, Workdir: spec.Workdir,
		Inherited: inheritedFDs(),
	}
	if cfg.Hostname == "" {
		cfg.Hostname = "microvm"
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// fd 3 of the init: the config, then held open for the guest's whole
	// life. The init treats its end-of-file as the emulator's death, so a
	// crashed emulator leaves no guest behind.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	var logTail tail
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{guestInitArg0}
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = io.MultiWriter(stderr, &logTail), io.MultiWriter(stderr, &logTail)
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: guestCloneFlags(spec.Egress), Setsid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, isolationError("permission to create the guest's namespaces", err)
	}
	r.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	leader := cmd.Process.Pid
	kill := func() {
		_ = syscall.Kill(leader, syscall.SIGKILL)
		<-exited
		w.Close()
	}
	if _, err := w.Write(append(raw, '\n')); err != nil {
		kill()
		return nil, fmt.Errorf("configuring the guest's init: %w", err)
	}
	g := &Guest{}
	var netns *os.File
	var nsMu sync.RWMutex
	nsClosed := false
	if spec.Egress {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		g.Ports = map[int]string{spec.HookPort: addr}
		g.Dial = func(ctx context.Context, p int) (net.Conn, error) {
			if p != spec.HookPort {
				return nil, fmt.Errorf("guest port %d has no listener the emulator can reach", p)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	} else {
		netns, err = os.Open("/proc/" + strconv.Itoa(leader) + "/ns/net")
		if err != nil {
			kill()
			return nil, fmt.Errorf("opening the guest's network namespace: %w", err)
		}
		g.Ports = map[int]string{spec.HookPort: "127.0.0.1:" + strconv.Itoa(port)}
		fd := int(netns.Fd())
		g.Dial = func(ctx context.Context, p int) (net.Conn, error) {
			// Held across the dial: once Stop closed the namespace's
			// descriptor its number may name another guest's namespace.
			nsMu.RLock()
			defer nsMu.RUnlock()
			if nsClosed {
				return nil, errors.New("the guest has stopped")
			}
			return dialInNetns(ctx, fd, "127.0.0.1:"+strconv.Itoa(p))
		}
	}
	pidns, err := os.Readlink("/proc/" + strconv.Itoa(leader) + "/ns/pid")
	if err != nil {
		kill()
		if netns != nil {
			netns.Close()
		}
		return nil, fmt.Errorf("reading the guest's PID namespace: %w", err)
	}
	var once sync.Once
	g.Stop = func() {
		once.Do(func() {
			// The init is PID 1 of the guest's namespace: when it dies the
			// kernel kills every other process in it, and the init is reaped
			// only once they are all gone.
			kill()
			if netns != nil {
				nsMu.Lock()
				nsClosed = true
				netns.Close()
				nsMu.Unlock()
			}
			_ = removeState(dir)
		})
	}
	g.Freeze = func() error {
		pids, err := signalPidns(leader, pidns, syscall.SIGSTOP)
		if err != nil {
			return err
		}
		// kill(2) returns before the target stops; the platform's suspend
		// is complete only when the guest is frozen, so wait for it.
		return waitStopped(pids, 5*time.Second)
	}
	g.Thaw = func() error { _, err := signalPidns(leader, pidns, syscall.SIGCONT); return err }

	// Bounded: thirty seconds for the daemon to listen, generous for a
	// loaded machine; a healthy guest listens within tens of milliseconds.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			g.Stop()
			return nil, fmt.Errorf("the guest exited before agentd listened on port %d: %s", spec.HookPort, logTail.String())
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
			return g, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	g.Stop()
	return nil, fmt.Errorf("agentd did not listen on guest port %d within thirty seconds: %s", spec.HookPort, logTail.String())
}

// dialInNetns connects to addr from inside the network namespace nsFD: the
// socket is created on a thread moved into that namespace, and a socket
// stays in the namespace it was made in. The thread is never moved back:
// its goroutine exits still locked, so the runtime throws the thread away
// instead of reusing it for other goroutines.
func dialInNetns(ctx context.Context, nsFD int, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(nsFD, unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("entering the guest's network namespace: %w", err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// signalPidns sends sig to the guest's init and then to every process in
// its PID namespace, scanning /proc until a pass finds none it has not
// signalled (a process forked mid-scan is caught by the next pass).
func signalPidns(leader int, ns string, sig syscall.Signal) ([]int, error) {
	err := syscall.Kill(leader, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = nil
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
		pids = append(pids, pid)
	}
	return pids, err
}

// removeState deletes a MicroVM's state directory. The guest's mounts died
// with its mount namespace; a busy directory is retried briefly.
func removeState(dir string) error {
	var err error
	for i := 0; i < 50; i++ {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// guestInit is PID 1 of a guest. It returns the process's exit status.
func guestInit() int {
	fail := func(step string, err error) int {
		fmt.Fprintf(os.Stderr, "guest init: %s: %v\n", step, err)
		return 1
	}
	ctl := os.NewFile(3, "guest-config")
	if ctl == nil {
		return fail("reading the config", errors.New("no fd 3"))
	}
	// Not handed on: the daemon and everything the guest runs must not hold
	// the emulator's lifeline.
	syscall.CloseOnExec(3)
	line, err := readLine(ctl)
	if err != nil {
		return fail("reading the config", err)
	}
	var cfg guestConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fail("reading the config", err)
	}
	// Nothing the emulator's own parent left open without close-on-exec
	// (a directory, a terminal, a socket) may reach the guest: through
	// /proc/1/fd a directory descriptor is a way out of the guest's root.
	// Only the descriptors the launcher saw are closed: the Go runtime of
	// this process keeps descriptors of its own (cgroup CPU limits).
	for _, fd := range cfg.Inherited {
		if fd > 3 {
			_ = unix.Close(fd)
		}
	}
	if os.Getpid() != 1 {
		// Never set a guest up (and never let identity repair run) outside
		// a fresh PID namespace: that would be the host.
		return fail("checking the namespace", fmt.Errorf("pid %d, want 1", os.Getpid()))
	}
	bin, err := os.Open(cfg.Agentd)
	if err != nil {
		return fail("opening agentd", err)
	}
	if err := buildRoot(cfg); err != nil {
		return fail("building the guest root", err)
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fail("setting the hostname", err)
	}
	if cfg.OwnNet {
		if err := loopbackUp(); err != nil {
			return fail("bringing the loopback up", err)
		}
	}
	// The emulator holds fd 3's other end for the guest's life; its end of
	// file means the emulator is gone, and so is the guest.
	go func() {
		_, _ = io.Copy(io.Discard, ctl)
		os.Exit(137)
	}()
	null, err := os.Open("/dev/null")
	if err != nil {
		return fail("opening /dev/null", err)
	}
	// The capabilities no guest needs leave the bounding set of the thread
	// that forks the daemon, and so every guest process: identity repair
	// keeps what it uses (CAP_SYS_ADMIN for sethostname and its bind mount).
	runtime.LockOSThread()
	if err := dropCapabilities(cfg.OwnNet); err != nil {
		return fail("dropping capabilities", err)
	}
	// The daemon is executed through the descriptor opened before the
	// pivot: its binary need not be inside the guest's tree.
	// The image's WORKDIR is the daemon's cwd, which an exec without a cwd
	// inherits; it is made in the guest's root, as the build would have.
	cwd := "/"
	if cfg.Workdir != "" {
		cwd = filepath.Clean("/" + cfg.Workdir)
		if err := os.MkdirAll(cwd, 0o755); err != nil {
			return fail("making the WORKDIR", err)
		}
	}
	proc, err := os.StartProcess("/proc/self/fd/"+strconv.Itoa(int(bin.Fd())), []string{"agentd"}, &os.ProcAttr{
		Dir: cwd, Env: cfg.Env, Files: []*os.File{null, os.Stdout, os.Stderr},
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return fail("starting agentd", err)
	}
	bin.Close()
	null.Close()
	// Reap everything: the daemon, and every orphan re-parented to PID 1.
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fail("waiting", err)
		}
		if pid == proc.Pid {
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
	}
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

// droppedCapabilities are taken from every guest: with them root inside the
// guest could make a device node for the host's disk, load a kernel module,
// set the host's clock, read the kernel log, or open host files by handle
// (the classic container escape).
var droppedCapabilities = []uintptr{
	unix.CAP_MKNOD, unix.CAP_SYS_MODULE, unix.CAP_SYS_RAWIO, unix.CAP_SYS_TIME, unix.CAP_SYSLOG,
	unix.CAP_DAC_READ_SEARCH, unix.CAP_SYS_BOOT, unix.CAP_MAC_ADMIN, unix.CAP_MAC_OVERRIDE,
	unix.CAP_AUDIT_CONTROL, unix.CAP_WAKE_ALARM, unix.CAP_BLOCK_SUSPEND, unix.CAP_LINUX_IMMUTABLE,
	unix.CAP_SYS_PACCT, unix.CAP_BPF, unix.CAP_PERFMON,
}

// dropCapabilities removes droppedCapabilities (and, for a guest on the
// host's network, CAP_NET_ADMIN and CAP_NET_RAW) from the calling thread's
// bounding set. A capability this kernel does not know is skipped.
func dropCapabilities(ownNet bool) error {
	caps := droppedCapabilities
	if !ownNet {
		caps = append(caps[:len(caps):len(caps)], unix.CAP_NET_ADMIN, unix.CAP_NET_RAW)
	}
	for _, c := range caps {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("capability %d: %w", c, err)
		}
	}
	return nil
}

func readLine(f *os.File) ([]byte, error) {
	var out []byte
	b := make([]byte, 1)
	for len(out) < 1<<20 {
		n, err := f.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				return out, nil
			}
			out = append(out, b[0])
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, errors.New("config line too long")
}

// buildRoot makes the guest's tree and pivots into it. Every mount is made
// in the guest's own mount namespace, private, so nothing propagates to the
// host.
//
// The root is an overlay whose upper layer is <state>/upper. Its lower layer
// is the image's root, or else a skeleton built on a tmpfs (the top-level
// directories, the host's merged-/usr symlinks, the allowed /etc entries),
// with each real host system directory mounted over it as an overlay of its
// own whose writes land in <state>/layers/<dir>. The skeleton lives in
// memory because creating hundreds of small files on disk per launch costs
// more than the whole launch may take.
func buildRoot(cfg guestConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	root := filepath.Join(cfg.State, "root")
	upper := filepath.Join(cfg.State, "upper")
	work := filepath.Join(cfg.State, "work")
	skel := filepath.Join(cfg.State, "skel")
	for _, d := range []string{root, upper, work, skel} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	lower := cfg.ImageRoot
	var sysDirs []string
	if lower == "" {
		if err := unix.Mount("tmpfs", skel, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
			return fmt.Errorf("mounting the skeleton's tmpfs: %w", err)
		}
		var err error
		if sysDirs, err = buildSkeleton(skel); err != nil {
			return fmt.Errorf("building the skeleton: %w", err)
		}
		lower = skel
	}
	if err := overlay(lower, upper, work, root); err != nil {
		return err
	}
	for _, d := range sysDirs {
		lu, lw := filepath.Join(cfg.State, "layers", d, "upper"), filepath.Join(cfg.State, "layers", d, "work")
		for _, p := range []string{lu, lw} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		}
		if err := overlay("/"+d, lu, lw, filepath.Join(root, d)); err != nil {
			return err
		}
	}
	if cfg.ImageRoot != "" {
		// An image may lack any of the mount points; made in the upper layer.
		for _, d := range topDirs {
			if err := os.MkdirAll(filepath.Join(root, d.path), d.mode); err != nil {
				return err
			}
		}
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	if err := readOnlyProc(filepath.Join(root, "proc")); err != nil {
		return err
	}
	if err := unix.Mount("sysfs", filepath.Join(root, "sys"), "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /sys: %w", err)
	}
	if err := buildDev(filepath.Join(root, "dev")); err != nil {
		return fmt.Errorf("building /dev: %w", err)
	}
	// A machine-id of its own from the first instruction, so a guest whose
	// identity repair is off still does not carry the host's (or share the
	// image's).
	id, err := randomHex()
	if err != nil {
		return err
	}
	if err := writeFileReplacing(filepath.Join(root, "etc/machine-id"), id+"\n", 0o444); err != nil {
		return err
	}
	if err := writeFileReplacing(filepath.Join(root, "etc/hostname"), cfg.Hostname+"\n", 0o644); err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root under the new one; detaching
	// it leaves the guest with no path to the host's tree.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host root: %w", err)
	}
	return os.Chdir("/")
}

// topDirs are the guest root's top-level directories (and /var/tmp).
var topDirs = []struct {
	path string
	mode os.FileMode
}{
	{"etc", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"dev", 0o755}, {"tmp", os.ModeSticky | 0o777}, {"run", 0o755},
	{"var", 0o755}, {"var/tmp", os.ModeSticky | 0o777}, {"home", 0o755}, {"root", 0o700}, {"mnt", 0o755}, {"opt", 0o755},
	{"srv", 0o755}, {"media", 0o755},
}

// buildSkeleton fills the tmpfs at skel with the guest's top-level tree and
// returns the host system directories to mount over it.
func buildSkeleton(skel string) ([]string, error) {
	for _, d := range topDirs {
		p := filepath.Join(skel, d.path)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return nil, err
		}
	}
	var dirs []string
	for _, d := range hostSystemDirs {
		fi, err := os.Lstat("/" + d)
		if err != nil {
			continue // not on this host
		}
		target := filepath.Join(skel, d)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink("/" + d)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(link, target); err != nil {
				return nil, err
			}
		case fi.IsDir():
			if err := os.Mkdir(target, 0o755); err != nil {
				return nil, err
			}
			dirs = append(dirs, d)
		}
	}
	if err := copyEtc(filepath.Join(skel, "etc")); err != nil {
		return nil, fmt.Errorf("copying /etc: %w", err)
	}
	return dirs, nil
}

// procReadOnly are the parts of a guest's /proc that write to the host's
// kernel rather than the guest's namespaces: sysctls (kernel.core_pattern
// alone would run a program of the guest's choosing on the host), the
// SysRq trigger, interrupt affinity, bus devices.
var procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus"}

// readOnlyProc bind-mounts each of procReadOnly onto itself read-only. A
// mount may still be made on top of a path inside them, which is how
// identity repair replaces the boot_id.
func readOnlyProc(proc string) error {
	for _, p := range procReadOnly {
		path := filepath.Join(proc, p)
		if _, err := os.Lstat(path); err != nil {
			continue // not on this kernel
		}
		if err := unix.Mount(path, path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding /proc/%s: %w", p, err)
		}
		if err := unix.Mount(path, path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("making /proc/%s read-only: %w", p, err)
		}
	}
	return nil
}

func overlay(lower, upper, work, target string) error {
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay of %s: %w", lower, err)
	}
	return nil
}

// buildDev gives the guest a /dev of its own: a tmpfs with the harmless
// character devices bound from the host, a private devpts and a /dev/shm.
func buildDev(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID, "mode=755,size=65536k"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := filepath.Join(dev, n)
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+n, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("/dev/%s: %w", n, err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	if err := unix.Mount("tmpfs", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("/dev/shm: %w", err)
	}
	for link, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, link)); err != nil {
			return err
		}
	}
	return nil
}

// copyEtc copies the allowed host /etc entries into dst: regular files,
// directories and symlinks as they are (a symlink's target is not
// followed), nothing else.
func copyEtc(dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, name := range etcAllowed {
		src := filepath.Join("/etc", name)
		if _, err := os.Lstat(src); err != nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, name)), 0o755); err != nil {
			return err
		}
		err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("/etc", p)
			out := filepath.Join(dst, rel)
			fi, err := d.Info()
			if err != nil {
				return err
			}
			switch {
			case fi.Mode()&os.ModeSymlink != 0:
				link, err := os.Readlink(p)
				if err != nil {
					return err
				}
				return os.Symlink(link, out)
			case fi.IsDir():
				return os.MkdirAll(out, fi.Mode().Perm())
			case fi.Mode().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				return os.WriteFile(out, b, fi.Mode().Perm())
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func writeFileReplacing(path, content string, mode os.FileMode) error {
	_ = os.Remove(path)
	return os.WriteFile(path, []byte(content), mode)
}

func randomHex() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// loopbackUp sets IFF_UP on lo, the only interface of a fresh network
// namespace, so the daemon can listen and the emulator can dial in.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// waitStopped polls until every pid is stopped (T, t), a zombie or gone,
// bounded by limit.
func waitStopped(pids []int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, pid := range pids {
		for {
			st := procStateOf(pid)
			if st == "T" || st == "t" || st == "Z" || st == "" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the guest's process %d did not stop within %s (state %s)", pid, limit, st)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// procStateOf is the state letter of /proc/PID/stat, or "" for a process
// that is gone.
func procStateOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+3 > len(b) {
		return ""
	}
	return string(b[i+2])
}
