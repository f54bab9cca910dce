package agentd

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

func bootedDaemon(t *testing.T, mutate func(*Config)) *daemon {
	t.Helper()
	d := startDaemon(t, mutate)
	d.bootstrap(nil)
	return d
}

// Catches: an idempotency check outside the lock that claims the id (two
// racing retries both spawn), or a retry that spawns again after the first
// child exited.
func TestRetriedStartSpawnsOnce(t *testing.T) {
	d := bootedDaemon(t, nil)
	file := filepath.Join(t.TempDir(), "spawns")
	req := shell("once", "echo spawned >> "+file+"; sleep 0.2")
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp := d.start(req); resp.StatusCode() != http.StatusOK {
				t.Errorf("concurrent retry: %d %s", resp.StatusCode(), resp.Body)
			}
		}()
	}
	wg.Wait()
	d.waitExited("once")
	resp := d.start(req)
	if resp.StatusCode() != http.StatusOK || resp.JSON200.Phase != protocol.PhaseExited {
		t.Fatalf("retry after exit: %d %s", resp.StatusCode(), resp.Body)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "spawned"); n != 1 {
		t.Fatalf("the command ran %d times for one exec_id", n)
	}
}

// Catches: inheriting the daemon's environment (the token or anything else of
// the daemon's leaks), or merging launch and request env in the wrong order.
func TestChildEnvIsExactlyLaunchEnvThenRequestEnv(t *testing.T) {
	t.Setenv("AGENTD_DAEMON_ONLY_CANARY", "must-not-leak")
	d := startDaemon(t, nil)
	d.bootstrap(map[string]string{"FROM_LAUNCH": "yes", "SHARED": "launch", "EMPTY": ""})
	req := protocol.StartRequest{ExecID: "env", Command: []string{"/usr/bin/env"},
		Env: map[string]string{"SHARED": "request", "FROM_REQUEST": "1"}}
	d.mustStart(req)
	o := d.waitExited("env")
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(*o.Stdout, "\n"), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	want := map[string]string{"FROM_LAUNCH": "yes", "SHARED": "request", "EMPTY": "", "FROM_REQUEST": "1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("child env = %v, want exactly %v", got, want)
	}
}

// Catches: closing or abandoning the pipes when the direct child exits, which
// loses whatever a backgrounded grandchild writes afterwards.
func TestGrandchildOutputAfterChildExitIsKept(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.mustStart(shell("gc", "(sleep 0.3; echo late; echo late-err >&2) & echo early"))
	o := d.waitExited("gc")
	if *o.Stdout != "early\nlate\n" || *o.Stderr != "late-err\n" || *o.WritersMayBeAlive {
		t.Fatalf("stdout %q stderr %q writers_may_be_alive %v", *o.Stdout, *o.Stderr, *o.WritersMayBeAlive)
	}
	if *o.ExitCode != 0 {
		t.Fatalf("exit code %d", *o.ExitCode)
	}
}

// Catches: waiting for pipe EOF without a deadline (a daemonized grandchild
// holds the exec in running forever), or not reporting that it did.
func TestLingerDeadlineReportsWritersMayBeAlive(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.OutputLinger = 200 * time.Millisecond })
	d.mustStart(shell("linger", "sleep 30 & echo started"))
	o := d.waitExited("linger")
	if !*o.WritersMayBeAlive || *o.Stdout != "started\n" || *o.ExitCode != 0 {
		t.Fatalf("writers_may_be_alive %v stdout %q", *o.WritersMayBeAlive, *o.Stdout)
	}
	resp, _ := d.client.ExecKillWithResponse(context.Background(), "linger", auth(testToken))
	if !resp.JSON200.Killed {
		t.Fatal("the lingering grandchild's group was already gone")
	}
}

