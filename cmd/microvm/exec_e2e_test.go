package main_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/taxonomy"
)

// started is a microvm invocation still running, for a test that signals it.
type started struct {
	cmd       *exec.Cmd
	out, errb lockedBuffer
	ctx       context.Context
	waited    bool
	args      []string
}

// startCLI runs the binary in the background with a clean environment plus
// env. bound kills it: a CLI that does not stop fails the test instead of
// hanging it.
func startCLI(t *testing.T, bound time.Duration, env []string, stdin io.Reader, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	s := &started{ctx: ctx, args: args}
	s.cmd = exec.CommandContext(ctx, bin, args...)
	s.cmd.Env = append(append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, coverEnv()...), env...)
	s.cmd.Stdin = stdin
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.errb
	if err := s.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if !s.waited {
			_ = s.cmd.Wait()
		}
	})
	return s
}

// wait ends the invocation; a CLI the bound had to kill fails the test.
func (s *started) wait(t *testing.T) invocation {
	t.Helper()
	err := s.cmd.Wait()
	s.waited = true
	if s.ctx.Err() != nil {
		t.Fatalf("microvm %v was still running at the test's bound and was killed\nstdout=%q\nstderr=%q", s.args, s.out.String(), s.errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running microvm %v: %v", s.args, err)
	}
	return invocation{stdout: s.out.String(), stderr: s.errb.String(), code: code}
}

// untilOutput waits (bounded) until the CLI has written want to stdout.
func (s *started) untilOutput(t *testing.T, want string) {
	t.Helper()
	for range 1000 {
		if strings.Contains(s.out.String(), want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the CLI never wrote %q; stdout=%q stderr=%q", want, s.out.String(), s.errb.String())
}

// untilExecExists polls the daemon (bounded by the count) until it holds the
// exec id: the CLI has started it and is following it.
func untilExecExists(t *testing.T, endpoint, token, id string) {
	t.Helper()
	for range 1000 {
		req, _ := http.NewRequest(http.MethodGet, endpoint+"/v1/exec/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("exec %s never appeared on the daemon", id)
}

// TestExecStopsWaiting: the client-side deadline and an interrupt end the
// CLI while the exec runs on. Each invocation is bounded at 20 s against a
// 30 s child; the exit code, not the clock, is asserted. Catches: the wait
// returning only when the child exits because the output copies still
// follow the stream (wait() without p.Close() on its error path: killed at
// the bound), a cancellation classed as a timeout or as Unexpected (not row
// 11), the interrupt killing the exec (health not busy), and an interrupted
// stream without its resume hint (KindInterrupted left out of stream's
// hint kinds).
func TestExecStopsWaiting(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	const bound = 20 * time.Second

	t.Run("10 --timeout ends the wait", func(t *testing.T) {
		for _, mode := range [][]string{{"--json"}, nil} {
			s := startCLI(t, bound, env, nil, append(mode, "exec", "--timeout", "1", "--", "sleep", "30")...)
			inv := s.wait(t)
			if mode == nil {
				if inv.code != int(taxonomy.KindTimeout.Exit()) || !strings.Contains(inv.stderr, taxonomy.KindTimeout.Code()) {
					t.Fatalf("raw: exit %d stderr %q", inv.code, inv.stderr)
				}
				continue
			}
			wantFailure(t, inv, taxonomy.KindTimeout, taxonomy.KindTimeout.Finding())
		}
	})

	// Catches: an attached command's interrupt exiting 11 again, whose
	// meaning is "after launch; teardown ran"; nothing was launched here.
	t.Run("10 SIGINT ends the wait and leaves the exec running", func(t *testing.T) {
		s := startCLI(t, bound, env, nil, "--json", "exec", "--exec-id", "sigint-wait", "--", "sleep", "30")
		untilExecExists(t, endpoint, token, "sigint-wait")
		if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		m := wantFailure(t, s.wait(t), taxonomy.KindTimeout, taxonomy.KindTimeout.Finding())
		if !strings.Contains(m["error"].(string), "sigint-wait") || !strings.Contains(m["error"].(string), "interrupted") {
			t.Fatalf("the failure does not name the exec to reattach to: %v", m["error"])
		}
		h := envelope(t, cli(t, env, "", "--json", "health"))["data"].(map[string]any)
		if h["busy"] != true {
			t.Fatalf("the interrupt stopped the exec: health %v", h)
		}
	})

	t.Run("10 SIGINT ends a stream with its resume hint", func(t *testing.T) {
		// The child prints first, so its output line on the CLI's stdout
		// proves the stream is attached: the exec existing on the daemon
		// only proves the start request arrived, and an interrupt landing
		// before its answer ends the CLI in start, not in the stream.
		s := startCLI(t, bound, env, nil, "--json", "exec", "--stream", "--exec-id", "sigint-stream", "--", "sh", "-c", "echo ready; exec sleep 30")
		s.untilOutput(t, `"stream":"stdout"`)
		if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		inv := s.wait(t)
		_, m := ndjson(t, inv)
		if inv.code != int(taxonomy.KindTimeout.Exit()) || m["code"] != taxonomy.KindTimeout.Code() {
			t.Fatalf("exit %d %v\n%s", inv.code, m["code"], inv.stdout)
		}
		sugg := m["suggestions"].([]any)
		// 6: past "ready\n", where this run stopped reading.
		if len(sugg) == 0 || !strings.Contains(sugg[0].(string), "--stream --from-offset 6 --exec-id sigint-stream") {
			t.Fatalf("no resume hint: %v", sugg)
		}
	})
}

// TestExecStdinPastTheReplayWindow pipes 4 MiB of random bytes through cat:
// four times the daemon's 1 MiB replay window, so the output must be read
// while stdin is still being fed. Catches: all of stdin fed before the
// output is followed (the first 3 MiB are gone before anyone reads them:
// an output gap, ERR_PLATFORM), and the raw path altering a byte. Through a
// forwarder that holds every stream request 300 ms, in wait mode and under
// --stream, it also catches stdin fed before the output stream is connected
// (fed once the Process or Stream merely exists: each connects later, and
// until a reader is attached the daemon does not hold cat back).
func TestExecStdinPastTheReplayWindow(t *testing.T) {
	endpoint, token := startAgentd(t)
	slow := newForwarder(t, endpoint, func(*http.Request) { time.Sleep(300 * time.Millisecond) })
	in := make([]byte, 4<<20)
	if _, err := rand.Read(in); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, endpoint string
		args           []string
	}{
		{"direct", endpoint, nil},
		{"slow stream, wait", slow.url, nil},
		{"slow stream, --stream", slow.url, []string{"--stream"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"MICROVM_ENDPOINT=" + tc.endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
			args := append(append([]string{"exec"}, tc.args...), "--stdin", "--", "cat")
			s := startCLI(t, time.Minute, env, bytes.NewReader(in), args...)
			inv := s.wait(t)
			if inv.code != 0 || !bytes.Equal([]byte(inv.stdout), in) {
				t.Fatalf("exit %d, %d of %d bytes back (identical %t)\nstderr=%s", inv.code, len(inv.stdout), len(in), inv.stdout == string(in), inv.stderr)
			}
		})
	}
}

// TestExecStdinFailureEndsTheWait: a daemon whose stdin cap is under one
// chunk refuses the first write, so cat never gets its EOF. Catches: a
// failed feed that does not stop the following (the CLI waits for an exit
// that cannot come and is killed at the bound), and the feed's failure
// reported as an interrupt instead of as the daemon's refusal.
func TestExecStdinFailureEndsTheWait(t *testing.T) {
	endpoint, token := startAgentd(t, "AGENTD_MAX_STDIN_WRITE_BYTES=1000")
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	for _, mode := range []string{"wait", "stream"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--json", "exec", "--stdin", "--", "cat"}
			if mode == "stream" {
				args = []string{"--json", "exec", "--stream", "--stdin", "--", "cat"}
			}
			s := startCLI(t, 20*time.Second, env, strings.NewReader(strings.Repeat("z", 5000)), args...)
			inv := s.wait(t)
			var m map[string]any
			if mode == "stream" {
				_, m = ndjson(t, inv)
			} else {
				m = envelope(t, inv)
			}
			if inv.code != int(taxonomy.KindProtocol.Exit()) || m["data"].(map[string]any)["kind"] != taxonomy.WireTooLarge.String() {
				t.Fatalf("exit %d: %v", inv.code, m)
			}
		})
	}
}
