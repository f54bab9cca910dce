//go:build linux

package emulator

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testbin"
	"golang.org/x/sys/unix"
)

// The escape suite: each test is an attack a hostile guest made on the
// emulator's confinement before guests had user namespaces, filters and
// limits, and asserts that it now fails. None writes the host's /proc/sys,
// core_pattern, sysrq or an existing cgroup: a payload that would run on
// the host only creates a marker under the test's own temporary directory.

var escapeProbe = sync.OnceValues(func() (string, error) {
	return testbin.Build("internal/escapeprobe", testbin.Options{})
})

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
	body, _ := json.Marshal(map[string]string{"runHookPayload": payload()})
	if reason := postRunHook(t.Context(), g.roundTripper(), "127.0.0.1:"+strconv.Itoa(spec.HookPort), body, 10*time.Second); reason != "" {
		t.Fatal(reason)
	}
	sess, err := client.Direct("http://127.0.0.1:"+strconv.Itoa(spec.HookPort), agentToken, client.WithHTTPClient(&http.Client{Transport: g.roundTripper()}))
	if err != nil {
		t.Fatal(err)
	}
	return g, sess
}

// withProbe copies the escape probe into the guest at /tmp/escapeprobe.
func withProbe(t *testing.T, sess *client.Session) {
	t.Helper()
	bin, err := escapeProbe()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := sess.WriteFile(t.Context(), "/tmp/escapeprobe", f, 0o755); err != nil {
		t.Fatal(err)
	}
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
	code, out := sh(t, sess, script)
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
		if code, out := sh(t, sess, "mkdir -p /tmp/m-"+fs+" && mount -t "+fs+" none /tmp/m-"+fs); code == 0 {
			t.Errorf("guest root mounted %s: %s", fs, out)
		}
	}
	// What it may mount is its own: its processes, its interfaces, its
	// cgroup tree.
	if code, out := sh(t, sess, "mkdir -p /tmp/p && mount -t proc proc /tmp/p && ls /tmp/p | grep -c '^[0-9]'"); code == 0 {
		if n, _ := strconv.Atoi(strings.TrimSpace(out)); n == 0 || n > 20 {
			t.Errorf("a proc the guest mounted shows %d processes, want its own few", n)
		}
	}
	if code, out := sh(t, sess, "mkdir -p /tmp/s && mount -t sysfs sysfs /tmp/s && ls /tmp/s/class/net"); code == 0 {
		if strings.TrimSpace(out) != "lo" {
			t.Errorf("a sysfs the guest mounted shows the interfaces %q, want its own lo", out)
		}
	}
	if got := mustSh(t, sess, "cut -d: -f3 /proc/self/cgroup | sort -u | tr '\\n' ' '"); strings.TrimSpace(got) != "/" {
		t.Errorf("the guest sees its cgroups as %q, want / (a cgroup namespace of its own)", got)
	}
	// A rootless emulator on a cgroup v1 host has no unified group of its
	// own to place the guest in (the unified root is root's), so there the
	// guest's cgroup2 view starts at the emulator's own group.
	if os.Geteuid() != 0 && !cgroupV2Only() {
		return
	}
	if code, out := sh(t, sess, "mkdir -p /tmp/c2 && mount -t cgroup2 none /tmp/c2 && find /tmp/c2 -mindepth 1 -type d | head -5"); code == 0 && strings.TrimSpace(out) != "" {
		t.Errorf("a cgroup2 the guest mounted shows groups beyond its own: %s", out)
	}
}

