//go:build linux

package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Catches: local mode that needs root (the old refusal of an unprivileged
// user), a guest that reaches the caller's files, and a guest whose root is
// the host's. `microvm run --local --exec` runs as uid 65534 with a fresh
// HOME and TMPDIR, as a newcomer without sudo would; the guest answers that
// it is root, tries to read a file only the caller can read, and the run
// exits 0. Also catches a launch that drops a limit in silence: the
// envelope's localLimits names each one this user could not set.
func TestLocalRunAsAnUnprivilegedUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to become an unprivileged user")
	}
	dir, err := os.MkdirTemp("", "microvm-rootless-")
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
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(home, "secret")
	if err := os.WriteFile(secret, []byte("the caller's own\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, secret} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lone, "--json", "run", "--local", "--exec", "id -u; cat "+secret+" || echo unreadable")
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "TMPDIR=" + dir, "MICROVM_AGENTD=" + daemon}, coverEnv()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) || err != nil {
		t.Fatalf("microvm run --local as uid 65534: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	var env struct {
		Data struct {
			Stdout       string `json:"stdout"`
			ExecExitCode *int   `json:"execExitCode"`
			LocalLimits  *struct {
				Applied []string `json:"applied"`
				Missing []string `json:"missing"`
			} `json:"localLimits"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out.Bytes(), &env); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(env.Data.Stdout), "\n")
	if len(lines) != 2 || lines[0] != "0" || lines[1] != "unreadable" {
		t.Fatalf("the guest answered %q, want its own uid 0 and the caller's file out of reach", env.Data.Stdout)
	}
	l := env.Data.LocalLimits
	if l == nil || len(l.Applied)+len(l.Missing) != 3 {
		t.Fatalf("localLimits is %+v, want each of memory, pids and cpu either applied or missing", l)
	}
	if len(l.Missing) > 0 && !strings.Contains(errOut.String(), "without some limits") {
		t.Errorf("limits are missing (%v) but stderr does not say so: %s", l.Missing, errOut.String())
	}
}
