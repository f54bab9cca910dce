package agentd

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

const binaryVersion = "9.9.9-test"

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// agentdBinary builds cmd/agentd once per test run, with the version stamped
// the way the Makefile does it.
func agentdBinary(t testing.TB) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agentd-bin")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "agentd")
		cmd := exec.Command("go", "build", "-ldflags", "-X github.com/microvms/microvms/agentd.Version="+binaryVersion, "-o", binaryPath, "github.com/microvms/microvms/cmd/agentd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binaryErr = fmt.Errorf("go build cmd/agentd: %v\n%s", err, out)
		}
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

// process is a running agentd binary.
type process struct {
	cmd    *exec.Cmd
	base   string
	client *protocol.ClientWithResponses
	exited chan error
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func startBinary(t testing.TB, extraEnv ...string) *process {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(agentdBinary(t))
	cmd.Dir = t.TempDir()
	cmd.Env = append([]string{
		"AGENTD_PORT=" + strconv.Itoa(port),
		"AGENTD_IDENTITY_REPAIR=0",
		"PATH=" + os.Getenv("PATH"),
	}, extraEnv...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, base: fmt.Sprintf("http://127.0.0.1:%d", port), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if testing.Verbose() {
				t.Log(sc.Text())
			}
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	p.client, _ = protocol.NewClientWithResponses(p.base, protocol.WithHTTPClient(&http.Client{Transport: &contractTransport{t: t, next: http.DefaultTransport}}))
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := p.client.HealthWithResponse(context.Background())
		if err == nil && resp.StatusCode() == 200 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentd binary never answered health: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Catches: a binary that ignores AGENTD_PORT, loses the -ldflags version,
// leaks its own environment into a child, or does not exit on terminate.
func TestBinaryServesAndTerminates(t *testing.T) {
	p := startBinary(t, "AGENTD_DAEMON_SECRET=must-not-leak", "AGENTD_SSE_KEEPALIVE_SECS=1")
	ctx := context.Background()
	h, _ := p.client.HealthWithResponse(ctx)
	if h.JSON200.Version != binaryVersion || h.HTTPResponse.Header.Get(protocol.VersionHeader) != binaryVersion || h.JSON200.IdentityRepaired {
		t.Fatalf("health: %+v %v", h.JSON200, h.HTTPResponse.Header)
	}
	payload := `{"agent_token":"bin-token","env":{"LAUNCH":"1"}}`
	run, _ := p.client.HookRunWithResponse(ctx, protocol.RunHookEnvelope{RunHookPayload: &payload})
	if run.StatusCode() != 200 {
		t.Fatalf("run hook: %d", run.StatusCode())
	}
	start, _ := p.client.ExecStartWithResponse(ctx, protocol.StartRequest{ExecID: "e", Command: []string{"/usr/bin/env"}}, auth("bin-token"))
	if start.StatusCode() != 200 {
		t.Fatalf("start: %d %s", start.StatusCode(), start.Body)
	}
	deadline := time.Now().Add(20 * time.Second)
	var out string
	for {
		poll, _ := p.client.ExecPollWithResponse(ctx, "e", auth("bin-token"))
		if poll.JSON200.Phase == protocol.PhaseExited {
			out = *poll.JSON200.Stdout
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("exec never exited")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if strings.TrimSpace(out) != "LAUNCH=1" {
		t.Fatalf("child env from the binary: %q", out)
	}
	sch, _ := p.client.SchemaWithResponse(ctx)
	if !strings.Contains(string(sch.Body), `"sse_keepalive_secs": 1`) {
		t.Fatalf("schema limits do not follow AGENTD_SSE_KEEPALIVE_SECS")
	}
	term, _ := p.client.HookTerminateWithResponse(ctx)
	if term.StatusCode() != 200 {
		t.Fatalf("terminate: %d", term.StatusCode())
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("agentd exited with %v after terminate", err)
		}
		p.exited <- nil
	case <-time.After(20 * time.Second):
		t.Fatal("agentd did not exit after the terminate hook")
	}
}
