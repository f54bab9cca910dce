//go:build linux

package emulator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/internal/testbin"
	"github.com/microvms/microvms/localvm"
)

// The escape and rootless tests that need the control plane: the guest's
// end seen as the MicroVM's state, the launch warning. The attacks on the
// runtime itself are localvm's (escape_linux_test.go there); these helpers
// are copies of its own, as a test package cannot import another's.

// Catches (issue 44, attack 5's way in): a guest whose daemon was killed
// while its init was stopped, left RUNNING with its port taken by whatever
// the guest listens with there. A killed daemon ends the MicroVM, the
// control plane says why, and nothing of the guest's is proxied to.
func TestEscapeKilledDaemonEndsTheMicrovm(t *testing.T) {
	inBothModes(t, "TestEscapeKilledDaemonEndsTheMicrovm", func(t *testing.T) {
		s, base := isolated(t)
		vm := launchGuest(t, s, base, false)
		sess := session(t, base, vm)
		withProbe(t, sess)
		startQuietly(t, sess, "setsid /tmp/escapeprobe takeover 1 $("+agentdPidScript+") 9000 </dev/null >/dev/null 2>&1 & sleep 1")
		var g cp.GetMicrovmResponse
		for i := 0; i < 1000; i++ { // bounded: about ten seconds
			if g = get(t, base, vm.MicrovmId); g.State == cp.MicrovmStateTERMINATED {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if g.State != cp.MicrovmStateTERMINATED || deref(g.StateReason) != guestExitedReason {
			t.Errorf("after its daemon was killed the MicroVM is %s (%s), want TERMINATED (%s)", g.State, deref(g.StateReason), guestExitedReason)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if r, err := sess.Run(ctx, []string{"echo", "reached"}, client.RunOptions{}); err == nil {
			t.Errorf("a request reached the ended guest's port: %+v", r)
		} else if strings.Contains(err.Error(), "impostor") {
			t.Errorf("the guest's impostor on the daemon's port answered: %v", err)
		}
	})
}

// Catches: local mode that still needs root (the old refusal of an
// unprivileged host), and a rootless guest whose root is not confined to
// the caller's own uid. The test binary re-runs itself as nobody, with a
// fresh HOME and TMPDIR, to be that host.
func TestUnprivilegedHostRunsConfinedGuests(t *testing.T) {
	if os.Getenv("EMULATOR_UNPRIVILEGED_CHILD") == "1" {
		unprivilegedChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to become an unprivileged user")
	}
	rerunAsNobody(t, "TestUnprivilegedHostRunsConfinedGuests", "rootless-checked", "EMULATOR_UNPRIVILEGED_CHILD=1")
}

func unprivilegedChild(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Fatalf("CheckIsolation as an unprivileged user: %v, want nil (user namespaces are enabled here)", err)
	}
	s, base := isolated(t)
	vm := launchGuest(t, s, base, false)
	sess := session(t, base, vm)
	if got := mustSh(t, sess, "id -u"); got != "0" {
		t.Errorf("the guest's uid is %s, want 0 (root of its own namespace)", got)
	}
	_, pid := startSleeper(t, sess, "rootless-")
	if uid := hostUIDOf(t, pid); uid != os.Getuid() {
		t.Errorf("the guest's process runs as host uid %d, want the caller's %d", uid, os.Getuid())
	}
	terminate(t, base, vm.MicrovmId)
	fmt.Println("rootless-checked")
}

// Catches (issue 44): a rootless emulator on a host that does not let it
// limit a guest (cgroup v1, or v2 without delegation) saying so only on
// `run --local`: `run --keep` against `microvm emulator`, the engine and
// MCP said nothing. The emulator itself now warns, once per such MicroVM,
// naming each missing limit; a guest with every limit gets no warning.
func TestAGuestWithoutLimitsIsWarnedOf(t *testing.T) {
	inBothModes(t, "TestAGuestWithoutLimitsIsWarnedOf", func(t *testing.T) {
		var mu sync.Mutex
		var warned []string
		s, base := serve(t, Options{VMs: AgentdLauncher(agentdBin, nil), Warn: func(msg string) {
			mu.Lock()
			defer mu.Unlock()
			warned = append(warned, msg)
		}})
		vm := launchGuest(t, s, base, false)
		l, ok := s.GuestLimits(vm.MicrovmId)
		if !ok {
			t.Fatal("no limits report for a running guest")
		}
		if os.Geteuid() != 0 && !cgroupV2Only() && len(l.Missing) == 0 {
			t.Errorf("a rootless guest on a cgroup v1 host reports every limit applied: %+v", l)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(l.Missing) == 0 {
			if len(warned) != 0 {
				t.Errorf("a guest with every limit was warned of: %q", warned)
			}
			return
		}
		if len(warned) != 1 || !strings.Contains(warned[0], vm.MicrovmId) {
			t.Fatalf("warnings %q, want one naming %s", warned, vm.MicrovmId)
		}
		for _, m := range l.Missing {
			if !strings.Contains(warned[0], m) {
				t.Errorf("the warning %q does not name the missing %q", warned[0], m)
			}
		}
	})
}

var escapeProbe = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("EMULATOR_ESCAPE_PROBE"); p != "" {
		return p, nil // a rootless re-run: the parent built it
	}
	return testbin.Build("internal/escapeprobe", testbin.Options{})
})

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

// inBothModes runs check here and, as root, again in a rootless re-run of
// the test named name.
func inBothModes(t *testing.T, name string, check func(t *testing.T)) {
	t.Helper()
	if os.Getenv("EMULATOR_ESCAPE_ROOTLESS") == "1" {
		check(t)
		if !t.Failed() {
			fmt.Println("rootless-attack-refused")
		}
		return
	}
	check(t)
	if os.Geteuid() != 0 {
		return
	}
	probe, err := escapeProbe()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "emulator-escapeprobe-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	copyFile(t, probe, filepath.Join(dir, "escapeprobe"), 0o755)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rerunAsNobody(t, name, "rootless-attack-refused", "EMULATOR_ESCAPE_ROOTLESS=1",
		"EMULATOR_ESCAPE_PROBE="+filepath.Join(dir, "escapeprobe"), "EMULATOR_NESTED_MOUNT="+os.Getenv("EMULATOR_NESTED_MOUNT"))
}

