//go:build linux

package emulator

// Local mode as an ordinary user, and the refusals of a host that forbids
// unprivileged user namespaces.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

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

// Catches: a refusal that does not name the host setting that blocks
// unprivileged user namespaces, or names the wrong one.
func TestUserNamespaceRefusalNamesTheSetting(t *testing.T) {
	for _, tc := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"/proc/sys/user/max_user_namespaces": "0"}, "user.max_user_namespaces"},
		{map[string]string{"/proc/sys/user/max_user_namespaces": "100", "/proc/sys/kernel/unprivileged_userns_clone": "0"}, "kernel.unprivileged_userns_clone"},
		{map[string]string{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1"}, "apparmor_restrict_unprivileged_userns"},
		{map[string]string{"/proc/sys/user/max_user_namespaces": "100", "/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "0"}, ""},
	} {
		got := userNamespacesRefusalFrom(func(p string) string { return tc.files[p] })
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q, want it to name %q", tc.files, got, tc.want)
		}
	}
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
