package agentd

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// tool writes an executable script under dir/sub that prints its name.
func tool(t *testing.T, dir, sub, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, sub, name), []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// A command name is searched in the daemon's PATH when the child's env has
// none, and a relative PATH entry is taken from the request's cwd. Catches,
// in lookPath: the daemon's PATH ignored when set (`path == ""` negated,
// which searches the built-in default instead), and a relative entry judged
// from the daemon's cwd (`dir != ""` negated).
func TestCommandNamesAreSearchedWhereTheChildWillLook(t *testing.T) {
	d := bootedDaemon(t, nil)
	dir := t.TempDir()
	tool(t, dir, "daemonbin", "only-on-daemon-path")
	t.Setenv("PATH", filepath.Join(dir, "daemonbin")+":"+os.Getenv("PATH"))
	d.mustStart(protocol.StartRequest{ExecID: "daemon-path", Command: []string{"only-on-daemon-path"}})
	if o := d.waitExited("daemon-path"); o.Stdout == nil || strings.TrimSpace(*o.Stdout) != "only-on-daemon-path" {
		t.Fatalf("a command found only on the daemon's PATH: %s", o.raw["stdout"])
	}

	tool(t, dir, "rel", "only-in-cwd-bin")
	d.mustStart(protocol.StartRequest{ExecID: "relative", Command: []string{"only-in-cwd-bin"}, Cwd: &dir,
		Env: map[string]string{"PATH": "rel"}})
	if o := d.waitExited("relative"); o.Stdout == nil || strings.TrimSpace(*o.Stdout) != "only-in-cwd-bin" {
		t.Fatalf("a command found through a relative PATH entry under cwd: %s", o.raw["stdout"])
	}
}

// A demoted child does not keep the daemon's supplementary groups: a root
// daemon in a group such as disk or docker would hand it to every command
// it demotes. Catches: NoSetGroups set for a root daemon
// (`os.Getuid() != 0` negated in buildSpec), which skips setgroups. The
// test process joins group 4242 for the test's length (setgroups applies to
// every thread; no agentd test runs in parallel).
func TestDemotionDropsTheDaemonsSupplementaryGroups(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("demoting to another user needs root")
	}
	was, err := syscall.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgroups(append(append([]int(nil), was...), 4242)); err != nil {
		t.Skipf("setgroups: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Setgroups(was); err != nil {
			t.Errorf("restoring the test's groups: %v", err)
		}
	})
	d := bootedDaemon(t, nil)
	nobody := uint32(65534)
	d.mustStart(protocol.StartRequest{ExecID: "demoted", Command: []string{"id", "-G"}, User: &nobody, Group: &nobody})
	if o := d.waitExited("demoted"); o.Stdout == nil || strings.TrimSpace(*o.Stdout) != "65534" {
		t.Fatalf("a demoted child's groups: %s, want only 65534", o.raw["stdout"])
	}
	// Not demoted, the child is the daemon's and keeps them.
	d.mustStart(protocol.StartRequest{ExecID: "kept", Command: []string{"id", "-G"}})
	if o := d.waitExited("kept"); o.Stdout == nil || !strings.Contains(*o.Stdout, "4242") {
		t.Fatalf("an undemoted child's groups: %s, want 4242 among them", o.raw["stdout"])
	}
}