// Catches: a poll that takes or mutates output, an ack of a running exec that
// succeeds (dropping output still arriving), or a second ack answering an
// empty 200 that reads as "printed nothing".
func TestPollAckLifecycle(t *testing.T) {
	d := bootedDaemon(t, nil)
	ctx := context.Background()
	d.mustStart(protocol.StartRequest{ExecID: "lc", Command: []string{"sh", "-c", "read x; echo out; echo err >&2; exit 3"}, Stdin: true})
	code, o := d.poll("lc")
	if code != 200 || o.Phase != "running" || len(o.raw) != 2 {
		t.Fatalf("running poll carries more than exec_id and phase: %v", o.raw)
	}
	ack, _ := d.client.ExecAckWithResponse(ctx, "lc", auth(testToken))
	if ack.StatusCode() != 409 || ack.JSON409.Error != taxonomy.SlugStillRunning {
		t.Fatalf("ack while running: %d %s", ack.StatusCode(), ack.Body)
	}
	d.client.ExecStdinWithResponse(ctx, "lc", protocol.StdinRequest{DataB64: strp("eAo="), Signal: strp("eof")}, auth(testToken))
	first := d.waitExited("lc")
	_, second := d.poll("lc")
	if first.Phase != "exited" || *first.Stdout != "out\n" || *first.Stderr != "err\n" || *first.ExitCode != 3 ||
		first.Signal != nil || *first.Truncated || fmt.Sprint(first.raw) != fmt.Sprint(second.raw) {
		t.Fatalf("exited polls: %v / %v", first.raw, second.raw)
	}
	if _, ok := first.raw["signal"]; !ok {
		t.Fatal("an exited poll must carry signal (null), not omit it")
	}
	ack, _ = d.client.ExecAckWithResponse(ctx, "lc", auth(testToken))
	if ack.StatusCode() != 200 || ack.JSON200.Phase != protocol.PhaseAcked || *ack.JSON200.Stdout != "out\n" || *ack.JSON200.ExitCode != 3 {
		t.Fatalf("ack: %d %s", ack.StatusCode(), ack.Body)
	}
	ack, _ = d.client.ExecAckWithResponse(ctx, "lc", auth(testToken))
	if ack.StatusCode() != 409 || ack.JSON409.Error != taxonomy.SlugAlreadyAcked {
		t.Fatalf("second ack: %d %s", ack.StatusCode(), ack.Body)
	}
	code, o = d.poll("lc")
	if code != 200 || o.Phase != "acked" || o.Stdout != nil {
		t.Fatalf("poll after ack: %v", o.raw)
	}
	// Attaching after an ack terminates at once: the ack released the
	// replay ring with the heads, so the stream says the bytes are gone (one
	// gap over all of them) and ends with the same exit. Catches: an ack that
	// releases only the heads (every acked exec then pins up to
	// stream_replay_bytes until its TTL), or a release that forgets the
	// offsets (a stream that then hangs or replays nothing without a gap).
	out, gaps, exit := collect(t, d.stream("lc", nil), 0)
	if len(out) != 0 || len(gaps) != 1 || gaps[0].From != 0 || gaps[0].To != 8 || *exit.ExitCode != 3 || exit.Offset != 8 {
		t.Fatalf("stream after ack: %q gaps %+v exit %+v", out, gaps, exit)
	}
}

// Catches: collecting unacked entries (destroying output nobody read) or never
// collecting acked ones.
func TestOnlyAckedEntriesAreCollectedAfterTheTTL(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.ExecTTL = 40 * time.Millisecond })
	d.mustStart(protocol.StartRequest{ExecID: "keep", Command: []string{"true"}})
	d.mustStart(protocol.StartRequest{ExecID: "drop", Command: []string{"true"}})
	d.waitExited("keep")
	d.waitExited("drop")
	d.client.ExecAckWithResponse(context.Background(), "drop", auth(testToken))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := d.poll("drop"); code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("acked entry never collected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Several collection periods later, the unacked one is still there.
	if d.srv.execs.collect(time.Now().Add(time.Hour)) != 0 {
		t.Fatal("collection took an unacked entry")
	}
	if code, o := d.poll("keep"); code != 200 || o.Phase != "exited" {
		t.Fatalf("unacked entry: %d %v", code, o.raw)
	}
}

