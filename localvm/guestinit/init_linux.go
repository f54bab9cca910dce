//go:build linux

package guestinit

// The guest's side of isolation: what the guest's init (PID 1 of the
// guest's namespaces, run from microvm-guest-init or the emulator's binary) does
// before it starts agentd. Everything here runs inside the guest's user namespace,
// with capabilities over the guest's namespaces only.

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The descriptors the launcher hands the init, after stdin, stdout and
// stderr.
const (
	fdConfig = 3 // the config line, then the emulator's lifeline
	fdAgentd = 4 // the daemon's binary, opened by the emulator
	fdBroker = 5 // dial requests from the emulator
	fdInit   = 6 // the init's own binary, a sealed copy, which it runs from
)

// InitPath is how the launcher executes the guest's init, and how the init
// executes its second stage: the sealed copy the child holds at fdInit,
// never a host path.
var InitPath = "/proc/self/fd/" + strconv.Itoa(fdInit)

// Main runs the guest stage os.Args[0] names and exits; for any other
// argv[0] it returns at once. A binary that links this package calls it
// first thing in main.
func Main() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case InitArg0:
		if got := os.Getenv(ABIEnv); got != ABI {
			fmt.Fprintf(os.Stderr, "guest init: the launcher speaks guest ABI %q and this binary %q\n", got, ABI)
			os.Exit(1)
		}
		os.Exit(guestInit())
	case execArg0:
		os.Exit(guestExec())
	case ProbeArg0:
		os.Exit(probe())
	}
}

// guestExecArg0 is the init's second stage: the first process of the
// nested user namespace (nestedAttr). It takes a mount namespace of its own
// (a copy of the init's, every mount locked), leaves the host's tree, loads
// the syscall filter, drops the capabilities no guest needs from its
// bounding set (full again in a new user namespace), takes a step's ids,
// and executes the guest's program: the daemon, or a build step's command.
// (execArg0).

// loadFilter sets no_new_privs and installs prog on every thread of the
// calling process (TSYNC). An empty program is refused: the daemon never
// runs unfiltered.
func loadFilter(prog []FilterInstruction) error {
	if len(prog) == 0 || len(prog) > 0xffff {
		return fmt.Errorf("the launcher sent a filter of %d instructions", len(prog))
	}
	raw := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		raw[i] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(raw)), Filter: &raw[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("installing the syscall filter: %w", errno)
	}
	return nil
}