// Catches: a guest that reads the host's keyrings, sees a uid map onto host
// root, or can call the kernel interfaces Docker's profile keeps from
// containers. Each call the probe makes succeeds for an unfiltered
// unprivileged process on this host, so EPERM can only be the filter's.
func TestEscapeKeysUIDMapAndFilteredSyscalls(t *testing.T) {
	_, sess := directGuest(t, GuestSpec{})
	if got := mustSh(t, sess, "cat /proc/keys | wc -c"); got != "0" {
		t.Errorf("the guest reads %s bytes of /proc/keys, want none", got)
	}
	// Read from the host: inside, the map of the guest's nested namespace
	// shows ids of the init's, not of the host's.
	init := guestInitOfThisProcess(t)
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
		if code, _ := sh(t, sess, "test -w "+p); code == 0 {
			t.Errorf("the guest can write the host kernel's %s", p)
		}
	}
	withProbe(t, sess)
	out := mustSh(t, sess, "/tmp/escapeprobe syscalls")
	for _, name := range []string{"keyctl", "add_key", "userfaultfd", "perf_event_open", "io_uring_setup"} {
		if !strings.Contains(out, name+" EPERM") {
			t.Errorf("%s in the guest: want EPERM from the filter; the probe said:\n%s", name, out)
		}
	}
	if got := mustSh(t, sess, "grep NoNewPrivs /proc/self/status | cut -f2"); got != "1" {
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
	withProbe(t, sess)
	// Touching 2 GiB page by page is the machine's speed, not the guest's:
	// a loaded host has taken over 30 s, so the hog gets a deadline of its own.
	code, out := shWithin(t, sess, "/tmp/escapeprobe hog 3072; echo status=$?", 5*time.Minute)
	if code != 0 || strings.Contains(out, "survived") || !strings.Contains(out, "status=137") {
		t.Fatalf("a 3 GiB hog in a 2 GiB guest: %d %q, want it killed (137)", code, out)
	}
	if got := mustSh(t, sess, "echo alive"); got != "alive" {
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
	withProbe(t, sess)
	// The storm forks thousands of processes: on a loaded two-core host that
	// alone has taken over 30 s, so it gets a deadline of its own.
	code, out := shWithin(t, sess, fmt.Sprintf("/tmp/escapeprobe storm %d", taxonomy.LocalGuestMaxPids+200), 5*time.Minute)
	if code != 0 {
		t.Fatalf("the storm probe exited %d: %s", code, out)
	}
	out = strings.TrimSpace(out)
	var n int
	if _, err := fmt.Sscanf(out, "started %d", &n); err != nil || n < taxonomy.LocalGuestMaxPids/2 || n >= taxonomy.LocalGuestMaxPids {
		t.Fatalf("the storm: %q, want it stopped by the limit (%d)", out, taxonomy.LocalGuestMaxPids)
	}
	if got := mustSh(t, sess, "echo alive"); got != "alive" {
		t.Fatalf("the guest did not answer after the storm: %q", got)
	}
}

// Catches: inotify instances charged to host root (a guest holding 100
// watches left a root process on the host 28). The guest opens instances
// until its own allowance runs out; this process, root or not, still opens
// one afterwards.
func TestEscapeInotifyExhaustionStaysInTheGuest(t *testing.T) {
	_, sess := directGuest(t, GuestSpec{})
	withProbe(t, sess)
	mustSh(t, sess, "(setsid /tmp/escapeprobe inotify 100000 >/tmp/ino.out 2>&1 &); true")
	var out string
	for i := 0; i < 200; i++ { // bounded: about ten seconds
		out = mustSh(t, sess, "cat /tmp/ino.out")
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
	code, out := sh(t, sess, "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; echo status=$?")
	if code != 0 || !strings.Contains(out, "No space left on device") {
		t.Fatalf("64 MiB into a 32 MiB writable layer: %d %q, want ENOSPC", code, out)
	}
	if got := mustSh(t, sess, "rm /tmp/fill && echo ok > /tmp/after && cat /tmp/after"); got != "ok" {
		t.Fatalf("the guest cannot write after freeing its layer: %q", got)
	}
}

// Catches: one guest seeing another's processes (and so its agent token in
// its environment or memory).
func TestEscapeGuestsCannotSeeEachOther(t *testing.T) {
	_, a := directGuest(t, GuestSpec{Env: map[string]string{"MARKER_A": "guest-a-secret"}})
	_, b := directGuest(t, GuestSpec{})
	mustSh(t, a, "(setsid sleep 300 </dev/null >/dev/null 2>&1 &); true")
	if out := mustSh(t, b, "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c guest-a-secret; true"); out != "0" {
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

func cgroupV2Only() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
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
		fmt.Printf("frozen %d\n", guestInitOfThisProcess(t))
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

// guestInitOfThisProcess is the pid of a guest init whose parent is this
// process (the one directGuest started).
func guestInitOfThisProcess(t *testing.T) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if !strings.HasPrefix(string(cmdline), guestInitArg0) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			return pid
		}
	}
	t.Fatal("no guest init of this process")
	return 0
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
