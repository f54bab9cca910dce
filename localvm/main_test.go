package localvm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testbin"
)

// agentdBin is the daemon every guest of these tests runs.
var agentdBin string

func TestMain(m *testing.M) {
	Init() // this test binary is also every guest's init
	if p := os.Getenv("EMULATOR_UNPRIVILEGED_CHILD_AGENTD"); p != "" {
		// A re-run as another user or in another mount namespace: the
		// parent built the daemon.
		agentdBin = p
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

// agentToken is the token the run hook hands each test guest's daemon.
const agentToken = "emulator-test-agent-token"

func payload() string {
	b, _ := json.Marshal(map[string]any{"agent_token": agentToken})
	return string(b)
}

// loopback is the transport to a guest without Dial.
var loopback = &http.Transport{Proxy: nil, DisableCompression: true}

// postRunHook delivers the run hook as the control plane does (over
// loopback, addressed to localhost) and returns "" or why it failed.
func postRunHook(ctx context.Context, rt http.RoundTripper, addr string, body []byte, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+taxonomy.HookPrefix+"/run", bytes.NewReader(body))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Host = "localhost"
	req.Close = true
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("the run hook answered %d", resp.StatusCode)
	}
	return ""
}

// sh runs script in the guest through sh -c and returns its exit code and
// output.
func sh(t *testing.T, sess *client.Session, script string) (int, string) {
	t.Helper()
	return shWithin(t, sess, script, 30*time.Second)
}

// shWithin is sh with a deadline of its own, for work whose length is the
// machine's load, not the guest's (thousands of forks on a busy host).
func shWithin(t *testing.T, sess *client.Session, script string, d time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	r, err := sess.Run(ctx, []string{script}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	if err != nil {
		t.Fatalf("running %q in the guest: %v", script, err)
	}
	if r.ExitCode == nil {
		t.Fatalf("%q ended without an exit code (signal %v)", script, r.Signal)
	}
	return int(*r.ExitCode), r.Stdout + r.Stderr
}

func mustSh(t *testing.T, sess *client.Session, script string) string {
	t.Helper()
	code, out := sh(t, sess, script)
	if code != 0 {
		t.Fatalf("%q exited %d: %s", script, code, out)
	}
	return strings.TrimSpace(out)
}