// Catches: a cap that stops reading the pipe (the child blocks forever), a
// marker written into the bytes, or no truncated flag.
func TestOutputCapSetsTruncated(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.MaxOutputBytes = 1000 })
	d.mustStart(shell("cap", "head -c 5000 /dev/zero | tr '\\0' a; head -c 10 /dev/zero | tr '\\0' b >&2"))
	o := d.waitExited("cap")
	if len(*o.Stdout) != 1000 || strings.Trim(*o.Stdout, "a") != "" || !*o.Truncated || *o.Stderr != "bbbbbbbbbb" {
		t.Fatalf("stdout %d bytes, truncated %v, stderr %q", len(*o.Stdout), *o.Truncated, *o.Stderr)
	}
	out, _, exit := collect(t, d.stream("cap", nil), 0)
	if len(out) != 5010 || !exit.Truncated || exit.Offset != 5010 {
		t.Fatalf("stream past the cap: %d bytes, %+v", len(out), exit)
	}
	d.mustStart(shell("small", "echo hi"))
	if o := d.waitExited("small"); *o.Truncated {
		t.Fatal("output under the cap flagged truncated")
	}
}

func groupAlive(pgid int) bool { return unix.Kill(-pgid, 0) == nil }

// Catches: signalling only the child pid (a backgrounded grandchild keeps
// running), no SIGKILL escalation for a group that ignores SIGTERM, or a
// second kill that errors instead of answering killed:false.
func TestKillSignalsTheGroupAndEscalates(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.KillGrace = 300 * time.Millisecond })
	ctx := context.Background()
	d.mustStart(shell("k", "sleep 60 & sleep 60"))
	pgid := d.srv.execs.get("k").pgid
	resp, _ := d.client.ExecKillWithResponse(ctx, "k", auth(testToken))
	if resp.StatusCode() != 200 || !resp.JSON200.Killed {
		t.Fatalf("kill: %d %s", resp.StatusCode(), resp.Body)
	}
	o := d.waitExited("k")
	if o.ExitCode != nil || o.Signal == nil || *o.Signal != int32(syscall.SIGTERM) {
		t.Fatalf("killed exec: exit_code %v signal %v", o.raw["exit_code"], o.raw["signal"])
	}
	deadline := time.Now().Add(10 * time.Second)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			t.Fatal("the backgrounded grandchild survived the group kill")
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, _ = d.client.ExecKillWithResponse(ctx, "k", auth(testToken))
	if resp.StatusCode() != 200 || resp.JSON200.Killed {
		t.Fatalf("second kill: %d %s", resp.StatusCode(), resp.Body)
	}

	marker := filepath.Join(t.TempDir(), "trapped")
	d.mustStart(shell("stubborn", "trap '' TERM; touch "+marker+"; sleep 60 & sleep 60"))
	pgid = d.srv.execs.get("stubborn").pgid
	for _, err := os.Stat(marker); err != nil; _, err = os.Stat(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the stubborn shell never installed its trap")
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.client.ExecKillWithResponse(ctx, "stubborn", auth(testToken))
	o = d.waitExited("stubborn")
	if o.Signal == nil || *o.Signal != int32(syscall.SIGKILL) {
		t.Fatalf("a group ignoring SIGTERM: signal %v", o.raw["signal"])
	}
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			t.Fatal("the stubborn group survived escalation")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Catches: a timeout validated only after spawning (a child nobody reaps), or
// a timeout that never fires.
func TestTimeout(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.KillGrace = time.Second })
	marker := filepath.Join(t.TempDir(), "ran")
	for _, bad := range []float64{0, -1} {
		req := shell("bad-timeout", "touch "+marker)
		req.TimeoutSec = &bad
		// Off contract on purpose: the spec requires timeout_sec > 0.
		resp, err := d.client.ExecStartWithResponse(offContract(context.Background()), req, auth(testToken))
		if err != nil || resp.StatusCode() != 400 || resp.JSON400.Error != taxonomy.SlugMalformedRequest {
			t.Fatalf("timeout %v: %v %d", bad, err, resp.StatusCode())
		}
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a start with an invalid timeout spawned its child")
	}
	req := shell("to", "sleep 60")
	secs := 0.2
	req.TimeoutSec = &secs
	d.mustStart(req)
	if o := d.waitExited("to"); o.Signal == nil || *o.Signal != int32(syscall.SIGTERM) {
		t.Fatalf("timed out exec: %v", o.raw)
	}
}