// guestInit is PID 1 of a guest. It returns the process's exit status.
func guestInit() int {
	fail := func(step string, err error) int {
		fmt.Fprintf(os.Stderr, "guest init: %s: %v\n", step, err)
		return 1
	}
	// First of all: the guest must never ptrace its init or open its
	// /proc/1/exe, /proc/1/fd or /proc/1/root. A process that is not
	// dumpable is reachable that way only with CAP_SYS_PTRACE over the user
	// namespace it was executed in: the init's own, where no guest process
	// runs (the daemon and steps get a namespace nested in it; nestedAttr).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail("making the init undumpable", err)
	}
	ctl := os.NewFile(fdConfig, "guest-config")
	if ctl == nil {
		return fail("reading the config", errors.New("no fd 3"))
	}
	// Not handed on: the daemon and everything the guest runs must not hold
	// the emulator's lifeline or its dial channel.
	for _, fd := range []int{fdConfig, fdAgentd, fdBroker, fdInit, FDNet} {
		syscall.CloseOnExec(fd) // FDNet may be absent: harmless
	}
	// fd 3 carries the config line, then an empty line once the launcher
	// has placed this init in the guest's cgroups, then nothing until the
	// launcher's end closes.
	ctlR := bufio.NewReaderSize(ctl, 64<<10)
	line, err := readLine(ctlR)
	if err != nil {
		return fail("reading the config", err)
	}
	var cfg Config
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fail("reading the config", err)
	}
	// Nothing the emulator's own parent left open without close-on-exec
	// (a directory, a terminal, a socket) may reach the guest: through
	// /proc/1/fd a directory descriptor is a way out of the guest's root.
	// Only the descriptors the launcher saw are closed, never one this
	// process opened itself.
	for _, fd := range cfg.Inherited {
		if fd > fdInit && (cfg.Network == nil || fd != FDNet) {
			_ = unix.Close(fd)
		}
	}
	if os.Getpid() != 1 {
		// Never set a guest up (and never let identity repair run) outside
		// a fresh PID namespace: that would be the host.
		return fail("checking the namespace", fmt.Errorf("pid %d, want 1", os.Getpid()))
	}
	null, err := os.Open("/dev/null")
	if err != nil {
		return fail("opening /dev/null", err)
	}
	// The init's own /proc becomes its PID namespace's before it starts a
	// process in a user namespace: the runtime writes the child's id maps
	// at /proc/<pid>, and <pid> is a pid of the guest's namespace.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail("mounting the init's /proc", err)
	}
	// Every guest process is started through guestExec, from the init's
	// own sealed binary (fdInit), in the nested namespaces. It starts while
	// the init builds the root (once the init is in its cgroups, below),
	// and from the host's tree, so an emulator linked dynamically finds its
	// loader; it
	// waits on fd 3 for what to run, then takes its mount namespace and
	// leaves the host's tree itself (guestExec).
	attr, err := nestedAttr()
	if err != nil {
		return fail("reading the init's id maps", err)
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return fail("making the second stage's pipe", err)
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		return fail("making the second stage's pipe", err)
	}
	env := cfg.Env
	// Closed through this *os.File only: a second File for fd 4, or a bare
	// close(4), would close whatever the number names by then (a dial).
	agentd := os.NewFile(fdAgentd, "agentd")
	files := []*os.File{null, os.Stdout, os.Stderr, goR, ackW, agentd}
	what := "agentd"
	if st := cfg.Step; st != nil {
		env, files, what = st.Env, files[:5], "the step's command "+st.Argv[0]
	}
	// The second stage starts once the launcher says this init is in the
	// guest's cgroups (a process is placed with its threads, not its
	// children: one forked before would run the daemon outside its
	// limits); the launcher places it while the root is built here, which
	// is the emulator's work, not the guest's.
	type started struct {
		proc *os.Process
		err  error
	}
	second := make(chan started, 1)
	go func() {
		if b, err := ctlR.ReadByte(); err != nil || b != '\n' {
			second <- started{err: fmt.Errorf("waiting for the launcher to place the guest in its cgroups: %q, %v", b, err)}
			return
		}
		p, err := os.StartProcess(InitPath, []string{execArg0}, &os.ProcAttr{
			Dir: "/", Env: env, Files: files, Sys: attr,
		})
		second <- started{p, err}
	}()
	root, err := buildRoot(cfg)
	if err != nil {
		return fail("building the guest root", err)
	}
	st := <-second
	goR.Close()
	ackW.Close()
	if st.err != nil {
		return fail("starting "+what, st.err)
	}
	proc := st.proc
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fail("setting the hostname", err)
	}
	if err := loopbackUp(); err != nil {
		return fail("bringing the loopback up", err)
	}
	if cfg.Network != nil {
		// Before the daemon may start (goW below): the guest's only link
		// is the policy's from its first instruction.
		if err := setupGuestNetwork(root, cfg.Network); err != nil {
			return fail("setting up the guest's network under its policy", err)
		}
	}
	// The emulator holds fd 3's other end for the guest's life; its end of
	// file means the emulator is gone, and so is the guest.
	go func() {
		_, _ = io.Copy(io.Discard, ctlR)
		os.Exit(137)
	}()
	go serveBroker(fdBroker)
	run := execSpec{Root: root, Dir: cfg.Workdir, Argv: []string{"agentd"}, Filter: cfg.Filter}
	if st := cfg.Step; st != nil {
		// A build step: the image's command as the image's user, its
		// output the step's output; nothing of the emulator's is run.
		run = execSpec{Root: root, Dir: st.Dir, Path: st.Argv[0], Argv: st.Argv, Step: true, UID: st.UID, GID: st.GID, Groups: st.Groups, Filter: cfg.Filter}
	}
	raw, err := json.Marshal(run)
	if err == nil {
		_, err = goW.Write(append(raw, '\n'))
	}
	goW.Close()
	if err != nil {
		return fail("starting "+what, err)
	}
	// The second stage copies this namespace's tree, host's and guest's,
	// before the init lets go of the host's: it says so by closing its end
	// (or by dying, which the reaping below sees).
	_, _ = ackR.Read(make([]byte, 1))
	ackR.Close()
	if err := enterRoot(root); err != nil {
		return fail("entering the guest root", err)
	}
	_ = unix.Close(fdInit)
	agentd.Close()
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
			status := ws.ExitStatus()
			if ws.Signaled() {
				status = 128 + int(ws.Signal())
			}
			if cfg.Step != nil && stepUpper >= 0 {
				return stepEnded(ctl, status)
			}
			return status
		}
	}
}

