package main_test

import (
	"slices"
	"strings"
	"testing"
)

// TestGuestCommandsThroughTheEmulatorProxy: the issue-21 routes reach the
// guest's agentd through the emulator's token-checking endpoint proxy like
// every other route. Wrong edit caught: a proxy allow-list of the reference's
// paths, which would answer the new routes 404 or 403.
func TestGuestCommandsThroughTheEmulatorProxy(t *testing.T) {
	vm := launchProxied(t)
	attachArgs := []string{"--endpoint", vm.endpoint, "--agent-token", vm.agentToken, "--microvm-id", vm.id, "--control-endpoint", vm.cpURL}
	env := awsEnv()
	run := func(args ...string) map[string]any {
		t.Helper()
		i := slices.IndexFunc(args, func(a string) bool { return !strings.HasPrefix(a, "-") })
		inv := cli(t, env, "", slices.Concat(args[:i+1], attachArgs, args[i+1:])...)
		m := envelope(t, inv)
		if inv.code != 0 {
			t.Fatalf("%v: exit %d %s", args, inv.code, inv.stdout)
		}
		return m["data"].(map[string]any)
	}
	// /tmp is the guest's own.
	if d := run("--json", "mkdir", "/tmp/i21/proxied"); d["created"] != true {
		t.Fatalf("mkdir: %v", d)
	}
	d := run("--json", "dir", "--depth", "2", "/tmp/i21")
	if e := d["entries"].([]any); len(e) != 1 || e[0].(map[string]any)["path"] != "/tmp/i21/proxied" {
		t.Fatalf("dir: %v", d)
	}
	run("--json", "stat", "/tmp/i21/proxied")
	run("--json", "mv", "/tmp/i21/proxied", "/tmp/i21/moved")
	if d := run("--json", "rm", "-r", "/tmp/i21"); d["removed"] != float64(2) {
		t.Fatalf("rm: %v", d)
	}
	run("--json", "exec", "--detach", "--exec-id", "proxied-sleeper", "sleep 30")
	d = run("--json", "ps")
	if len(d["execs"].([]any)) != 1 {
		t.Fatalf("ps: %v", d)
	}
	if d := run("--json", "kill", "--signal", "KILL", "proxied-sleeper"); d["killed"] != true {
		t.Fatalf("kill --signal: %v", d)
	}
	if d := run("--json", "metrics"); d["memoryTotalBytes"].(float64) <= 0 {
		t.Fatalf("metrics: %v", d)
	}
}