// agentdPidScript prints the guest pid of the daemon (argv[0] "agentd").
const agentdPidScript = `grep -la '^agentd' /proc/[0-9]*/cmdline 2>/dev/null | sed -n 's|^/proc/\([0-9]*\)/cmdline$|\1|p' | head -1`

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, raw, mode); err != nil {
		t.Fatal(err)
	}
}

// startQuietly starts script in the guest and ignores how its session
// ends: the script may kill the daemon serving it.
func startQuietly(t *testing.T, sess *client.Session, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, _ = sess.Run(ctx, []string{script}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
}

// rerunAsNobody runs this test binary's test name as uid 65534, with a
// fresh HOME and TMPDIR, the daemon copied beside it and env added, and
// fails t unless the child printed marker (its checks ran, not skipped).
func rerunAsNobody(t *testing.T, name, marker string, env ...string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "emulator-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "emulator.test")
	for src, dst := range map[string]string{self: bin, agentdBin: filepath.Join(dir, "agentd")} {
		raw, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, raw, 0o755); err != nil {
			t.Fatal(err)
		}
		// The caller's own binaries, as a rootless user's are.
		if err := os.Chown(dst, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run=^"+name+"$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append([]string{"EMULATOR_UNPRIVILEGED_CHILD_AGENTD=" + filepath.Join(dir, "agentd"), "PATH=" + os.Getenv("PATH"), "TMPDIR=" + dir, "HOME=" + dir}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as uid 65534 failed: %v\n%s", name, err, out)
	}
	if !strings.Contains(string(out), marker) {
		t.Fatalf("%s as uid 65534 did not reach its checks:\n%s", name, out)
	}
}

func cgroupV2Only() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
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
		if !strings.HasPrefix(string(cmdline), localvm.GuestInitArg0) {
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
