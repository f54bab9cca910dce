//go:build linux

package localvm

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testvm"
	"golang.org/x/sys/unix"
)

// The escape suite: each test is an attack a hostile guest made on the
// emulator's confinement before guests had user namespaces, filters and
// limits, and asserts that it now fails. None writes the host's /proc/sys,
// core_pattern, sysrq or an existing cgroup: a payload that would run on
// the host only creates a marker under the test's own temporary directory.

// directGuest launches spec with the confining launcher and returns it with
// a session straight to its agentd (no control plane: the spec carries
// what the tests vary, the size class and the writable layer's size).
func directGuest(t *testing.T, spec GuestSpec) (*Guest, *client.Session) {
	t.Helper()
	if err := CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	if spec.HookPort == 0 {
		spec.HookPort = taxonomy.DefaultAgentPort
	}
	if spec.MicrovmID == "" {
		spec.MicrovmID = "microvm-escape-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	g, err := AgentdLauncher(agentdBin, nil)(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	body, _ := json.Marshal(map[string]string{"runHookPayload": testvm.Payload()})
	if reason := postRunHook(t.Context(), g.RoundTripper(loopback), "127.0.0.1:"+strconv.Itoa(spec.HookPort), body, 10*time.Second); reason != "" {
		t.Fatal(reason)
	}
	sess, err := client.Direct("http://127.0.0.1:"+strconv.Itoa(spec.HookPort), testvm.AgentToken, client.WithHTTPClient(&http.Client{Transport: g.RoundTripper(loopback)}))
	if err != nil {
		t.Fatal(err)
	}
	return g, sess
}

// Catches: guest root that is host root (the one-step escape: mount a fresh
// cgroup-v1 hierarchy, point its release_agent at a script in the guest's
// writable layer, whose host path /proc/self/mountinfo showed, and let a
// cgroup empty: the kernel ran the script as root in the host's mount
// namespace). The payload only creates a marker under this test's
// directory; the mount must fail before any of it runs.
func TestEscapeCgroupV1ReleaseAgent(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "release-agent-ran")
	_, sess := directGuest(t, GuestSpec{})
	script := `set -e
mkdir -p /tmp/cg
if ! mount -t cgroup -o none,name=mvescape` + strconv.Itoa(os.Getpid()) + ` cgroup /tmp/cg 2>/tmp/mount.err; then echo refused; cat /tmp/mount.err; exit 0; fi
upper=$(sed -n 's/.*upperdir=\([^,]*\).*/\1/p' /proc/self/mountinfo | head -1)
printf '#!/bin/sh\ntouch ` + marker + `\n' > /payload.sh; chmod +x /payload.sh
echo "$upper/payload.sh" > /tmp/cg/release_agent
mkdir -p /tmp/cg/x; echo 1 > /tmp/cg/x/notify_on_release
sh -c 'echo $$ > /tmp/cg/x/cgroup.procs'
sleep 1; rmdir /tmp/cg/x; umount /tmp/cg; echo mounted`
	code, out := testvm.Sh(t, sess, script)
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the release_agent payload ran on the host: %s", out)
	}
	if code != 0 || !strings.HasPrefix(out, "refused") {
		t.Fatalf("guest root mounted a cgroup-v1 hierarchy: %d %s", code, out)
	}
}