// Catches: 404 for a spawn failure (reads as unknown exec), registering an
// exec whose spawn failed, or accepting a start that names no command.
func TestStartValidation(t *testing.T) {
	d := bootedDaemon(t, nil)
	for name, req := range map[string]protocol.StartRequest{
		"empty exec_id":        {Command: []string{"true"}},
		"no command":           {ExecID: "x"},
		"empty argv":           {ExecID: "x", Command: []string{}},
		"bad env key":          {ExecID: "x", Command: []string{"true"}, Env: map[string]string{"A=B": "1"}},
		"NUL in an argument":   {ExecID: "x", Command: []string{"echo", "a\x00b"}},
		"NUL in an env value":  {ExecID: "x", Command: []string{"true"}, Env: map[string]string{"A": "a\x00"}},
		"empty env key":        {ExecID: "x", Command: []string{"true"}, Env: map[string]string{"": "1"}},
		"negative-free uint32": {ExecID: "x", Command: []string{}, Shell: false},
	} {
		// Some of these break the spec on purpose (command null).
		resp, err := d.client.ExecStartWithResponse(offContract(context.Background()), req, auth(testToken))
		if err != nil || resp.StatusCode() != 400 || resp.JSON400.Error != taxonomy.SlugMalformedRequest {
			t.Errorf("%s: %v %d %s", name, err, resp.StatusCode(), resp.Body)
		}
	}
	resp, err := d.client.ExecStartWithBodyWithResponse(offContract(context.Background()), "application/json", strings.NewReader(`{"exec_id": 5`), auth(testToken))
	if err != nil || resp.StatusCode() != 400 {
		t.Fatalf("malformed JSON: %v %d", err, resp.StatusCode())
	}
	resp, _ = d.client.ExecStartWithBodyWithResponse(offContract(context.Background()), "application/json", strings.NewReader(`{"exec_id":"u","command":["true"],"user":-1}`), auth(testToken))
	if resp.StatusCode() != 400 {
		t.Fatalf("negative uid: %d", resp.StatusCode())
	}
	r := d.start(protocol.StartRequest{ExecID: "missing", Command: []string{"/nonexistent/binary"}})
	if r.StatusCode() != 500 || r.JSON500.Error != taxonomy.SlugSpawnFailed {
		t.Fatalf("missing binary: %d %s", r.StatusCode(), r.Body)
	}
	r = d.start(protocol.StartRequest{ExecID: "missing-cwd", Command: []string{"true"}, Cwd: strp("/nonexistent/dir")})
	if r.StatusCode() != 500 {
		t.Fatalf("missing cwd: %d %s", r.StatusCode(), r.Body)
	}
	if code, _ := d.poll("missing"); code != 404 {
		t.Fatalf("a failed spawn registered an exec: %d", code)
	}
}

