//go:build linux

package testvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/microvms/microvms/internal/testbin"
)

// RerunAsNobody runs this test binary's test name as uid 65534, with a
// fresh HOME and TMPDIR, the daemon Main built copied beside it and env
// added, and fails t unless the child printed marker (its checks ran, not
// skipped).
func RerunAsNobody(t *testing.T, name, marker string, env ...string) {
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
	copies := map[string]string{self: bin, agentd: filepath.Join(dir, "agentd")}
	if init := filepath.Join(filepath.Dir(agentd), filepath.Base(testbin.GuestInit)); fileExists(init) {
		copies[init] = filepath.Join(dir, filepath.Base(testbin.GuestInit)) // beside agentd, as the parent's was
	}
	for src, dst := range copies {
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

// InBothModes runs check here and, as root, again in a rootless re-run of
// the test named name (RerunAsNobody), with the escape probe beside it.
func InBothModes(t *testing.T, name string, check func(t *testing.T)) {
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
	probe, err := EscapeProbe()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "emulator-escapeprobe-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	CopyFile(t, probe, filepath.Join(dir, "escapeprobe"), 0o755)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	RerunAsNobody(t, name, "rootless-attack-refused", "EMULATOR_ESCAPE_ROOTLESS=1",
		"EMULATOR_ESCAPE_PROBE="+filepath.Join(dir, "escapeprobe"), "EMULATOR_NESTED_MOUNT="+os.Getenv("EMULATOR_NESTED_MOUNT"))
}

// GuestInitOf is the pid of a guest init (argv[0] beginning with arg0,
// localvm.GuestInitArg0) whose parent is this process.
func GuestInitOf(t *testing.T, arg0 string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if !strings.HasPrefix(string(cmdline), arg0) {
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

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
