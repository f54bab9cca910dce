//go:build linux

package localvm

// Local mode as an ordinary user, and the refusals of a host that forbids
// unprivileged user namespaces.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

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

// Catches: a binary that launches guests without calling Init at the top of
// its main (the re-exec was a package init() until issue 46): its sealed
// copy would run the program's own main as the guest's init. The runtime
// refuses before re-executing anything.
func TestLaunchWithoutInitIsRefused(t *testing.T) {
	initCalled.Store(false)
	defer initCalled.Store(true)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Init was not called") {
			t.Fatalf("CheckIsolation without Init: recovered %v, want the refusal naming Init", r)
		}
	}()
	_ = CheckIsolation()
}