// Catches: wrapping scripts in a brace group (empty and comment-terminated
// scripts become syntax errors), passing argv through a shell, or defaulting
// an omitted cwd to / instead of inheriting the daemon's.
func TestShellArgvAndCwd(t *testing.T) {
	d := bootedDaemon(t, nil)
	run := func(id string, req protocol.StartRequest) outcome {
		t.Helper()
		req.ExecID = id
		d.mustStart(req)
		return d.waitExited(id)
	}
	if o := run("empty", shell("", "")); *o.ExitCode != 0 {
		t.Errorf("empty script: exit %d", *o.ExitCode)
	}
	if o := run("comment", shell("", "true # trailing comment")); *o.ExitCode != 0 {
		t.Errorf("comment-terminated script: exit %d", *o.ExitCode)
	}
	if o := run("brace", shell("", "echo a; }; echo escaped")); strings.Contains(*o.Stdout, "escaped") && *o.ExitCode == 0 {
		t.Errorf("unbalanced brace: %q exit %d", *o.Stdout, *o.ExitCode)
	}
	if o := run("multi", protocol.StartRequest{Command: []string{"echo one", "echo two"}, Shell: true}); *o.Stdout != "one\ntwo\n" {
		t.Errorf("multi-element script: %q", *o.Stdout)
	}
	if o := run("argv", protocol.StartRequest{Command: []string{"echo", "$HOME", "a b", ";", "id"}}); *o.Stdout != "$HOME a b ; id\n" {
		t.Errorf("argv went through a shell: %q", *o.Stdout)
	}
	wd, _ := os.Getwd()
	if o := run("inherit", protocol.StartRequest{Command: []string{"pwd"}}); strings.TrimSpace(*o.Stdout) != wd {
		t.Errorf("omitted cwd: %q, want the daemon's %q", *o.Stdout, wd)
	}
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	if o := run("cwd", protocol.StartRequest{Command: []string{"pwd"}, Cwd: &dir}); strings.TrimSpace(*o.Stdout) != dir {
		t.Errorf("cwd: %q, want %q", *o.Stdout, dir)
	}
	if o := run("pgrp", shell("", "ps -o pgid= -p $$")); strings.TrimSpace(*o.Stdout) == fmt.Sprint(syscall.Getpgrp()) {
		t.Errorf("the child shares the daemon's process group")
	}
}

// Catches: ignoring user/group (the child runs as root), or a demotion path
// that fails for an unprivileged daemon asking for its own ids.
func TestDemotion(t *testing.T) {
	d := bootedDaemon(t, nil)
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	d.mustStart(protocol.StartRequest{ExecID: "self", Command: []string{"id", "-u"}, User: &uid, Group: &gid})
	if o := d.waitExited("self"); strings.TrimSpace(*o.Stdout) != fmt.Sprint(uid) {
		t.Fatalf("demoting to our own ids: %q %q", *o.Stdout, *o.Stderr)
	}
	if os.Getuid() != 0 {
		t.Skip("demoting to another user needs root")
	}
	nobody := uint32(65534)
	d.mustStart(protocol.StartRequest{ExecID: "nobody", Command: []string{"sh", "-c", "id -u; id -g; id -G"}, User: &nobody, Group: &nobody})
	o := d.waitExited("nobody")
	if lines := strings.Fields(*o.Stdout); len(lines) != 3 || lines[0] != "65534" || lines[1] != "65534" || lines[2] != "65534" {
		t.Fatalf("demoted ids: %q", *o.Stdout)
	}
}