// execSpec is what guestExec runs, as a JSON line on its fd 3. Its fd 4 is
// the init's wait: closed once guestExec has its mount namespace.
type execSpec struct {
	Root string // the guest's root, as the init built it
	Dir  string // the working directory inside it, made if missing ("" is /)
	// Path is the program: for a step, a name looked up in the step's PATH
	// inside the guest's root; "" is the descriptor at fd 5 (agentd).
	Path     string
	Argv     []string
	Step     bool // take UID, GID and Groups before the exec
	UID, GID uint32
	Groups   []uint32
	// Filter is the syscall filter the launcher assembled (Config.Filter).
	Filter []FilterInstruction
}

// guestExec is the second stage's whole life: it returns only on failure,
// with the exit status a shell gives a command it cannot run.
func guestExec() int {
	fail := func(step string, err error) int {
		fmt.Fprintf(os.Stderr, "guest init: %s: %v\n", step, err)
		return 127
	}
	// One thread does it all: its mount namespace, root, cwd and bounding
	// set are its own, and it is the thread that executes the program.
	runtime.LockOSThread()
	spec3 := os.NewFile(3, "guest-exec")
	line, err := readLine(bufio.NewReaderSize(spec3, 64<<10))
	spec3.Close()
	if err != nil {
		return fail("reading what to run", err)
	}
	var spec execSpec
	if err := json.Unmarshal(line, &spec); err != nil || len(spec.Argv) == 0 {
		return fail("reading what to run", fmt.Errorf("malformed: %v", err))
	}
	// A copy of the init's tree as it is now, guest root and all: each
	// mount arrives locked, as a less privileged namespace's copy of a more
	// privileged one's.
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fail("making the guest's mount namespace", err)
	}
	_ = unix.Close(4) // the init may now leave the host's tree
	if err := enterRoot(spec.Root); err != nil {
		return fail("entering the guest root", err)
	}
	if err := loadFilter(spec.Filter); err != nil {
		return fail("loading the syscall filter", err)
	}
	if err := dropCapabilities(); err != nil {
		return fail("dropping capabilities", err)
	}
	// The image's WORKDIR is the daemon's cwd; it is made in the guest's
	// root, as the build would have.
	dir := filepath.Clean("/" + spec.Dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("making the WORKDIR", err)
	}
	if err := os.Chdir(dir); err != nil {
		return fail("entering the WORKDIR", err)
	}
	path := spec.Path
	if spec.Step {
		path = lookStepPath(path, os.Environ())
		if spec.UID != 0 || len(spec.Groups) > 0 {
			groups := make([]int, len(spec.Groups))
			for i, g := range spec.Groups {
				groups[i] = int(g)
			}
			if err := syscall.Setgroups(groups); err != nil {
				return fail("setting the step's groups", err)
			}
		}
		if err := syscall.Setgid(int(spec.GID)); err != nil {
			return fail("setting the step's gid", err)
		}
		if err := syscall.Setuid(int(spec.UID)); err != nil {
			return fail("setting the step's uid", err)
		}
	}
	if path == "" {
		path = "/proc/self/fd/5"
		syscall.CloseOnExec(5)
	}
	err = unix.Exec(path, spec.Argv, os.Environ())
	return fail("starting "+spec.Argv[0], err)
}

// nestedAttr starts a guest process (the daemon, a build step) in a user
// namespace nested in the init's, mapping the same ids onto themselves,
// with UTS, IPC and cgroup namespaces of its own (and, made by guestExec
// once the init has built the root, a mount namespace).
//
// The nesting is what locks the guest's mounts: every mount the init made
// (the root, the read-only system directories, /proc's read-only and masked
// paths) is copied into a mount namespace owned by a less privileged user
// namespace, so the kernel marks each locked (MNT_LOCKED, and its
// read-only, nosuid, nodev and noexec flags likewise): guest root can mount
// over them but neither remount them writable nor unmount them to see what
// they cover. It also keeps the init out of the guest's reach: guest root
// holds no capability in the init's user namespace, so it cannot ptrace
// the undumpable init. The PID and network namespaces stay the init's (its
// reaping and its dials reach the guest); the UTS, IPC and cgroup ones are
// the guest's to change, as identity repair renames its host.
func nestedAttr() (*syscall.SysProcAttr, error) {
	uids, err := identityMap("/proc/self/uid_map")
	if err != nil {
		return nil, err
	}
	gids, err := identityMap("/proc/self/gid_map")
	if err != nil {
		return nil, err
	}
	setgroups, err := os.ReadFile("/proc/self/setgroups")
	if err != nil {
		return nil, err
	}
	return &syscall.SysProcAttr{
		Setsid:      true,
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP,
		UidMappings: uids, GidMappings: gids,
		GidMappingsEnableSetgroups: strings.TrimSpace(string(setgroups)) == "allow",
	}, nil
}