// Catches: guest root mounting the kernel's global interfaces (debugfs,
// tracefs, bpf, securityfs: none is namespaced), and proc, sysfs or cgroup2
// mounts that show the host's view rather than the guest's own.
func TestEscapeFilesystemMounts(t *testing.T) {
	_, sess := directGuest(t, GuestSpec{})
	for _, fs := range []string{"debugfs", "tracefs", "bpf", "securityfs"} {
		if code, out := testvm.Sh(t, sess, "mkdir -p /tmp/m-"+fs+" && mount -t "+fs+" none /tmp/m-"+fs); code == 0 {
			t.Errorf("guest root mounted %s: %s", fs, out)
		}
	}
	// What it may mount is its own: its processes, its interfaces, its
	// cgroup tree.
	if code, out := testvm.Sh(t, sess, "mkdir -p /tmp/p && mount -t proc proc /tmp/p && ls /tmp/p | grep -c '^[0-9]'"); code == 0 {
		if n, _ := strconv.Atoi(strings.TrimSpace(out)); n == 0 || n > 20 {
			t.Errorf("a proc the guest mounted shows %d processes, want its own few", n)
		}
	}
	if code, out := testvm.Sh(t, sess, "mkdir -p /tmp/s && mount -t sysfs sysfs /tmp/s && ls /tmp/s/class/net"); code == 0 {
		if strings.TrimSpace(out) != "lo" {
			t.Errorf("a sysfs the guest mounted shows the interfaces %q, want its own lo", out)
		}
	}
	if got := testvm.MustSh(t, sess, "cut -d: -f3 /proc/self/cgroup | sort -u | tr '\\n' ' '"); strings.TrimSpace(got) != "/" {
		t.Errorf("the guest sees its cgroups as %q, want / (a cgroup namespace of its own)", got)
	}
	// A rootless emulator on a cgroup v1 host has no unified group of its
	// own to place the guest in (the unified root is root's), so there the
	// guest's cgroup2 view starts at the emulator's own group.
	if os.Geteuid() != 0 && !testvm.CgroupV2Only() {
		return
	}
	if code, out := testvm.Sh(t, sess, "mkdir -p /tmp/c2 && mount -t cgroup2 none /tmp/c2 && find /tmp/c2 -mindepth 1 -type d | head -5"); code == 0 && strings.TrimSpace(out) != "" {
		t.Errorf("a cgroup2 the guest mounted shows groups beyond its own: %s", out)
	}
}

// Catches: a guest that reads the host's keyrings, sees a uid map onto host
// root, or can call the kernel interfaces Docker's profile keeps from
// containers. Each call the probe makes succeeds for an unfiltered
// unprivileged process on this host, so EPERM can only be the filter's.
func TestEscapeKeysUIDMapAndFilteredSyscalls(t *testing.T) {
	_, sess := directGuest(t, GuestSpec{})
	if got := testvm.MustSh(t, sess, "cat /proc/keys | wc -c"); got != "0" {
		t.Errorf("the guest reads %s bytes of /proc/keys, want none", got)
	}
	// Read from the host: inside, the map of the guest's nested namespace
	// shows ids of the init's, not of the host's.
	init := testvm.GuestInitOf(t, GuestInitArg0)
	hostPID := 0
	for _, p := range procsInPidnsOf(t, init) {
		if p != init {
			hostPID = p // agentd, or a command it runs
		}
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", hostPID))
	if fields := strings.Fields(string(raw)); err != nil || len(fields) < 3 || fields[0] != "0" || fields[1] == "0" {
		t.Errorf("the guest's uid map seen from the host is %q (%v), want its root mapped to a host uid other than 0", fields, err)
	}
	for _, p := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches"} {
		if code, _ := testvm.Sh(t, sess, "test -w "+p); code == 0 {
			t.Errorf("the guest can write the host kernel's %s", p)
		}
	}
	testvm.WithProbe(t, sess)
	out := testvm.MustSh(t, sess, "/tmp/escapeprobe syscalls")
	for _, name := range []string{"keyctl", "add_key", "userfaultfd", "perf_event_open", "io_uring_setup"} {
		if !strings.Contains(out, name+" EPERM") {
			t.Errorf("%s in the guest: want EPERM from the filter; the probe said:\n%s", name, out)
		}
	}
	if got := testvm.MustSh(t, sess, "grep NoNewPrivs /proc/self/status | cut -f2"); got != "1" {
		t.Errorf("NoNewPrivs is %q in the guest, want 1", got)
	}
}

// Catches: a guest whose memory is unbounded (it touched 2 GiB and more of
// the host's), and a memory limit that takes the guest down rather than
// the process that exceeded it. The smallest size class reports a 2 GiB
// peak; the hog asks for 3 GiB.
func TestEscapeMemoryHogIsKilledInsideItsLimit(t *testing.T) {
	g, sess := directGuest(t, GuestSpec{MemoryMiB: 512})
	if !slicesContainPrefix(g.Limits.Applied, "memory") {
		t.Skipf("no memory limit on this host: %v", g.Limits.Missing)
	}
	testvm.WithProbe(t, sess)
	// Touching 2 GiB page by page is the machine's speed, not the guest's:
	// a loaded host has taken over 30 s, so the hog gets a deadline of its own.
	code, out := testvm.ShWithin(t, sess, "/tmp/escapeprobe hog 3072; echo status=$?", 5*time.Minute)
	if code != 0 || strings.Contains(out, "survived") || !strings.Contains(out, "status=137") {
		t.Fatalf("a 3 GiB hog in a 2 GiB guest: %d %q, want it killed (137)", code, out)
	}
	if got := testvm.MustSh(t, sess, "echo alive"); got != "alive" {
		t.Fatalf("the guest did not carry on after its hog was killed: %q", got)
	}
}

