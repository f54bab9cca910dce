//go:build linux

package imagebuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/microvms/microvms/internal/testbin"
	"github.com/microvms/microvms/localvm"
)

// agentdBin is the daemon the tests' guests run.
var agentdBin string

func TestMain(m *testing.M) {
	localvm.Init() // this test binary is also every build step's init
	if p := os.Getenv("EMULATOR_UNPRIVILEGED_CHILD_AGENTD"); p != "" {
		agentdBin = p // a re-run as uid 65534: the parent built the daemon
		os.Exit(m.Run())
	}
	var err error
	if agentdBin, err = testbin.Build("cmd/agentd", testbin.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

var escapeProbe = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("EMULATOR_ESCAPE_PROBE"); p != "" {
		return p, nil // a rootless re-run: the parent built it
	}
	return testbin.Build("internal/escapeprobe", testbin.Options{})
})

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
