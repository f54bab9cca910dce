package main_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testbin"
)

var (
	agentdOnce sync.Once
	agentdPath string
	agentdErr  error
)

// agentdBin builds the real daemon once per test binary: every end-to-end
// test runs the same daemon, and a rebuild per test is minutes of nothing.
func agentdBin(t *testing.T) string {
	t.Helper()
	agentdOnce.Do(func() {
		built, err := testbin.Build("cmd/agentd", testbin.Options{})
		if err != nil {
			agentdErr = err
			return
		}
		// Beside the microvm binary, where the CLI looks for it first.
		agentdPath = filepath.Join(filepath.Dir(bin), "agentd")
		agentdErr = os.Symlink(built, agentdPath)
	})
	if agentdErr != nil {
		t.Fatal(agentdErr)
	}
	return agentdPath
}

// startAgentd starts the real daemon on a free loopback port, with env laid
// over its environment, and bootstraps it through the run hook, as the
// platform would.
func startAgentd(t *testing.T, env ...string) (endpoint, token string) {
	t.Helper()
	agentd := agentdBin(t)
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, agentd)
	// A daemon dies with the test binary, even one a timeout or a mutation run kills:
	// an orphaned agentd once spun on a core for minutes after its test was gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), fmt.Sprintf("AGENTD_PORT=%d", port), "AGENTD_IDENTITY_REPAIR=0"), env...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agentd log:\n%s", logs.String())
		}
	})
	endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
	token = "e2e-token-0123456789"
	inner, _ := json.Marshal(map[string]string{"agent_token": token})
	body, _ := json.Marshal(map[string]string{"runHookPayload": string(inner)})
	deadline := time.Now().Add(20 * time.Second) // bounds the wait for the listener, asserts nothing
	for {
		resp, err := http.Post(endpoint+taxonomy.HookPrefix+"/run", "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("bootstrap: %s", resp.Status)
			}
			return endpoint, token
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentd never listened: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestEndToEndAgainstAgentd(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}

	t.Run("health", func(t *testing.T) {
		d := envelope(t, cli(t, env, "", "--json", "health"))["data"].(map[string]any)
		if d["bootstrapped"] != true {
			t.Fatalf("%v", d)
		}
	})
	// Catches: AWS_REGION parsed as --region's env default, which refuses a
	// --direct attach that never calls AWS.
	t.Run("an off-table AWS_REGION does not touch --direct", func(t *testing.T) {
		for _, v := range []string{"AWS_REGION=eu-central-1", "AWS_DEFAULT_REGION=eu-central-1"} {
			inv := cli(t, append([]string{v}, env...), "", "--json", "health")
			if d := envelope(t, inv)["data"].(map[string]any); inv.code != 0 || d["bootstrapped"] != true {
				t.Fatalf("%s: %d %v", v, inv.code, d)
			}
		}
	})
	// Catches: the command's words parsed as microvm's flags again
	// ("unknown flag -a"), a leading "--" sent as the command's first word,
	// and a multi-word command run through sh -c (its quoting lost).
	t.Run("exec takes the command's words as trailing arguments", func(t *testing.T) {
		for _, args := range [][]string{
			{"exec", "printf", "%s|%s", "-a", "two words"},
			{"exec", "--", "printf", "%s|%s", "-a", "two words"},
			{"exec", "--timeout", "30", "printf", "%s|%s", "-a", "two words"},
		} {
			inv := cli(t, env, "", args...)
			if inv.code != 0 || inv.stdout != "-a|two words" {
				t.Fatalf("microvm %q: exit %d stdout %q stderr %s", args, inv.code, inv.stdout, inv.stderr)
			}
		}
		// After "--" every word is the command's, verbatim, microvm's own
		// flag names included.
		inv := cli(t, env, "", "exec", "--", "echo", "--json")
		if inv.code != 0 || inv.stdout != "--json\n" {
			t.Fatalf("exit %d stdout %q", inv.code, inv.stdout)
		}
	})
	// The exec lines of the reference's coding-agents example
	// (examples/coding-agents-on-bedrock/run.sh), as written there: the
	// command string first, then the addressing flags, then --json or
	// --timeout. Catches: flags after the command taken as the command's
	// words (the "missing --endpoint" exit 2 the example met), a flag's
	// value taken as a command word, and a one-string command with spaces
	// no longer run through the shell.
	t.Run("the reference example's exec lines, as written", func(t *testing.T) {
		addr := []string{"--endpoint", endpoint, "--agent-token", token, "--direct"}
		inv := cli(t, nil, "", append(append([]string{"exec", "mkdir -p /tmp/ref-example/.codex"}, addr...), "--json")...)
		if d := data(envelope(t, inv)); inv.code != 0 || d["exitCode"] != float64(0) {
			t.Fatalf("exit %d %v\n%s", inv.code, d, inv.stderr)
		}
		inv = cli(t, nil, "", append(append([]string{"exec", "cat /tmp/ref-example/none 2>/dev/null; ls -la /tmp/ref-example"}, addr...), "--timeout", "60")...)
		if inv.code != 0 || !strings.Contains(inv.stdout, ".codex") {
			t.Fatalf("exit %d stdout %q\n%s", inv.code, inv.stdout, inv.stderr)
		}
		// A flag's value that looks like a flag stays the flag's.
		inv = cli(t, nil, "", append(append([]string{"exec", "echo \"$X\""}, addr...), "--env", "X=--json")...)
		if inv.code != 0 || inv.stdout != "--json\n" {
			t.Fatalf("exit %d stdout %q\n%s", inv.code, inv.stdout, inv.stderr)
		}
		// A typo before the command is still refused as a flag.
		wantFailure(t, cli(t, nil, "", append(append([]string{"--json", "exec", "--tiemout", "3"}, addr...), "true")...), taxonomy.KindInvalidArg, "")
	})
	// Catches: the limit flags parsed and dropped (the command would run
	// unlimited and exit 0): this daemon has no delegated cgroup, so limits
	// that reach it are refused, never ignored.
	t.Run("exec limits reach the daemon", func(t *testing.T) {
		for _, flag := range []string{"--memory-limit", "--cpu-millicores", "--pids-limit"} {
			inv := cli(t, env, "", "--json", "exec", flag, "67108864", "true")
			wantFailure(t, inv, taxonomy.KindProtocol, "")
			if !strings.Contains(inv.stdout, "limit") {
				t.Fatalf("%s: the refusal does not name the limits: %s", flag, inv.stdout)
			}
		}
		wantFailure(t, cli(t, env, "", "--json", "exec", "--memory-limit", "-1", "true"), taxonomy.KindInvalidArg, "")
	})
	t.Run("exec wait, raw bytes without --json", func(t *testing.T) {
		inv := cli(t, env, "", "exec", "printf 'a\\000b'")
		if inv.code != 0 || inv.stdout != "a\x00b" {
			t.Fatalf("%d %q %s", inv.code, inv.stdout, inv.stderr)
		}
	})
	t.Run("exec wait json, env split at first =", func(t *testing.T) {
		d := envelope(t, cli(t, env, "", "--json", "exec", "--env", "K=v=w", "--env", "E=", "echo \"$K|$E\""))["data"].(map[string]any)
		if d["stdout"] != "v=w|\n" || d["exitCode"] != float64(0) {
			t.Fatalf("%v", d)
		}
	})
	// Catches: a non-zero child written as a failure envelope again (the
	// reference writes status ok with the record, and exits 13).
	t.Run("13 non-zero exit", func(t *testing.T) {
		m := wantExecFailed(t, cli(t, env, "", "--json", "exec", "echo out; exit 3"))
		d := m["data"].(map[string]any)
		if d["exitCode"] != float64(3) || d["stdout"] != "out\n" {
			t.Fatalf("partial result lost: %v", d)
		}
	})
	t.Run("stream is NDJSON then one compact envelope", func(t *testing.T) {
		inv := cli(t, env, "", "--json", "exec", "--stream", "echo hi; echo err >&2")
		lines := strings.Split(strings.TrimRight(inv.stdout, "\n"), "\n")
		if inv.code != 0 || len(lines) < 2 {
			t.Fatalf("%d %q", inv.code, inv.stdout)
		}
		var last any
		for i, l := range lines {
			var v any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("line %d is not one JSON object: %q", i, l)
			}
			if i == len(lines)-1 {
				last = v
				break
			}
			if err := eventSchema.Validate(v); err != nil {
				t.Fatalf("line %d fails the streamEvent schema: %v", i, err)
			}
		}
		m := checkEnvelope(t, last, inv.code)
		d := m["data"].(map[string]any)
		if m["type"] != cliapi.TypeExecStream || d["events"] != float64(len(lines)-1) || d["bytes"] != float64(7) {
			t.Fatalf("%v", m)
		}
	})
	t.Run("stream non-zero is ERR_EXEC_FAILED as the last line", func(t *testing.T) {
		inv := cli(t, env, "", "--json", "exec", "--stream", "exit 4")
		lines := strings.Split(strings.TrimRight(inv.stdout, "\n"), "\n")
		var last any
		_ = json.Unmarshal([]byte(lines[len(lines)-1]), &last)
		m := checkEnvelope(t, last, inv.code)
		if inv.code != int(taxonomy.KindExecFailed.Exit()) || m["status"] != cliapi.StatusOK || m["type"] != cliapi.TypeExecStream || m["data"].(map[string]any)["exitCode"] != float64(4) {
			t.Fatalf("exit %d %v", inv.code, m)
		}
	})
	t.Run("detach, poll, ack", func(t *testing.T) {
		d := envelope(t, cli(t, env, "", "--json", "exec", "--detach", "--exec-id", "e2e-detach", "echo later"))["data"].(map[string]any)
		if d["execId"] != "e2e-detach" || d["phase"] != "running" {
			t.Fatalf("%v", d)
		}
		for i := 0; ; i++ { // bounded by the count, not the clock
			p := envelope(t, cli(t, env, "", "--json", "exec", "--poll", "e2e-detach"))["data"].(map[string]any)
			if p["phase"] == "exited" {
				break
			}
			if i > 200 {
				t.Fatalf("never exited: %v", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
		a := envelope(t, cli(t, env, "", "--json", "ack", "e2e-detach"))["data"].(map[string]any)
		if a["stdout"] != "later\n" {
			t.Fatalf("%v", a)
		}
		m := wantFailure(t, cli(t, env, "", "--json", "ack", "e2e-detach"), taxonomy.KindProtocol, "")
		if k := m["data"].(map[string]any)["kind"]; k != "Conflict" && k != "NotFound" {
			t.Fatalf("second ack kind %v", k)
		}
	})
	t.Run("exec --stdin and the stdin command", func(t *testing.T) {
		d := envelope(t, cli(t, env, "piped\n", "--json", "exec", "--stdin", "cat"))["data"].(map[string]any)
		if d["stdout"] != "piped\n" {
			t.Fatalf("%v", d)
		}
		// The stdin command serves an exec some other client started with a
		// stdin pipe (the CLI's own --detach refuses --stdin), so start one
		// over the wire.
		req, _ := http.NewRequest("POST", endpoint+"/v1/exec/start", strings.NewReader(`{"exec_id":"e2e-stdin","command":["cat"],"stdin":true}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("start: %v %v", err, resp)
		}
		resp.Body.Close()
		w := envelope(t, cli(t, env, "fed\n", "--json", "stdin", "e2e-stdin", "--data", "-", "--eof"))["data"].(map[string]any)
		if w["written"] != float64(4) || w["eof"] != true {
			t.Fatalf("%v", w)
		}
		for i := 0; ; i++ {
			p := envelope(t, cli(t, env, "", "--json", "exec", "--poll", "e2e-stdin"))["data"].(map[string]any)
			if p["phase"] == "exited" {
				if p["stdout"] != "fed\n" {
					t.Fatalf("%v", p)
				}
				break
			}
			if i > 200 {
				t.Fatalf("cat never saw EOF: %v", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("cp file and tar both ways", func(t *testing.T) {
		local := t.TempDir()
		src := filepath.Join(local, "in.txt")
		os.WriteFile(src, []byte("payload\n"), 0o644)
		remote := filepath.Join(t.TempDir(), "guest")
		envelope(t, cli(t, env, "", "--json", "cp", "--parents", "--mode", "0600", src, "vm:"+remote+"/f.txt"))
		back := filepath.Join(local, "back.txt")
		d := envelope(t, cli(t, env, "", "--json", "cp", "vm:"+remote+"/f.txt", back))["data"].(map[string]any)
		if b, _ := os.ReadFile(back); string(b) != "payload\n" || d["bytes"] != float64(8) {
			t.Fatalf("%q %v", b, d)
		}
		// Off a terminal the progress line names the bytes moved. Catches:
		// a download (whose total is unknown, -1) reported as "-1 B".
		if inv := cli(t, env, "", "cp", "vm:"+remote+"/f.txt", back); inv.code != 0 || !strings.Contains(inv.stderr, ": 8 B") {
			t.Fatalf("download progress: exit %d, stderr %q; want the 8 bytes moved", inv.code, inv.stderr)
		}
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		tw.WriteHeader(&tar.Header{Name: "d/x.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
		tw.Write([]byte("x\n"))
		tw.Close()
		tarIn := filepath.Join(local, "in.tar")
		os.WriteFile(tarIn, tb.Bytes(), 0o644)
		envelope(t, cli(t, env, "", "--json", "cp", "--tar", tarIn, "vm:"+remote+"/t"))
		tarOut := filepath.Join(local, "out.tar")
		envelope(t, cli(t, env, "", "--json", "cp", "--tar", "vm:"+remote+"/t", tarOut))
		f, _ := os.Open(tarOut)
		defer f.Close()
		tr := tar.NewReader(bufio.NewReader(f))
		found := false
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			found = found || strings.HasSuffix(h.Name, "d/x.txt")
		}
		if !found {
			t.Fatal("the tar round trip lost d/x.txt")
		}
	})
	t.Run("4 wrong token", func(t *testing.T) {
		// health is an open route, so a bearer route is what a wrong token meets.
		m := wantFailure(t, cli(t, nil, "", "--json", "ack", "x-1", "--direct", "--endpoint", endpoint, "--agent-token", "wrong"), taxonomy.KindCredentials, "")
		if m["data"].(map[string]any)["kind"] != "Unauthorized" {
			t.Fatalf("%v", m["data"])
		}
	})
}
