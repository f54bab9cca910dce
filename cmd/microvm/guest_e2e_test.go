package main_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestGuestCommandsAgainstAgentd runs stat, dir, mkdir, mv, rm, ps, metrics
// and kill --signal through the built CLI against a real agentd, validating
// every envelope against docs/envelope.schema.json. Wrong edits caught: dir
// stopping after the daemon's first page; mv replacing without --replace;
// rm -r not sent as recursive; a refusal exiting with anything but the
// Protocol row; kill --signal escalating like plain kill.
func TestGuestCommandsAgainstAgentd(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	root := t.TempDir()
	data := func(inv invocation, typ string) map[string]any {
		t.Helper()
		m := envelope(t, inv)
		if inv.code != 0 || m["type"] != typ {
			t.Fatalf("want %s, got exit %d: %s %s", typ, inv.code, inv.stdout, inv.stderr)
		}
		return m["data"].(map[string]any)
	}

	d := data(cli(t, env, "", "--json", "mkdir", filepath.Join(root, "a", "b")), cliapi.TypeMkdir)
	if d["created"] != true {
		t.Fatalf("mkdir: %v", d)
	}
	for _, n := range []string{"1", "2", "3"} {
		if err := os.WriteFile(filepath.Join(root, "a", "b", n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d = data(cli(t, env, "", "--json", "dir", "--depth", "3", "--page", "1", "vm:"+root), cliapi.TypeDir)
	if n := len(d["entries"].([]any)); n != 5 {
		t.Fatalf("dir --depth 3 --page 1: %d entries, want 5 (a, a/b, three files): %v", n, d)
	}
	d = data(cli(t, env, "", "--json", "stat", filepath.Join(root, "a", "b", "2")), cliapi.TypeStat)
	if e := d["entry"].(map[string]any); e["size"] != float64(1) || e["type"] != "file" {
		t.Fatalf("stat: %v", e)
	}
	inv := cli(t, env, "", "--json", "mv", filepath.Join(root, "a", "b", "1"), filepath.Join(root, "a", "b", "2"))
	if m := wantFailure(t, inv, taxonomy.KindProtocol, ""); m["data"].(map[string]any)["kind"] != "Conflict" {
		t.Fatalf("mv onto an existing file: %v", m)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a", "b", "2")); string(b) != "2" {
		t.Fatalf("a refused mv changed the destination: %q", b)
	}
	data(cli(t, env, "", "--json", "mv", "--replace", filepath.Join(root, "a", "b", "1"), filepath.Join(root, "a", "b", "2")), cliapi.TypeMove)
	wantFailure(t, cli(t, env, "", "--json", "rm", filepath.Join(root, "a")), taxonomy.KindProtocol, "")
	d = data(cli(t, env, "", "--json", "rm", "-r", filepath.Join(root, "a")), cliapi.TypeRemove)
	if d["removed"] != float64(4) {
		t.Fatalf("rm -r: %v, want 4 removed", d)
	}
	wantFailure(t, cli(t, env, "", "--json", "stat", filepath.Join(root, "a")), taxonomy.KindProtocol, "")

	d = data(cli(t, env, "", "--json", "metrics"), cliapi.TypeMetrics)
	if d["memoryTotalBytes"].(float64) <= 0 || d["cpuCount"].(float64) < 1 {
		t.Fatalf("metrics: %v", d)
	}

	// A detached sleeper, signalled with STOP then KILL: STOP does not end it,
	// which plain kill's escalation would.
	data(cli(t, env, "", "--json", "exec", "--detach", "--exec-id", "sleeper", "sleep 30"), cliapi.TypeExec)
	d = data(cli(t, env, "", "--json", "ps"), cliapi.TypePs)
	execs := d["execs"].([]any)
	if len(execs) != 1 || execs[0].(map[string]any)["execId"] != "sleeper" || execs[0].(map[string]any)["phase"] != "running" {
		t.Fatalf("ps: %v", d)
	}
	wantFailure(t, cli(t, env, "", "--json", "kill", "--signal", "SEGV", "sleeper"), taxonomy.KindProtocol, "")
	d = data(cli(t, env, "", "--json", "kill", "--signal", "SIGKILL", "sleeper"), cliapi.TypeKill)
	if d["killed"] != true || d["signal"] != "KILL" {
		t.Fatalf("kill --signal SIGKILL: %v", d)
	}
}

// TestWatchCommand: watch reports changes until --count, and refuses to
// start without a bound. Wrong edits caught: --count not honoured (the
// command would run to its --for and report more); a watch without any
// bound accepted (it would never write its envelope).
func TestWatchCommand(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	wantFailure(t, cli(t, env, "", "--json", "watch", t.TempDir()), taxonomy.KindInvalidArg, "")
	dir := t.TempDir()
	s := startCLI(t, 60*time.Second, env, nil, "--json", "watch", "--count", "2", "--for", "50s", dir)
	// The watch's start is not visible from here: keep making files until
	// the command has seen two and exited (a zombie still answers signal 0,
	// so the check is its state in /proc).
	for i := 0; i < 400; i++ {
		if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Millisecond)
		st, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
	}
	inv := s.wait(t)
	m := envelope(t, inv)
	if inv.code != 0 || m["type"] != cliapi.TypeWatch {
		t.Fatalf("watch: exit %d %s %s", inv.code, inv.stdout, inv.stderr)
	}
	events := m["data"].(map[string]any)["events"].([]any)
	if len(events) != 2 || events[0].(map[string]any)["op"] != "create" {
		t.Fatalf("watch --count 2: %v", events)
	}
}