// Catches: giving every child a stdin pipe (a read hangs), inferring EOF, a
// write without a deadline, or one answer for "never requested" and "closed".
func TestStdin(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) {
		c.StdinWriteTimeout = 200 * time.Millisecond
		c.MaxStdinWriteBytes = 1 << 20
	})
	ctx := context.Background()
	write := func(id string, data *string, signal *string) *protocol.ExecStdinReply {
		t.Helper()
		ctx := ctx
		if signal != nil && *signal != "eof" {
			ctx = offContract(ctx) // the spec allows only eof; this checks the daemon agrees
		}
		resp, err := d.client.ExecStdinWithResponse(ctx, id, protocol.StdinRequest{DataB64: data, Signal: signal}, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	b64 := func(s string) *string { return strp(b64enc([]byte(s))) }

	d.mustStart(protocol.StartRequest{ExecID: "null", Command: []string{"cat"}})
	if o := d.waitExited("null"); *o.Stdout != "" || *o.ExitCode != 0 {
		t.Fatalf("cat without stdin: %v", o.raw)
	}
	if r := write("null", b64("x"), nil); r.StatusCode() != 409 || r.JSON409.Error != taxonomy.SlugStdinNotRequested {
		t.Fatalf("write to a no-stdin exec: %d %s", r.StatusCode(), r.Body)
	}
	if r := write("nope", b64("x"), nil); r.StatusCode() != 404 {
		t.Fatalf("unknown exec: %d", r.StatusCode())
	}

	d.mustStart(protocol.StartRequest{ExecID: "cat", Command: []string{"cat"}, Stdin: true})
	if r := write("cat", b64("hello "), nil); r.StatusCode() != 200 || r.JSON200.Written != 6 || r.JSON200.EOF {
		t.Fatalf("write: %d %s", r.StatusCode(), r.Body)
	}
	if r := write("cat", strp("!!not base64"), nil); r.StatusCode() != 400 {
		t.Fatalf("bad base64: %d", r.StatusCode())
	}
	if r := write("cat", nil, strp("close")); r.StatusCode() != 400 {
		t.Fatalf("unknown signal: %d", r.StatusCode())
	}
	if r := write("cat", strp(b64enc(make([]byte, 1<<20+1))), nil); r.StatusCode() != 413 || r.JSON413.Error != taxonomy.SlugStdinWriteTooLarge {
		t.Fatalf("oversized write: %d %.200s", r.StatusCode(), r.Body)
	}
	if r := write("cat", b64("world\x00\xff"), strp("eof")); r.StatusCode() != 200 || !r.JSON200.EOF || r.JSON200.Written != 7 {
		t.Fatalf("data+eof: %d %s", r.StatusCode(), r.Body)
	}
	o := d.waitExited("cat")
	out, _, _ := collect(t, d.stream("cat", nil), 0)
	if string(out) != "hello world\x00\xff" || *o.ExitCode != 0 {
		t.Fatalf("cat echoed %q", out)
	}
	if r := write("cat", nil, strp("eof")); r.StatusCode() != 410 || r.JSON410.Error != taxonomy.SlugStdinClosed {
		t.Fatalf("second eof: %d %s", r.StatusCode(), r.Body)
	}

	d.mustStart(protocol.StartRequest{ExecID: "deaf", Command: []string{"sleep", "60"}, Stdin: true})
	r := write("deaf", strp(b64enc(make([]byte, 1<<20))), nil)
	if r.StatusCode() != 408 || r.JSON408.Error != taxonomy.SlugStdinWriteTimeout {
		t.Fatalf("write to a child that never reads: %d %s", r.StatusCode(), r.Body)
	}
	d.client.ExecKillWithResponse(ctx, "deaf", auth(testToken))

	d.mustStart(protocol.StartRequest{ExecID: "closer", Command: []string{"sh", "-c", "exec 0<&-; sleep 60"}, Stdin: true})
	time.Sleep(100 * time.Millisecond)
	if r := write("closer", b64("x"), nil); r.StatusCode() != 410 {
		t.Fatalf("write to a child that closed stdin: %d %s", r.StatusCode(), r.Body)
	}
	d.client.ExecKillWithResponse(ctx, "closer", auth(testToken))

	d.mustStart(protocol.StartRequest{ExecID: "gone", Command: []string{"true"}, Stdin: true})
	d.waitExited("gone")
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := write("gone", b64("x"), nil)
		if r.StatusCode() == 410 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write after exit: %d", r.StatusCode())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
