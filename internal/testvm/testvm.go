// Package testvm holds what the tests of the guest runtime (localvm), the
// image builder (imagebuild) and the control-plane fake (emulator) share
// to drive real local guests: the TestMain that builds agentd, running
// shell in a guest, the escape probe, and (on Linux) re-running a test as
// an unprivileged user. One copy, so a fix to how a test reaches its
// guest reaches every package's tests.
//
// It is a test tool: it must never be imported by non-test code, and it
// must not import localvm (localvm's own tests import it), so what it
// needs of the runtime is handed in.
package testvm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/internal/testbin"
)

// agentd is the daemon Main built (or was handed), for RerunAsNobody.
var agentd string

// Main is a guest test binary's TestMain after its localvm.Init: it builds
// agentd into *bin (or takes the parent's, in a re-run as another user or
// in another mount namespace), runs the tests, cleans up and exits.
func Main(m *testing.M, bin *string) {
	if p := os.Getenv("EMULATOR_UNPRIVILEGED_CHILD_AGENTD"); p != "" {
		agentd, *bin = p, p
		os.Exit(m.Run())
	}
	p, err := testbin.Build("cmd/agentd", testbin.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentd, *bin = p, p
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// AgentToken is the token the run hook hands each test guest's daemon.
const AgentToken = "emulator-test-agent-token"

// Payload is the run hook payload that hands a guest AgentToken.
func Payload() string {
	b, _ := json.Marshal(map[string]any{"agent_token": AgentToken})
	return string(b)
}

// Sh runs script in the guest through sh -c and returns its exit code and
// output.
func Sh(t *testing.T, sess *client.Session, script string) (int, string) {
	t.Helper()
	return ShWithin(t, sess, script, 30*time.Second)
}

// ShWithin is Sh with a deadline of its own, for work whose length is the
// machine's load, not the guest's (thousands of forks on a busy host).
func ShWithin(t *testing.T, sess *client.Session, script string, d time.Duration) (int, string) {
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

// MustSh is Sh for a script that must succeed: its trimmed output.
func MustSh(t *testing.T, sess *client.Session, script string) string {
	t.Helper()
	code, out := Sh(t, sess, script)
	if code != 0 {
		t.Fatalf("%q exited %d: %s", script, code, out)
	}
	return strings.TrimSpace(out)
}

// StartQuietly starts script in the guest and ignores how its session
// ends: the script may kill the daemon serving it.
func StartQuietly(t *testing.T, sess *client.Session, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, _ = sess.Run(ctx, []string{script}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
}

// EscapeProbe is the path of internal/escapeprobe (what a hostile guest
// tries), built once per test binary.
var EscapeProbe = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("EMULATOR_ESCAPE_PROBE"); p != "" {
		return p, nil // a rootless re-run: the parent built it
	}
	return testbin.Build("internal/escapeprobe", testbin.Options{})
})

// WithProbe copies the escape probe into the guest at /tmp/escapeprobe.
func WithProbe(t *testing.T, sess *client.Session) {
	t.Helper()
	bin, err := EscapeProbe()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := sess.WriteFile(t.Context(), "/tmp/escapeprobe", f, 0o755); err != nil {
		t.Fatal(err)
	}
}

// AgentdPidScript prints the guest pid of the daemon (argv[0] "agentd").
const AgentdPidScript = `grep -la '^agentd' /proc/[0-9]*/cmdline 2>/dev/null | sed -n 's|^/proc/\([0-9]*\)/cmdline$|\1|p' | head -1`

// CopyFile copies src to dst with mode, failing t on error.
func CopyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, raw, mode); err != nil {
		t.Fatal(err)
	}
}

// CgroupV2Only reports whether the host mounts the unified hierarchy alone.
func CgroupV2Only() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// Dockerfile is the build the Dockerfile tests run on testimage.Base
// (example.test/base:1, with its user builder) and a context holding
// tool.sh: ARG, ENV, WORKDIR, COPY --chmod, RUN in both forms, USER.
const Dockerfile = `FROM example.test/base:1
ARG GREETING=hello
ENV APP_HOME=/srv/app
WORKDIR $APP_HOME
COPY --chmod=0750 tool.sh ./bin/
RUN echo "$GREETING from run, base said $FROM_BASE" > made-by-run && mkdir -p /opt/data && chown 1000:1000 /opt/data
USER builder
RUN ["/bin/sh", "-c", "echo mine > /opt/data/owned-by-builder; id -u > /opt/data/uid"]
USER root
CMD ["/agentd"]
`