// Catches: an unbounded process table (a guest ran 300 and more processes
// with no ceiling). The storm asks for more than LocalGuestMaxPids; at most
// the limit exist at once, and the guest answers afterwards.
func TestEscapeProcessStormIsBounded(t *testing.T) {
	g, sess := directGuest(t, GuestSpec{})
	if !slicesContainPrefix(g.Limits.Applied, "pids") {
		t.Skipf("no process limit on this host: %v", g.Limits.Missing)
	}
	testvm.WithProbe(t, sess)
	// The storm forks thousands of processes: on a loaded two-core host that
	// alone has taken over 30 s, so it gets a deadline of its own.
	code, out := testvm.ShWithin(t, sess, fmt.Sprintf("/tmp/escapeprobe storm %d", taxonomy.LocalGuestMaxPids+200), 5*time.Minute)
	if code != 0 {
		t.Fatalf("the storm probe exited %d: %s", code, out)
	}
	out = strings.TrimSpace(out)
	var n int
	if _, err := fmt.Sscanf(out, "started %d", &n); err != nil || n < taxonomy.LocalGuestMaxPids/2 || n >= taxonomy.LocalGuestMaxPids {
		t.Fatalf("the storm: %q, want it stopped by the limit (%d)", out, taxonomy.LocalGuestMaxPids)
	}
	if got := testvm.MustSh(t, sess, "echo alive"); got != "alive" {
		t.Fatalf("the guest did not answer after the storm: %q", got)
	}
}

// Catches: inotify instances charged to host root (a guest holding 100
// watches left a root process on the host 28). The guest opens instances
// until its own allowance runs out; this process, root or not, still opens
// one afterwards.
func TestEscapeInotifyExhaustionStaysInTheGuest(t *testing.T) {
	_, sess := directGuest(t, GuestSpec{})
	testvm.WithProbe(t, sess)
	testvm.MustSh(t, sess, "(setsid /tmp/escapeprobe inotify 100000 >/tmp/ino.out 2>&1 &); true")
	var out string
	for i := 0; i < 200; i++ { // bounded: about ten seconds
		out = testvm.MustSh(t, sess, "cat /tmp/ino.out")
		if strings.HasPrefix(out, "opened") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasPrefix(out, "opened") {
		t.Fatalf("the probe did not report: %q", out)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("with the guest's instances open (%s), this process cannot open one: %v", out, err)
	}
	unix.Close(fd)
}

// Catches: a guest that writes without bound into the host's disk (1 GiB
// into the host's /tmp): the writable layer is bounded, ENOSPC inside.
func TestEscapeWritableLayerIsBounded(t *testing.T) {
	_, sess := directGuest(t, GuestSpec{WritableMiB: 32})
	code, out := testvm.Sh(t, sess, "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; echo status=$?")
	if code != 0 || !strings.Contains(out, "No space left on device") {
		t.Fatalf("64 MiB into a 32 MiB writable layer: %d %q, want ENOSPC", code, out)
	}
	if got := testvm.MustSh(t, sess, "rm /tmp/fill && echo ok > /tmp/after && cat /tmp/after"); got != "ok" {
		t.Fatalf("the guest cannot write after freeing its layer: %q", got)
	}
}

// Catches: one guest seeing another's processes (and so its agent token in
// its environment or memory).
func TestEscapeGuestsCannotSeeEachOther(t *testing.T) {
	_, a := directGuest(t, GuestSpec{Env: map[string]string{"MARKER_A": "guest-a-secret"}})
	_, b := directGuest(t, GuestSpec{})
	testvm.MustSh(t, a, "(setsid sleep 300 </dev/null >/dev/null 2>&1 &); true")
	if out := testvm.MustSh(t, b, "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c guest-a-secret; true"); out != "0" {
		t.Errorf("guest b found guest a's environment: %s", out)
	}
}

func slicesContainPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// Catches: the launcher's clone thread (whose effective ids are the guest
// owner's for the clone) handed back to the runtime with those ids, or left
// wedged as the process's main thread: the emulator's own /proc entries
// would then belong to a guest's uid. Every thread of this process must be
// root, or whoever started it, after launches.
func TestLaunchLeavesEveryThreadAsItWas(t *testing.T) {
	for i := 0; i < 4; i++ {
		directGuest(t, GuestSpec{})
	}
	want := fmt.Sprintf("%d", os.Geteuid())
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") && (f[1] != want && f[0] == "Uid:" || f[2] != f[1] || f[3] != f[1]) {
				t.Errorf("%s: %s", p, line)
			}
		}
	}
}