// identityMap maps each range of ids the init's namespace has onto itself.
func identityMap(path string) ([]syscall.SysProcIDMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []syscall.SysProcIDMap
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		inside, err1 := strconv.Atoi(f[0])
		size, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: %q", path, line)
		}
		out = append(out, syscall.SysProcIDMap{ContainerID: inside, HostID: inside, Size: size})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	return out, nil
}

// stepUpper is a build step's upper layer, held from before the pivot.
var stepUpper = -1

// stepEnded ends every process the step left, makes the step's upper layer
// this init's cwd (the emulator reads it as /proc/<init>/cwd, the tmpfs
// being reachable from no other path) and tells the emulator the step's
// status on the control socket; the init then lives until the emulator
// closes it, having taken the layer.
func stepEnded(ctl *os.File, status int) int {
	_ = unix.Kill(-1, unix.SIGKILL) // PID 1: every other process of the guest
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			break // ECHILD: nothing is left to change the layer
		}
	}
	if err := unix.Fchdir(stepUpper); err != nil {
		fmt.Fprintf(os.Stderr, "guest init: entering the step's layer: %v\n", err)
		return 1
	}
	if _, err := fmt.Fprintf(ctl, "%d\n", status); err != nil {
		return 1
	}
	select {} // the lifeline's end exits the init
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

// dropCapabilities removes droppedCapabilities from the calling thread's
// bounding set. They are the guest namespace's capabilities only, but a
// guest needs none of them, and a kernel bug reachable through one is a
// kernel bug out of reach. A capability this kernel does not know is
// skipped.
func dropCapabilities() error {
	for _, c := range droppedCapabilities {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("capability %d: %w", c, err)
		}
	}
	return nil
}

// readLine reads one line of at most 1 MiB from r: the config, which
// holds the syscall filter (tens of KiB; never a byte per read), or the
// second stage's spec.
func readLine(r *bufio.Reader) ([]byte, error) {
	var out []byte
	for len(out) < 1<<20 {
		chunk, err := r.ReadSlice('\n')
		out = append(out, chunk...)
		if err == nil {
			return out[:len(out)-1], nil
		}
		if err != bufio.ErrBufferFull {
			return nil, err
		}
	}
	return nil, errors.New("config line too long")
}

