package client_test

// The session plane against the real daemon: cmd/agentd built once, started
// on a free 127.0.0.1 port per test group, spoken to over real HTTP. The
// in-package tests (fakeagent_test.go) script the daemon's answers; these
// prove the client and the daemon agree on the wire.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// agentdBinary builds cmd/agentd once per test binary, on first use, so the
// unit tests and fuzzing do not pay for it.
func agentdBinary(t *testing.T) string { t.Helper(); return testbin.Agentd(t) }

// daemon is one running agentd.
type daemon struct {
	addr string // 127.0.0.1:port
	base string // http://127.0.0.1:port
	dir  string // its working directory; a scratch area for files
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startAgentd runs the daemon with env laid over the test defaults and waits
// (with a deadline) until it answers health. It is killed at cleanup.
func startAgentd(t *testing.T, env ...string) *daemon {
	t.Helper()
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	d := &daemon{addr: addr, base: "http://" + addr, dir: t.TempDir()}
	cmd := exec.Command(agentdBinary(t))
	// A daemon dies with the test binary, even one a timeout or a mutation run kills:
	// an orphaned agentd once spun on a core for minutes after its test was gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Dir = d.dir
	cmd.Env = append([]string{
		"AGENTD_PORT=" + port,
		"AGENTD_IDENTITY_REPAIR=0",
		"AGENTD_DISK_RESERVE_BYTES=0", // the guard is agentd's to test, not the client's
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + d.dir,
	}, env...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("agentd log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(d.base + "/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		select {
		case <-exited:
			t.Fatalf("agentd exited before answering health:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentd never answered health: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// bootstrap installs token through the run hook, as the platform does.
func (d *daemon) bootstrap(t *testing.T, token string) {
	t.Helper()
	body := fmt.Sprintf(`{"runHookPayload": %q}`, fmt.Sprintf(`{"agent_token":%q}`, token))
	resp, err := http.Post(d.base+"/aws/lambda-microvms/runtime/v1/run", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("run hook: %d %s", resp.StatusCode, b)
	}
}

var quickRetry = client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond})

func session(t *testing.T, base, token string, opts ...client.Option) *client.Session {
	t.Helper()
	s, err := client.Direct(base, token, append([]client.Option{quickRetry, client.WithPollInterval(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testCtx bounds every test: nothing here may hang the suite.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	// Make sure the hard cases are in there whatever rand gave.
	copy(b, []byte{0, 0xff, 0xfe, '\n', 0, 0xc3, 0x28})
	return b
}

// readBoth drains a Process's two readers concurrently, as os/exec pipes
// require. The stream outlives contexts by design, so the test's deadline
// closes it: a child that never ends fails the test instead of hanging it.
func readBoth(ctx context.Context, p *client.Process) (stdout, stderr []byte, outErr, errErr error) {
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); stdout, outErr = io.ReadAll(p.Stdout()) }()
	go func() { defer wg.Done(); stderr, errErr = io.ReadAll(p.Stderr()) }()
	wg.Wait()
	return
}

const token = "e2e-token"

type namedTest struct {
	name string
	f    func(*testing.T)
}

// concurrently runs each test as a subtest of t, all at once, and returns
// when all have ended. For cases that spend their time waiting (a reattach
// backoff, a keepalive interval): t.Run may be called from several
// goroutines, and unlike t.Parallel this takes none of -parallel's slots,
// which on a 2-core machine are two.
func concurrently(t *testing.T, tests []namedTest) {
	t.Helper()
	var wg sync.WaitGroup
	for _, tc := range tests {
		wg.Go(func() { t.Run(tc.name, tc.f) })
	}
	wg.Wait()
}

// TestAgentdExec runs the exec surface against one bootstrapped daemon.
func TestAgentdExec(t *testing.T) {
	t.Parallel()
	d := startAgentd(t)
	d.bootstrap(t, token)
	s := session(t, d.base, token)

	// Catches: Run returning the record's text (agentd sends it through
	// strings.ToValidUTF8, so \xff becomes U+FFFD) instead of the streamed
	// bytes; a stream decoder that stops at NUL; an exit code read from a
	// default (0) instead of the record; a live writer fed a different copy
	// than the result.
	t.Run("RunExactBytesAndExitCode", func(t *testing.T) {
		ctx := testCtx(t)
		want := "a\x00b\xff\xfe\xc3\x28\n"
		var live, liveErr bytes.Buffer
		r, err := s.Run(ctx, []string{`printf 'a\000b\377\376\303\050\n'; printf 'e\000\377' >&2; exit 42`},
			client.RunOptions{StartOptions: client.StartOptions{Shell: true}, Stdout: &live, Stderr: &liveErr})
		if err != nil {
			t.Fatal(err)
		}
		if r.Stdout != want || r.Stderr != "e\x00\xff" {
			t.Fatalf("Run stdout %q stderr %q; want %q and %q", r.Stdout, r.Stderr, want, "e\x00\xff")
		}
		if live.String() != want || liveErr.String() != "e\x00\xff" {
			t.Fatalf("live writers got %q / %q", live.String(), liveErr.String())
		}
		if r.ExitCode == nil || *r.ExitCode != 42 || r.Signal != nil || r.Phase != protocol.PhaseAcked {
			t.Fatalf("record: %+v", r)
		}
		if client.KindOf(r.Err()) != taxonomy.KindExecFailed {
			t.Fatalf("exit 42 must be ExecFailed, got %v", r.Err())
		}
	})

	// Catches: the demultiplexer sending stderr chunks to the stdout reader
	// (or dropping one stream), and chunks reordered within a stream.
	t.Run("ProcessDemux", func(t *testing.T) {
		ctx := testCtx(t)
		script := `i=0; while [ $i -lt 200 ]; do printf "o$i."; printf "e$i," >&2; i=$((i+1)); done; exit 3`
		p, err := s.Spawn(ctx, []string{script}, client.StartOptions{Shell: true})
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, oe, ee := readBoth(ctx, p)
		if oe != nil || ee != nil {
			t.Fatal(oe, ee)
		}
		var wantOut, wantErr strings.Builder
		for i := range 200 {
			fmt.Fprintf(&wantOut, "o%d.", i)
			fmt.Fprintf(&wantErr, "e%d,", i)
		}
		if string(out) != wantOut.String() || string(errOut) != wantErr.String() {
			t.Fatalf("stdout %q\nstderr %q", out, errOut)
		}
		r, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.ExitCode == nil || *r.ExitCode != 3 || len(p.Gaps()) != 0 {
			t.Fatalf("record %+v gaps %v", r, p.Gaps())
		}
	})

	// Catches: Wait taking the outcome from the stream's exit event (or
	// inferring "exited 0" from the stream ending): here the stream is closed
	// before the child exits, so only the record can say 7.
	t.Run("WaitReadsTheRecord", func(t *testing.T) {
		ctx := testCtx(t)
		e, err := s.Start(ctx, []string{"read x; exit 7"}, client.StartOptions{Shell: true, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		p := e.Attach(ctx, 0)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.WriteStdinAndClose(ctx, []byte("go\n")); err != nil {
			t.Fatal(err)
		}
		r, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.ExitCode == nil || *r.ExitCode != 7 {
			t.Fatalf("Wait after the stream was closed: %+v", r)
		}
	})

	// Catches: Wait reporting exit code 0 (or -1) for a signalled child, a
	// Kill that signals only the shell and not its group (sleep would hold the
	// pipes and Wait would not return), and a second Kill on a dead group
	// turned into an error.
	t.Run("KillThenWait", func(t *testing.T) {
		ctx := testCtx(t)
		p, err := s.Spawn(ctx, []string{"sleep 300; echo never"}, client.StartOptions{Shell: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		killed, err := p.Kill(ctx)
		if err != nil || !killed {
			t.Fatalf("kill: %v %v", killed, err)
		}
		r, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Signal == nil || *r.Signal != 15 || r.ExitCode != nil {
			t.Fatalf("killed record: exit %v signal %v", r.ExitCode, r.Signal)
		}
		if client.KindOf(r.Err()) != taxonomy.KindExecFailed || r.Success() {
			t.Fatalf("a killed exec must not read as passing: %v", r.Err())
		}
		if _, err := p.Kill(ctx); err != nil {
			t.Fatalf("a second kill must succeed: %v", err)
		}
	})

	// Catches: Start minting a fresh exec_id per attempt (or the caller's id
	// ignored), which would spawn the command twice.
	t.Run("StartTwiceSpawnsOnce", func(t *testing.T) {
		ctx := testCtx(t)
		file := filepath.Join(d.dir, "once.txt")
		o := client.StartOptions{ExecID: "spawn-once", Shell: true}
		cmd := []string{"echo ran >> " + file}
		e1, err := s.Start(ctx, cmd, o)
		if err != nil {
			t.Fatal(err)
		}
		e2, err := s.Start(ctx, cmd, o)
		if err != nil {
			t.Fatal(err)
		}
		if e1.ID() != "spawn-once" || e2.ID() != e1.ID() {
			t.Fatalf("ids %q %q", e1.ID(), e2.ID())
		}
		p := e1.Attach(ctx, 0)
		if _, _, oe, ee := readBoth(ctx, p); oe != nil || ee != nil {
			t.Fatal(oe, ee)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "ran\n"); n != 1 {
			t.Fatalf("the command ran %d times", n)
		}
	})

	// Catches: WriteStdin not base64-encoding (NUL and \xff would not survive
	// JSON), WriteStdinAndClose sending only one of data and eof (cat would
	// never end, or the tail would be lost) or splitting them into two
	// requests, and a write after EOF not being the StdinClosed wire kind.
	// Catches: classifying spawn_failed by its 500 status (ServerError, which
	// is retryable), so Start sends the same doomed request four times and the
	// CLI calls a missing program "transient; run the same command again".
	t.Run("SpawnFailedIsNotRetried", func(t *testing.T) {
		ctx := testCtx(t)
		px := newCutProxy(t, d.addr, 0, 0)
		_, err := session(t, px.url(), token).Start(ctx, []string{"/nonexistent/program"}, client.StartOptions{})
		var ce *client.Error
		if !errors.As(err, &ce) {
			t.Fatalf("start of a missing program: %v, want a *client.Error", err)
		}
		if w, _ := ce.WireKind(); ce.Kind() != taxonomy.KindProtocol || w != taxonomy.WireProtocolError || ce.Slug() != taxonomy.SlugSpawnFailed {
			t.Fatalf("got kind %v wire %v slug %q, want Protocol/ProtocolError/spawn_failed", ce.Kind(), w, ce.Slug())
		}
		starts := 0
		for _, r := range px.targets() {
			if strings.HasPrefix(r, "/v1/exec/start") {
				starts++
			}
		}
		if starts != 1 {
			t.Fatalf("%d start requests reached the daemon, want exactly 1", starts)
		}
	})

	t.Run("Stdin", func(t *testing.T) {
		ctx := testCtx(t)
		e, err := s.Start(ctx, []string{"cat"}, client.StartOptions{Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		p := e.Attach(ctx, 0)
		// Through a recording (never cutting) proxy, to count the requests.
		px := newCutProxy(t, d.addr, 0, 0)
		ve := session(t, px.url(), token).Exec(e.ID())
		head, tail := []byte("head\x00\xff|"), []byte("tail\n")
		if n, err := ve.WriteStdin(ctx, head); err != nil || n != len(head) {
			t.Fatalf("write: %d %v", n, err)
		}
		if n, err := ve.WriteStdinAndClose(ctx, tail); err != nil || n != len(tail) {
			t.Fatalf("write and close: %d %v", n, err)
		}
		if reqs := px.targets(); len(reqs) != 2 {
			t.Fatalf("a write and a write-and-close must be two requests, saw %v", reqs)
		}
		out, _, oe, _ := readBoth(ctx, p)
		if oe != nil || string(out) != string(head)+string(tail) {
			t.Fatalf("cat echoed %q (%v)", out, oe)
		}
		r, err := p.Wait(ctx)
		if err != nil || !r.Success() {
			t.Fatalf("cat: %+v %v", r, err)
		}
		_, err = e.WriteStdin(ctx, []byte("late"))
		if !errors.Is(err, client.WireKindError(taxonomy.WireStdinClosed)) {
			t.Fatalf("a write after eof: %v", err)
		}

		// CloseStdin alone ends a reader too.
		e2, err := s.Start(ctx, []string{"wc", "-c"}, client.StartOptions{Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := e2.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		p2 := e2.Attach(ctx, 0)
		out2, _, _, _ := readBoth(ctx, p2)
		if strings.TrimSpace(string(out2)) != "0" {
			t.Fatalf("wc -c after a bare eof: %q", out2)
		}
		if _, err := p2.Wait(ctx); err != nil || p2.Err() != nil {
			t.Fatal(err, p2.Err())
		}
	})

	// Catches: a 404 from the exec routes dressed as fs.ErrNotExist (only a
	// file read's 404 means a missing path).
	t.Run("UnknownExecIsNotAMissingFile", func(t *testing.T) {
		ctx := testCtx(t)
		_, err := s.Exec("no-such-exec").Poll(ctx)
		if !errors.Is(err, client.WireKindError(taxonomy.WireNotFound)) || errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("poll of an unknown exec: %v", err)
		}
	})
}

// TestAgentdBootstrapAuthHealth covers the daemon before and after its run
// hook, and the open health route.
func TestAgentdBootstrapAuthHealth(t *testing.T) {
	d := startAgentd(t)
	ctx := testCtx(t)
	s := session(t, d.base, token)

	h, err := s.Health(ctx)
	if err != nil || h.Bootstrapped {
		t.Fatalf("health before bootstrap: %+v %v", h, err)
	}

	// Catches: 503 mapped to a terminal kind (the caller would give up on a
	// VM that is still booting) or to Transport (the CLI would blame the
	// endpoint).
	_, err = s.Start(ctx, []string{"true"}, client.StartOptions{})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindRetryable {
		t.Fatalf("start before bootstrap: %v", err)
	}
	if w, ok := ce.WireKind(); !ok || w != taxonomy.WireNotBootstrapped {
		t.Fatalf("start before bootstrap: wire %v %v (%v)", w, ok, err)
	}

	d.bootstrap(t, token)

	// Catches: 401 mapped to anything but Credentials (a retry loop on a
	// wrong token), or the wire kind lost on the way.
	bad := session(t, d.base, "not-the-token")
	_, err = bad.Start(ctx, []string{"true"}, client.StartOptions{})
	if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindCredentials {
		t.Fatalf("wrong token: %v", err)
	}
	// agentd answers 401 with an empty body: the status alone must classify.
	if w, ok := ce.WireKind(); !ok || w != taxonomy.WireUnauthorized {
		t.Fatalf("wrong token: wire %v %v", w, ok)
	}
	if strings.Contains(err.Error(), "not-the-token") || strings.Contains(fmt.Sprint(bad), "not-the-token") {
		t.Fatalf("the agent token leaked into %q / %v", err, bad)
	}

	// Catches: health decoded into the wrong fields (busy/execs always
	// zero), or busy counted from entries rather than live children.
	h, err = s.Health(ctx)
	if err != nil || !h.Bootstrapped || h.Busy || h.Execs != 0 {
		t.Fatalf("idle health: %+v %v", h, err)
	}
	p, err := s.Spawn(ctx, []string{"sleep", "300"}, client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h, err = s.Health(ctx)
	if err != nil || !h.Busy || h.Execs != 1 {
		t.Fatalf("busy health: %+v %v", h, err)
	}
	if _, err := p.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	h, err = s.Health(ctx)
	if err != nil || h.Busy || h.Execs != 1 {
		t.Fatalf("health after the exec ended (acked entries stay until their TTL): %+v %v", h, err)
	}
}

// cutProxy is a loopback TCP forwarder in front of agentd that closes a
// connection once it has carried cutAfter bytes of answer, for the first
// cuts connections (every connection when cuts < 0). It parses requests only
// to record their targets.
type cutProxy struct {
	t        *testing.T
	ln       net.Listener
	target   string
	cutAfter int64
	always   bool         // cut every connection
	cuts     atomic.Int64 // else cut while this stays positive
	// streamDelay holds every stream request this long (nanoseconds) before
	// passing it on: a slow first connection, as over a real network.
	streamDelay atomic.Int64

	mu       sync.Mutex
	requests []string
	conns    map[net.Conn]struct{}
}

func newCutProxy(t *testing.T, target string, cutAfter int64, cuts int64) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, ln: ln, target: target, cutAfter: cutAfter, always: cuts < 0, conns: map[net.Conn]struct{}{}}
	p.cuts.Store(cuts)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		// Idle keep-alive connections would otherwise hold the copy loops
		// until the daemon's idle timeout.
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); p.serve(c) }()
		}
	}()
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

func (p *cutProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *cutProxy) serve(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	p.track(c, true)
	p.track(up, true)
	defer p.track(c, false)
	defer p.track(up, false)
	cut := p.always || p.cuts.Add(-1) >= 0
	go func() {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				up.Close()
				return
			}
			p.mu.Lock()
			p.requests = append(p.requests, req.URL.RequestURI())
			p.mu.Unlock()
			if d := p.streamDelay.Load(); d > 0 && strings.HasSuffix(req.URL.Path, "/stream") {
				time.Sleep(time.Duration(d))
			}
			if err := req.Write(up); err != nil {
				return
			}
		}
	}()
	if cut {
		_, _ = io.CopyN(c, up, p.cutAfter)
		return // both ends close: the client sees the body end mid-frame
	}
	_, _ = io.Copy(c, up)
}

// offsetOf is the ?offset= of a recorded stream request.
func offsetOf(t *testing.T, target string) uint64 {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(u.Query().Get("offset"), 10, 64)
	if err != nil {
		t.Fatalf("stream request %q has no offset: %v", target, err)
	}
	return n
}