// Catches: cgroups left behind by an emulator killed without its teardown
// (SIGKILL), which no later run removes. A group named for a dead emulator
// is swept; one of a live emulator (this process) is kept.
func TestStaleCgroupsOfDeadEmulatorsAreSwept(t *testing.T) {
	paths, err := ownCgroups()
	if err != nil {
		t.Fatal(err)
	}
	rel, ok := paths["pids"]
	if !ok || os.Geteuid() != 0 {
		t.Skip("needs root on a host with a cgroup v1 pids controller")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join("/sys/fs/cgroup/pids", rel)
	stale := filepath.Join(parent, fmt.Sprintf("%s%d-sweep-test-1", cgroupPrefix, dead.Process.Pid))
	live := filepath.Join(parent, fmt.Sprintf("%s%d-sweep-test-2", cgroupPrefix, os.Getpid()))
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(d) })
	}
	sweepStaleCgroups(paths)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead emulator's group %s is still there (%v)", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("this emulator's own group was swept: %v", err)
	}
}

// Catches: a guest that dies while starting (here: a daemon that cannot be
// executed) whose state directory is removed while the image root is still
// bound inside it: the removal would recurse into the image and delete its
// files, for every later guest of the image.
func TestAGuestDyingAtStartLeavesItsImageWhole(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Fatal(err)
	}
	image := t.TempDir()
	marker := filepath.Join(image, "etc", "image-marker")
	if err := os.MkdirAll(filepath.Dir(marker), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(marker, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "agentd")
	if err := os.WriteFile(broken, []byte("not an executable\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := AgentdLauncher(agentdBin, nil)(t.Context(), GuestSpec{MicrovmID: "microvm-dies-at-start", HookPort: 9000, RootDir: image, Daemon: broken})
	if err == nil {
		t.Fatal("a guest whose daemon cannot start was launched")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the image lost its files when the guest died: %v", err)
	}
}

// Catches: a guest frozen (suspended) when its emulator is killed outright
// staying frozen forever, with its processes, cgroups and uid: the init was
// stopped too, so it never saw its lifeline close. The test binary re-runs
// itself as the emulator, freezes its guest, and is SIGKILLed.
func TestAFrozenGuestDiesWithItsEmulator(t *testing.T) {
	if os.Getenv("EMULATOR_FROZEN_CHILD") == "1" {
		g, _ := directGuest(t, GuestSpec{})
		if err := g.Freeze(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("frozen %d\n", testvm.GuestInitOf(t, GuestInitArg0))
		time.Sleep(time.Minute) // killed long before
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestAFrozenGuestDiesWithItsEmulator$", "-test.v")
	cmd.Env = append(os.Environ(), "EMULATOR_FROZEN_CHILD=1", "EMULATOR_UNPRIVILEGED_CHILD_AGENTD="+agentdBin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var init int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "frozen %d", &init); err == nil {
			break
		}
	}
	if init == 0 {
		t.Fatal("the emulator child never froze its guest")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for i := 0; i < 500; i++ { // bounded: about five seconds
		if unix.Kill(init, 0) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the frozen guest's init %d outlived its emulator (state %s)", init, procStateOf(init))
}

// procsInPidnsOf lists the host pids of the processes in the PID namespace
// of host process init, init among them.
func procsInPidnsOf(t *testing.T, init int) []int {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	return out
}

// The attacks of issue 44 on a rootless guest, whose root is the caller's
// own uid: everything the caller owns (the emulator's binary, the image
// store's agentd) is the guest root's to change, unless no path to it is
// left. Each runs as this process and, when this is root, again as uid
// 65534 (rerunAsNobody), whose binaries are its own.

// fileState is what an attack through /proc/<pid>/exe could change: the
// contents, mode, times and extended attributes.
func fileState(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _ := unix.Listxattr(path, buf)
	return fmt.Sprintf("sha256=%x mode=%o uid=%d mtime=%d.%d xattrs=%q", sha256.Sum256(raw), st.Mode, st.Uid, st.Mtim.Sec, st.Mtim.Nsec, buf[:max(n, 0)])
}

// Catches (issue 44, attack 1): a rootless guest rewriting the agentd the
// next guest of its image runs. It opened /proc/<agentd>/exe, ptrace-stopped
// its init (PTRACE_SEIZE, PTRACE_INTERRUPT) so the guest outlived its daemon,
// killed the daemon so ETXTBSY lifted, reopened the descriptor for writing
// and appended. Now the init is not the guest's to trace, the daemon's
// /proc/<pid>/exe is a sealed copy, and a killed daemon ends its guest.
func TestEscapeRewriteTheDaemonThroughProcExe(t *testing.T) {
	testvm.InBothModes(t, "TestEscapeRewriteTheDaemonThroughProcExe", func(t *testing.T) {
		daemon := filepath.Join(t.TempDir(), "agentd") // the caller's own, as the image store's copy is
		testvm.CopyFile(t, agentdBin, daemon, 0o755)
		before := fileState(t, daemon)
		g, sess := directGuest(t, GuestSpec{Daemon: daemon})
		testvm.WithProbe(t, sess)
		out := testvm.MustSh(t, sess, "/tmp/escapeprobe ptrace 1; /tmp/escapeprobe exe $("+testvm.AgentdPidScript+")")
		if !strings.Contains(out, "seize EPERM") {
			t.Errorf("guest root ptrace-stopped its init:\n%s", out)
		}
		if strings.Contains(out, "link "+daemon) || strings.Contains(out, "write ok") {
			t.Errorf("the daemon's /proc/<pid>/exe leads to the host's file or can be written:\n%s", out)
		}
		testvm.StartQuietly(t, sess, "setsid /tmp/escapeprobe takeover 1 $("+testvm.AgentdPidScript+") 9000 </dev/null >/dev/null 2>&1 & sleep 1")
		ended := false
		for i := 0; i < 1000 && !ended; i++ { // bounded: about ten seconds
			select {
			case <-g.Exited:
				ended = true
			default:
				time.Sleep(10 * time.Millisecond)
			}
		}
		if !ended {
			t.Error("the guest outlived its killed daemon (its init was stopped)")
		}
		g.Stop()
		if after := fileState(t, daemon); after != before {
			t.Errorf("the guest changed the daemon's host file:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// Catches (issue 44, attack 2): a rootless guest changing the caller's
// emulator binary's mode, times and xattrs through /proc/1/exe (it became
// -rwsrwsrwx, dated 1970). The init is not dumpable and runs from a sealed
// copy: the guest can open neither its exe nor its descriptors.
func TestEscapeCallerBinaryThroughProcOneExe(t *testing.T) {
	testvm.InBothModes(t, "TestEscapeCallerBinaryThroughProcOneExe", func(t *testing.T) {
		self, err := os.Executable() // the emulator; in the rootless re-run, the caller's own copy
		if err != nil {
			t.Fatal(err)
		}
		before := fileState(t, self)
		_, sess := directGuest(t, GuestSpec{})
		testvm.WithProbe(t, sess)
		out := testvm.MustSh(t, sess, "/tmp/escapeprobe exe 1")
		if !strings.HasPrefix(out, "open EACCES") && !strings.HasPrefix(out, "open EPERM") {
			t.Errorf("the guest opened its init's /proc/1/exe:\n%s", out)
		}
		for _, p := range []string{"/proc/1/fd/0", "/proc/1/root/", "/proc/1/cwd/"} {
			if code, out := testvm.Sh(t, sess, "ls "+p); code == 0 {
				t.Errorf("the guest reads its init's %s: %s", p, out)
			}
		}
		if after := fileState(t, self); after != before {
			t.Errorf("the guest changed the emulator's binary:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// Catches (issue 44, attack 6): mounts that guest root could remount
// writable (mount -o remount,bind,rw /usr: in rootless mode every file the
// caller owns there became writable) or unmount to uncover what they mask,
// and a mount nested under a bound host directory arriving read-write,
// suid and with devices. As root the test re-runs itself in a private mount
// namespace with a tmpfs at /usr/src, the host's mount nested under /usr.
func TestEscapeMountsAreLocked(t *testing.T) {
	const name = "TestEscapeMountsAreLocked"
	nested := os.Getenv("EMULATOR_NESTED_MOUNT")
	if nested == "" && os.Getenv("EMULATOR_ESCAPE_ROOTLESS") == "" && os.Geteuid() == 0 {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(self, "-test.run=^"+name+"$", "-test.v")
		cmd.Env = append(os.Environ(), "EMULATOR_NESTED_MOUNT=/usr/src", "EMULATOR_UNPRIVILEGED_CHILD_AGENTD="+agentdBin)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "nested-mount-planted") {
			t.Fatalf("the re-run in a private mount namespace: %v\n%s", err, out)
		}
		return
	}
	if nested != "" && os.Getenv("EMULATOR_ESCAPE_ROOTLESS") == "" {
		// In this process's own mount namespace, never the host's.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", nested, "tmpfs", 0, "size=1m,mode=0777"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(nested, "nested-marker"), []byte("host\n"), 0o666); err != nil {
			t.Fatal(err)
		}
		fmt.Println("nested-mount-planted")
	}
	testvm.InBothModes(t, name, func(t *testing.T) {
		_, sess := directGuest(t, GuestSpec{})
		for _, attack := range []string{
			"mount -o remount,bind,rw /usr",
			"mount -o remount,rw /usr",
			"umount -l /usr",
			"umount /proc/kcore",
			"umount -l /proc/sys",
			"mount -o remount,bind,rw /proc/sys",
		} {
			if code, out := testvm.Sh(t, sess, attack); code == 0 {
				t.Errorf("guest root ran %q: %s", attack, out)
			}
		}
		if code, out := testvm.Sh(t, sess, "touch /usr/escape-marker"); code == 0 {
			t.Errorf("guest root wrote /usr: %s", out)
		}
		if nested == "" {
			return
		}
		if got := testvm.MustSh(t, sess, "cat "+nested+"/nested-marker"); got != "host" {
			t.Errorf("the nested mount's file reads %q in the guest", got)
		}
		if code, out := testvm.Sh(t, sess, "touch "+nested+"/escape-marker || mount -o remount,bind,rw "+nested); code == 0 {
			t.Errorf("the mount nested under /usr is writable from the guest: %s", out)
		}
		opts := testvm.MustSh(t, sess, "awk '$5 == \""+nested+"\" {print $6}' /proc/self/mountinfo")
		for _, want := range []string{"ro", "nosuid", "nodev"} {
			if !slices.Contains(strings.Split(opts, ","), want) {
				t.Errorf("the mount nested under /usr has options %q, want %s", opts, want)
			}
		}
		if _, err := os.Stat(filepath.Join(nested, "escape-marker")); err == nil {
			t.Error("the guest's write reached the host's nested mount")
		}
	})
}

// Catches (issue 44): a guest creating sockets of the families Docker's
// default profile refuses (AF_VSOCK reaches the host's other VMs and is
// not network-namespaced; AF_ALG; AF_XDP), the filter comparing only the
// low 32 bits of the family, and a filter that refuses the families every
// guest needs.
func TestEscapeSocketFamiliesDockerRefuses(t *testing.T) {
	testvm.InBothModes(t, "TestEscapeSocketFamiliesDockerRefuses", func(t *testing.T) {
		_, sess := directGuest(t, GuestSpec{})
		testvm.WithProbe(t, sess)
		out := testvm.MustSh(t, sess, "/tmp/escapeprobe sockets")
		for _, f := range []string{"AF_VSOCK", "AF_XDP", "AF_ALG", "AF_VSOCK+hi"} {
			if !strings.Contains(out, "\n"+f+" EPERM") && !strings.HasPrefix(out, f+" EPERM") {
				t.Errorf("%s in the guest: want EPERM from the filter; the probe said:\n%s", f, out)
			}
		}
		for _, f := range []string{"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"} {
			if !strings.Contains(out, "\n"+f+" ok") {
				t.Errorf("%s in the guest: want ok; the probe said:\n%s", f, out)
			}
		}
	})
}

// Catches (issue 44): the guest's init holding host cgroup-v1 files open
// (the Go runtime's CPU-limit files), a leak through /proc/1/fd.
func TestEscapeInitHoldsNoHostFile(t *testing.T) {
	_, sess := directGuest(t, GuestSpec{})
	if code, out := testvm.Sh(t, sess, "ls -l /proc/1/fd"); code == 0 {
		t.Errorf("the guest lists its init's descriptors: %s", out)
	}
	init := testvm.GuestInitOf(t, GuestInitArg0)
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", init))
	if err != nil || len(fds) == 0 {
		t.Fatalf("the init's descriptors: %v %v", fds, err)
	}
	for _, f := range fds {
		if l, _ := os.Readlink(f); strings.HasPrefix(l, "/sys/") || strings.HasPrefix(l, "/proc/") || strings.HasPrefix(l, "/home/") {
			t.Errorf("the guest's init holds the host's %s (%s)", l, f)
		}
	}
}

// Catches (issue 44, issue 51 item 8): the state and store directories of
// an emulator killed without its teardown (a guest's empty mount points,
// owned by its mapped ids; a server's unpacked images) left in the
// temporary directory for good. Planted as a dead emulator's, they are
// swept by the next emulator; a live emulator's (this process's, and one
// of another live process) are kept.
func TestStaleStateOfDeadEmulatorsIsSwept(t *testing.T) {
	tmp := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Process.Kill(); _ = live.Wait() }()
	name := func(prefix string, pid int, what string) string {
		return filepath.Join(tmp, fmt.Sprintf("%semulator-%d-%s-123", prefix, pid, what))
	}
	stale := []string{name("", dead.Process.Pid, "microvm-x"), name("", dead.Process.Pid, "build-step"), name("microvm-", dead.Process.Pid, "store")}
	kept := []string{name("", os.Getpid(), "microvm-x"), name("", live.Process.Pid, "microvm-y"), name("microvm-", live.Process.Pid, "store"),
		filepath.Join(tmp, "emulator-rootless-1"), filepath.Join(tmp, "emulator-probe-2")}
	for _, d := range append(append([]string{}, stale...), kept...) {
		// What a killed root-started launch leaves: rw and image mount
		// points handed to the guest's ids, and a file in the store.
		for _, sub := range []string{"rw", "image"} {
			if err := os.MkdirAll(filepath.Join(d, sub), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, "image", "kept-if-bound"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(filepath.Join(d, "rw"), rootGuestIDBase, rootGuestIDBase); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A symlink named as a dead emulator's is never followed.
	target := t.TempDir()
	if err := os.WriteFile(filepath.Join(target, "outside"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, name("", dead.Process.Pid, "link")); err != nil {
		t.Fatal(err)
	}
	sweepStaleState(tmp)
	for _, d := range stale {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the dead emulator's %s is still there (%v)", d, err)
		}
	}
	for _, d := range kept {
		if _, err := os.Stat(filepath.Join(d, "image", "kept-if-bound")); err != nil {
			t.Errorf("a live emulator's (or another program's) %s was swept: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(target, "outside")); err != nil {
		t.Errorf("the sweep followed a symlink: %v", err)
	}
}

// Catches: an emulator that never sweeps: its first launch sweeps the
// temporary directory it makes state in.
func TestALaunchSweepsDeadEmulatorsState(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(os.TempDir(), fmt.Sprintf("emulator-%d-microvm-sweep-test-1", dead.Process.Pid))
	if err := os.MkdirAll(filepath.Join(stale, "rw"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stale) })
	stateSweep = sync.Once{} // as in a fresh emulator
	directGuest(t, GuestSpec{})
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a launch left the dead emulator's %s (%v)", stale, err)
	}
}

// Catches (issue 44, attack 3 by another way in): a guest whose init
// cannot reap (stopped here from the host, as a guest that could freeze
// its own cgroup would stop it) outliving its killed daemon, RUNNING with
// the daemon's port free for any guest process. The emulator watches the
// daemon itself and ends the guest when it exits.
func TestADeadDaemonEndsItsGuestWhateverItsInit(t *testing.T) {
	testvm.InBothModes(t, "TestADeadDaemonEndsItsGuestWhateverItsInit", func(t *testing.T) {
		g, _ := directGuest(t, GuestSpec{})
		init := testvm.GuestInitOf(t, GuestInitArg0)
		if err := syscall.Kill(init, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 500 && procStateOf(init) != "T"; i++ { // bounded: about five seconds
			time.Sleep(10 * time.Millisecond)
		}
		daemon := 0
		for _, p := range procsInPidnsOf(t, init) {
			if p != init {
				daemon = p
			}
		}
		if daemon == 0 {
			t.Fatal("no daemon in the guest")
		}
		if err := syscall.Kill(daemon, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ { // bounded: about ten seconds
			select {
			case <-g.Exited:
				return
			default:
				time.Sleep(10 * time.Millisecond)
			}
		}
		t.Error("the guest of a killed daemon is still running (its init stopped)")
	})
}