// buildRoot makes the guest's tree and pivots into it. Every mount is made
// in the guest's own mount namespace, private, so nothing propagates to the
// host.
//
// Everything the guest can write lives on one tmpfs mounted over its state
// directory, cfg.WritableBytes large: a guest that fills it gets ENOSPC, and
// the host's disk never sees its writes. With an image, the root is an
// overlay of the image's root (read through the directory the emulator
// passed) under an upper layer on that tmpfs. Without one, the root is the
// tmpfs itself, holding the top-level directories and a copy of the allowed
// /etc entries, with each host system directory bound read-only over its
// mount point: the guest's root is not the host's root, so the host's files
// are not the guest's to change.
func buildRoot(cfg Config) (string, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("making mounts private: %w", err)
	}
	rw := filepath.Join(cfg.State, "rw")
	opts := fmt.Sprintf("mode=755,size=%d", cfg.WritableBytes)
	if err := unix.Mount("tmpfs", rw, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mounting the writable layer: %w", err)
	}
	root := filepath.Join(rw, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", err
	}
	if cfg.ImageRoot != "" && cfg.Step != nil {
		// A build step: the upper layer is on the writable tmpfs, bounded
		// as a run-time guest's is, never on the host's disk (issue 44.4);
		// the emulator reads the step's changes through the init's cwd once
		// the step has ended (stepEnded). /etc is the image's own: its
		// changes are the step's too.
		upper, work := filepath.Join(rw, "upper"), filepath.Join(rw, "work")
		for _, d := range []string{upper, work} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return "", err
			}
		}
		fd, err := unix.Open(upper, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("holding the step's upper layer: %w", err)
		}
		stepUpper = fd
		if err := overlay(cfg.ImageRoot, upper, work, root, "userxattr"); err != nil {
			return "", err
		}
		// Only the mount points: anything else the step makes is its own.
		for _, d := range []string{"proc", "sys", "dev"} {
			p := filepath.Join(root, d)
			if _, err := os.Lstat(p); err == nil {
				continue
			}
			if err := os.Mkdir(p, 0o555); err != nil {
				return "", fmt.Errorf("the image lacks /%s and the step cannot make it: %w", d, err)
			}
		}
	} else if cfg.ImageRoot != "" {
		upper, work := filepath.Join(rw, "upper"), filepath.Join(rw, "work")
		for _, d := range []string{upper, work} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return "", err
			}
		}
		if err := overlay(cfg.ImageRoot, upper, work, root); err != nil {
			return "", err
		}
		// The image's files belong to host ids the guest's user namespace
		// may not map, and overlayfs cannot copy such a file up: they are
		// read-only to the guest. Its /etc must be the guest's to write
		// (identity repair, users, resolvers), so a copy of it on the
		// writable layer is bound over it.
		etc := filepath.Join(rw, "etc")
		if err := copyTree(filepath.Join(root, "etc"), etc); err != nil {
			return "", fmt.Errorf("copying the image's /etc: %w", err)
		}
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("the image has no /etc to cover: %w", err)
		}
		if err := unix.Mount(etc, filepath.Join(root, "etc"), "", unix.MS_BIND, ""); err != nil {
			return "", fmt.Errorf("binding the guest's /etc: %w", err)
		}
		// An image may lack any of the mount points; made in the upper layer
		// where the image's directory lets the guest.
		for _, d := range topDirs {
			p := filepath.Join(root, d.path)
			if _, err := os.Lstat(p); err == nil {
				continue
			}
			if err := os.MkdirAll(p, d.mode); err != nil {
				return "", fmt.Errorf("the image lacks /%s and the guest cannot make it: %w", d.path, err)
			}
		}
	} else {
		sysDirs, err := buildSkeleton(root)
		if err != nil {
			return "", fmt.Errorf("building the skeleton: %w", err)
		}
		for _, d := range sysDirs {
			if err := bindReadOnly("/"+d, filepath.Join(root, d)); err != nil {
				return "", err
			}
		}
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", fmt.Errorf("mounting /proc: %w", err)
	}
	if err := readOnlyProc(filepath.Join(root, "proc")); err != nil {
		return "", err
	}
	if err := unix.Mount("sysfs", filepath.Join(root, "sys"), "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", fmt.Errorf("mounting /sys: %w", err)
	}
	if err := maskPaths(root); err != nil {
		return "", err
	}
	if err := buildDev(filepath.Join(root, "dev")); err != nil {
		return "", fmt.Errorf("building /dev: %w", err)
	}
	// A machine-id of its own from the first instruction, so a guest whose
	// identity repair is off still does not carry the host's (or share the
	// image's). A build step writes neither: they would become the image's.
	if cfg.Step == nil {
		id, err := randomHex()
		if err != nil {
			return "", err
		}
		if err := writeFileReplacing(filepath.Join(root, "etc/machine-id"), id+"\n", 0o444); err != nil {
			return "", err
		}
		if err := writeFileReplacing(filepath.Join(root, "etc/hostname"), cfg.Hostname+"\n", 0o644); err != nil {
			return "", err
		}
	}
	return root, nil
}

// enterRoot makes root the calling process's root and detaches the host's
// tree from its mount namespace. The init does it in its own namespace, and
// guestExec in the guest's nested one (each namespace has its copy of the
// host's tree to let go of).
func enterRoot(root string) error {
	// pivot_root needs the new root to be a mount point, and one the
	// caller's namespace made (in the nested namespace the overlay is a
	// locked copy): a fresh recursive bind of it is both. pivot_root hands
	// the lock of the old root to the new one, so the old can be detached.
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding the root onto itself: %w", err)
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

// bindReadOnly binds the host directory src, with every mount beneath it,
// onto dst, and makes each of them read-only, nosuid and nodev (a mount
// the host has under /usr arrives no more writable than /usr). The host
// mounts' other flags (noexec, their atime mode) are kept: a user namespace
// may add restrictions to a mount it did not make, never lift them. The
// guest's processes see these mounts locked (nestedAttr).
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s: %w", src, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW, &attr); err != nil {
		return fmt.Errorf("making %s and every mount under it read-only (mount_setattr, Linux 5.12 or later): %w", dst, err)
	}
	return nil
}

