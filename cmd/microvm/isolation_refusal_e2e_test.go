//go:build linux

package main_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: `microvm run --local` on a host that cannot confine a guest (here
// an unprivileged user, who may not create the namespaces) running the
// command unconfined, or refusing with anything but ERR_PRECONDITION (exit
// 12) naming what is missing.
func TestLocalRunRefusedWithoutNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to become an unprivileged user")
	}
	dir, err := os.MkdirTemp("", "microvm-refusal-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	lone, daemon := filepath.Join(dir, "microvm"), filepath.Join(dir, "agentd")
	for src, dst := range map[string]string{bin: lone, agentdBin(t): daemon} {
		b, err := os.ReadFile(src)
		if err != nil || os.WriteFile(dst, b, 0o755) != nil {
			t.Fatalf("copying %s: %v", src, err)
		}
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran-unconfined")
	cmd := exec.Command(lone, "--json", "run", "--local", "--exec", "touch "+marker)
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "TMPDIR=" + dir,
		"MICROVM_AGENTD=" + daemon, "MICROVM_STATE_DIR=" + filepath.Join(dir, "state"), "MICROVM_ARTIFACT_DIR=" + filepath.Join(dir, "artifacts")}, coverEnv()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out bytes.Buffer
	cmd.Stdout = &out
	err = cmd.Run()
	inv := invocation{stdout: out.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		inv.code = ee.ExitCode()
	}
	m := wantFailure(t, inv, taxonomy.KindPrecondition, "")
	if msg, _ := m["error"].(string); !strings.Contains(msg, "cannot isolate") || !strings.Contains(msg, "missing: ") {
		t.Fatalf("the refusal does not say what is missing: %v", m["error"])
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the command ran although the guest could not be confined")
	}
}
