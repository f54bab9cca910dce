package agentd

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/internal/testbin"
)

const binaryVersion = "9.9.9-test"

var ()

// agentdBinary builds cmd/agentd once per test run, with the version stamped
// the way the Makefile does it.
func agentdBinary(t testing.TB) string {
	t.Helper()
	return testbin.MustBuild(t, "cmd/agentd", testbin.Options{LDFlags: "-X github.com/microvms/microvms/agentd.Version=" + binaryVersion})
}

// process is a running agentd binary.
type process struct {
	cmd    *exec.Cmd
	base   string
	client *protocol.ClientWithResponses
	exited chan error
	logs   *logLines
}

// logLines collects a process's stderr, one JSON log line each.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

// matching returns the lines containing every one of subs.
func (l *logLines) matching(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
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

// startBinary runs agentd on a free loopback port with identity repair off
// (AGENTD_IDENTITY_REPAIR=0, the older spelling, so it stays covered).
func startBinary(t testing.TB, extraEnv ...string) *process {
	t.Helper()
	port := freePort(t)
	return launch(t, launchOpts{port: port, env: append([]string{
		"AGENTD_PORT=" + strconv.Itoa(port),
		"AGENTD_IDENTITY_REPAIR=0",
	}, extraEnv...)})
}

// launchOpts is how launch starts the binary: env is its whole environment
// (PATH aside), port is where health is polled on 127.0.0.1, and namespaced
// runs it in its own user, UTS and mount namespaces, so identity repair can
// really run (hostname, bind mount and all) without touching this machine.
type launchOpts struct {
	env        []string
	port       int
	namespaced bool
}

func launch(t testing.TB, o launchOpts) *process {
	t.Helper()
	cmd := exec.Command(agentdBinary(t))
	cmd.Dir = t.TempDir()
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, o.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if o.namespaced {
		cmd.SysProcAttr = privateNamespaces()
	}
	// A daemon dies with the test binary, even one a timeout or a mutation run kills:
	// an orphaned agentd once spun on a core for minutes after its test was gone.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		if o.namespaced {
			t.Skipf("cannot start agentd in its own user, UTS and mount namespaces (%v); a test that turns identity repair on runs only there", err)
		}
		t.Fatal(err)
	}
	p := &process{cmd: cmd, base: fmt.Sprintf("http://127.0.0.1:%d", o.port), exited: make(chan error, 1), logs: &logLines{}}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.logs.add(sc.Text())
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

// privateNamespaces gives the child its own user namespace (this user mapped
// to root in it), UTS namespace and mount namespace. A mount namespace owned
// by a new user namespace receives the parent's mounts as slaves, so nothing
// mounted in it propagates back.
func privateNamespaces() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
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
