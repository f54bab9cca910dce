package preflight

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tools the script looks for; each test builds a PATH of stubs from them so
// the answer depends on the stubs, never on what this machine has.
var tools = []string{"make", "curl", "unshare", "tar", "slirp4netns", "ip", "node", "npm", "python3", "go"}

// runPreflight runs scripts/preflight.sh with PATH holding only stubs of
// tools minus the ones left out, and returns its exit code and stderr.
func runPreflight(t *testing.T, leaveOut ...string) (int, string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	skip := map[string]bool{}
	for _, name := range leaveOut {
		skip[name] = true
	}
	for _, name := range tools {
		if skip[name] {
			continue
		}
		// A stub that succeeds at anything (python3 -c 'import boto3' too).
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!"+bash+"\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "preflight.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, script)
	cmd.Env = []string{"PATH=" + dir}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	default:
		t.Fatal(err)
		return -1, ""
	}
}

// The case issue 51 met: no slirp4netns. Catches a check target that no
// longer runs the script first (the TestMakeCheckRunsPreflightFirst case) and a
// script that stops listing slirp4netns or its package.
func TestPreflightNamesMissingSlirp4netnsAndItsPackage(t *testing.T) {
	code, out := runPreflight(t, "slirp4netns")
	if code == 0 {
		t.Fatalf("preflight passed without slirp4netns; stderr %q", out)
	}
	for _, want := range []string{"slirp4netns (apt package slirp4netns)", "apt-get install -y slirp4netns", ".ci/run"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
}

// Every missing tool is listed at once, not the first only (a script that
// exits at the first miss would make the user install one at a time).
func TestPreflightListsEveryMissingToolAtOnce(t *testing.T) {
	code, out := runPreflight(t, "slirp4netns", "ip", "curl")
	if code == 0 {
		t.Fatalf("preflight passed with three tools missing")
	}
	if !strings.Contains(out, "apt-get install -y curl slirp4netns iproute2") {
		t.Errorf("the install line does not name all three packages:\n%s", out)
	}
}

// With everything present it says nothing and passes, so make check goes on.
func TestPreflightIsSilentWhenNothingIsMissing(t *testing.T) {
	code, out := runPreflight(t)
	if code != 0 || out != "" {
		t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, out)
	}
}

// make check's first prerequisite is preflight: a Makefile that dropped or
// moved it would let the suites fail one test at a time again.
func TestMakeCheckRunsPreflightFirst(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mk), "\n") {
		if rest, ok := strings.CutPrefix(line, "check:"); ok {
			if f := strings.Fields(rest); len(f) == 0 || f[0] != "preflight" {
				t.Fatalf("check's prerequisites %q do not start with preflight", rest)
			}
			return
		}
	}
	t.Fatal("Makefile has no check target")
}