// maskedPaths are hidden from every guest, as runc hides them from a
// container: kernel memory, the host's keyrings, timer and scheduler state
// that leak what other tenants do, firmware tables. A file is covered by
// /dev/null, a directory by an empty read-only tmpfs.
var maskedPaths = []string{
	"proc/acpi", "proc/asound", "proc/kcore", "proc/keys", "proc/latency_stats", "proc/timer_list",
	"proc/timer_stats", "proc/sched_debug", "proc/scsi", "sys/firmware", "sys/devices/virtual/powercap",
}

func maskPaths(root string) error {
	for _, rel := range maskedPaths {
		p := filepath.Join(root, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			continue // not on this kernel
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0")
		} else {
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("masking /%s: %w", rel, err)
		}
	}
	return nil
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
var procReadOnly = []string{"bus", "fs", "irq", "sys", "sysrq-trigger"}

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

func overlay(lower, upper, work, target string, extra ...string) error {
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	for _, o := range extra {
		opts += "," + o
	}
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
	// Two at a time: the copy is system calls on a tmpfs, about 680
	// symlinks, and while the init builds the root the other core mostly
	// waits (the launcher's cgroup attach, the second stage's start).
	// 8.1 ms one at a time on this host's /etc.
	names := make(chan string, len(etcAllowed))
	for _, name := range etcAllowed {
		names <- name
	}
	close(names)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for name := range names {
				src := filepath.Join("/etc", name)
				if _, err := os.Lstat(src); err != nil {
					continue
				}
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, name)), 0o755); err != nil {
					errs <- err
					return
				}
				if err := copyTree(src, filepath.Join(dst, name)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	return errors.Join(<-errs, <-errs)
}

// copyTree copies src to dst: regular files, directories and symlinks as
// they are (a symlink's target is not followed), nothing else; a src that
// does not exist leaves an empty directory at dst. A file the guest cannot
// read is skipped: it stays the image's, out of the guest's reach.
func copyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dst, 0o755)
	}
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(link, dst)
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(src)
		if errors.Is(err, os.ErrPermission) {
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, fi.Mode().Perm())
	case !fi.IsDir():
		return nil
	}
	if err := os.MkdirAll(dst, fi.Mode().Perm()|0o700); err != nil {
		return err
	}
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return copyDirAt(sfd, dfd, src)
}

// copyDirAt copies the entries of the directory open at sfd into the one
// open at dfd, each named relative to its directory's descriptor: most of a
// host's copied /etc is symlinks (alternatives, ssl/certs, about 680 of
// 713 entries), and resolving the guest root's long path for each took most
// of the copy. src names sfd in errors.
func copyDirAt(sfd, dfd int, src string) error {
	// ReadDir through a duplicate: the File closes what it holds.
	dup, err := unix.Dup(sfd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), src)
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	buf := make([]byte, unix.PathMax)
	for _, e := range entries {
		name := e.Name()
		switch t := e.Type(); {
		case t&fs.ModeSymlink != 0:
			n, err := unix.Readlinkat(sfd, name, buf)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", src, name, err)
			}
			if err := unix.Symlinkat(string(buf[:n]), dfd, name); err != nil {
				return fmt.Errorf("%s/%s: %w", src, name, err)
			}
		case t.IsDir():
			var st unix.Stat_t
			if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("%s/%s: %w", src, name, err)
			}
			if err := unix.Mkdirat(dfd, name, (st.Mode&0o777)|0o700); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("%s/%s: %w", src, name, err)
			}
			csfd, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", src, name, err)
			}
			cdfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Close(csfd)
				return fmt.Errorf("%s/%s: %w", src, name, err)
			}
			err = copyDirAt(csfd, cdfd, src+"/"+name)
			unix.Close(csfd)
			unix.Close(cdfd)
			if err != nil {
				return err
			}
		case t.IsRegular():
			if err := copyFileAt(sfd, dfd, name); err != nil {
				return fmt.Errorf("%s/%s: %w", src, name, err)
			}
		}
	}
	return nil
}

// copyFileAt copies the regular file name from sfd's directory to dfd's,
// with its permission bits; one the guest cannot read is skipped.
func copyFileAt(sfd, dfd int, name string) error {
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return nil
	}
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(in), name)
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	out, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(fi.Mode().Perm()))
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(out), name)
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
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

// lookStepPath resolves a step's command as the image's shell would: a name
// without a slash is searched in the step's PATH inside the guest's root.
func lookStepPath(name string, env []string) string {
	if name == "" || strings.Contains(name, "/") {
		return name
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join("/", dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}
