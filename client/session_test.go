package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client/internal/ssetest"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

func proxied(t *testing.T, url, token string, m TokenMinter, opts ...Option) *Session {
	t.Helper()
	s, err := Proxied(url, token, m, append([]Option{fastRetry}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func direct(t *testing.T, url, token string, opts ...Option) *Session {
	t.Helper()
	s, err := Direct(url, token, append([]Option{fastRetry}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Catches: a token minted once at construction (expires mid-run), a refresh
// at or after the 60-minute ceiling, or a clock read that ignores injection.
func TestProxyTokenRefreshesBeforeCeiling(t *testing.T) {
	f, srv := newFakeAgent(t)
	clock := &manualClock{now: time.Date(2026, 8, 7, 12, 0, 0, 0, time.UTC)}
	m := &countingMinter{}
	s := proxied(t, srv.URL, f.token, m, WithClock(clock.Now))
	ctx := context.Background()
	if m.count() != 0 {
		t.Fatal("constructing a session must not mint (or probe)")
	}
	if _, err := s.Health(ctx); err != nil {
		t.Fatal(err)
	}
	h := f.lastHeader()
	if h.Get(taxonomy.ProxyAuthHeader) != "jwe-1" || h.Get(taxonomy.ProxyPortHeader) != "9000" {
		t.Fatalf("proxy headers: %v", h)
	}
	// Catches: health carrying the bearer (it is an open route).
	if h.Get("Authorization") != "" {
		t.Error("health must not carry the agent token")
	}
	if got := m.requests[0]; got.Minutes != 60 || !slices.Equal(got.Ports, []int{9000}) {
		t.Errorf("mint request %+v", got)
	}
	steps := []struct {
		advance time.Duration
		mints   int
		why     string
	}{
		{29 * time.Minute, 1, "re-minting on every request"},
		{59 * time.Second, 1, "re-minting before the refresh interval"},
		// Exactly the refresh interval after the mint: the token is not
		// reused (catches the age test made `<=`).
		{time.Second, 2, "not refreshing at half the ceiling (30 min)"},
		{31 * time.Minute, 3, "refreshing only once"},
	}
	for _, st := range steps {
		clock.advance(st.advance)
		if _, err := s.Health(ctx); err != nil {
			t.Fatal(err)
		}
		if m.count() != st.mints {
			t.Fatalf("after +%s: %d mints, want %d (catches: %s)", st.advance, m.count(), st.mints, st.why)
		}
	}
	if got := f.lastHeader().Get(taxonomy.ProxyAuthHeader); got != "jwe-3" {
		t.Errorf("request carried %q, want the fresh jwe-3", got)
	}
	// Catches: the session's own mint count going the wrong way.
	if s.Mints() != 3 {
		t.Errorf("Mints() = %d after three mints", s.Mints())
	}
	// Catches: a refresh interval at the ceiling being accepted.
	for _, d := range []time.Duration{60 * time.Minute, 61 * time.Minute, 0} {
		if _, err := Proxied(srv.URL, "x", m, WithRefreshAfter(d)); err == nil {
			t.Errorf("WithRefreshAfter(%s) accepted", d)
		}
	}
	if _, err := Proxied(srv.URL, "x", m, WithRefreshAfter(59*time.Minute)); err != nil {
		t.Errorf("59 min is below the ceiling: %v", err)
	}
}

// Catches: Invalidate being a no-op (a token minted before a suspend is reused
// after resume).
func TestInvalidateReMints(t *testing.T) {
	f, srv := newFakeAgent(t)
	m := &countingMinter{}
	s := proxied(t, srv.URL, f.token, m)
	ctx := context.Background()
	s.Health(ctx)
	s.Health(ctx)
	if m.count() != 1 {
		t.Fatalf("%d mints before invalidate", m.count())
	}
	s.Invalidate()
	if m.count() != 1 {
		t.Fatal("Invalidate must not mint by itself")
	}
	s.Health(ctx)
	if m.count() != 2 || f.lastHeader().Get(taxonomy.ProxyAuthHeader) != "jwe-2" {
		t.Fatalf("after invalidate: %d mints, header %q", m.count(), f.lastHeader().Get(taxonomy.ProxyAuthHeader))
	}
}

// Catches: a mint for a new port replacing the scope (the agent port would
// then 403 and re-mint on every alternation) or not widening it at all.
func TestPortScopeExtends(t *testing.T) {
	f, srv := newFakeAgent(t)
	m := &countingMinter{}
	s := proxied(t, srv.URL, f.token, m)
	ctx := context.Background()
	s.Health(ctx)
	h, err := s.ConnectHeaders(ctx, 8080)
	if err != nil {
		t.Fatal(err)
	}
	if h.Get(taxonomy.ProxyPortHeader) != "8080" || h.Get(taxonomy.ProxyAuthHeader) != "jwe-2" {
		t.Fatalf("connect headers %v", h)
	}
	if got := m.requests[1].Ports; !slices.Equal(got, []int{8080, 9000}) {
		t.Fatalf("widened mint asked for %v, want [8080 9000]", got)
	}
	// Both ports are now covered: no further mint for either.
	s.Health(ctx)
	s.ConnectHeaders(ctx, 8080)
	if m.count() != 2 {
		t.Fatalf("%d mints; alternating covered ports must not re-mint", m.count())
	}
	s.ConnectHeaders(ctx, 3000)
	if got := m.requests[2].Ports; !slices.Equal(got, []int{3000, 8080, 9000}) {
		t.Fatalf("third mint asked for %v", got)
	}
	// Direct sessions have no proxy headers.
	d := direct(t, srv.URL, f.token)
	if h, _ := d.ConnectHeaders(ctx, 8080); len(h) != 0 {
		t.Errorf("direct connect headers %v", h)
	}
}

// Catches: minting outside the retry path (one throttled mint fails a
// healthy run), or a mint failure classified as non-retryable.
func TestMintFailureIsRetriedInRequestPath(t *testing.T) {
	f, srv := newFakeAgent(t)
	m := &countingMinter{fail: 2}
	s := proxied(t, srv.URL, f.token, m)
	if _, err := s.Health(context.Background()); err != nil {
		t.Fatalf("two failed mints must be retried: %v", err)
	}
	m.fail = 10
	s.Invalidate()
	_, err := s.Health(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Kind() != taxonomy.KindRetryable {
		t.Fatalf("want retryable AuthTokenMint, got %v", err)
	}
	if w, _ := e.WireKind(); w != taxonomy.WireAuthTokenMint {
		t.Errorf("wire kind %v", w)
	}
	// A token map without the auth header is a mint failure, not a cached token.
	bad := TokenMinterFunc(func(context.Context, MintRequest) (ProxyToken, error) {
		return NewProxyToken(map[string]string{"authToken": "x"}), nil
	})
	s2 := proxied(t, srv.URL, f.token, bad)
	if _, err := s2.Health(context.Background()); !errors.Is(err, WireKindError(taxonomy.WireAuthTokenMint)) {
		t.Errorf("token map without %s: %v", taxonomy.ProxyAuthHeader, err)
	}
}

// Catches: the agent token or the proxy token reaching fmt or slog output.
func TestTokensAreRedacted(t *testing.T) {
	f, srv := newFakeAgent(t)
	s := proxied(t, srv.URL, f.token, &countingMinter{})
	tok := NewProxyToken(map[string]string{taxonomy.ProxyAuthHeader: "jwe-secret"})
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("x", "session", s, "token", tok)
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%+v", s), fmt.Sprintf("%#v", s), fmt.Sprintf("%v %#v %+v", tok, tok, tok), buf.String()} {
		if strings.Contains(out, f.token) || strings.Contains(out, "jwe-secret") {
			t.Errorf("secret leaked: %s", out)
		}
		if !strings.Contains(out, "REDACTED") {
			t.Errorf("no redaction marker: %s", out)
		}
	}
	// Catches: plain http to a non-loopback host carrying two credentials.
	if _, err := Proxied("http://example.com", "t", &countingMinter{}); err == nil {
		t.Error("plain http proxied session to a remote host accepted")
	}
}

// Every listed status maps to its wire kind and from there to its error kind,
// exactly as api/errors.yaml says. Catches: a hand-kept status table that
// drifts (e.g. 410 retryable, 401 as Protocol, 507 unclassified).
func TestStatusClassification(t *testing.T) {
	f, srv := newFakeAgent(t)
	s := direct(t, srv.URL, f.token, WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
	cases := []struct {
		status int
		wire   taxonomy.WireKind
		kind   taxonomy.ErrorKind
	}{
		{400, taxonomy.WireProtocolError, taxonomy.KindProtocol},
		{401, taxonomy.WireUnauthorized, taxonomy.KindCredentials},
		{404, taxonomy.WireNotFound, taxonomy.KindProtocol},
		{408, taxonomy.WireRequestTimeout, taxonomy.KindRetryable},
		{409, taxonomy.WireConflict, taxonomy.KindProtocol},
		{410, taxonomy.WireStdinClosed, taxonomy.KindProtocol},
		{413, taxonomy.WireTooLarge, taxonomy.KindProtocol},
		{500, taxonomy.WireServerError, taxonomy.KindRetryable},
		{503, taxonomy.WireNotBootstrapped, taxonomy.KindRetryable},
		{507, taxonomy.WireServerError, taxonomy.KindRetryable},
		{502, taxonomy.WireServerError, taxonomy.KindRetryable},
	}
	for _, c := range cases {
		f.statusOnce["poll"] = []int{c.status}
		_, err := s.Exec("e1").Poll(context.Background())
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%d: %v", c.status, err)
		}
		w, _ := e.WireKind()
		if w != c.wire || e.Kind() != c.kind {
			t.Errorf("%d: wire %v kind %v, want %v %v", c.status, w, e.Kind(), c.wire, c.kind)
		}
		if e.Slug() != "scripted" {
			t.Errorf("%d: slug %q", c.status, e.Slug())
		}
		// Catches: an exec 404 claiming fs.ErrNotExist.
		if errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%d on poll must not be fs.ErrNotExist", c.status)
		}
	}
	// A wrong bearer is Credentials.
	bad := direct(t, srv.URL, "wrong")
	if _, err := bad.Exec("e").Poll(context.Background()); KindOf(err) != taxonomy.KindCredentials {
		t.Errorf("wrong token: %v", err)
	}
}

// Catches: a retried start minting a fresh exec_id (two children), or start
// not being retried across 503 before bootstrap.
func TestStartRetryReusesExecID(t *testing.T) {
	f, srv := newFakeAgent(t)
	s := direct(t, srv.URL, f.token)
	f.statusOnce["start"] = []int{503, 500}
	e, err := s.Start(context.Background(), []string{"true"}, StartOptions{Cwd: "/tmp", Env: map[string]string{"A": "1"}, DaemonTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.starts) != 3 {
		t.Fatalf("%d start requests, want 3", len(f.starts))
	}
	for _, r := range f.starts {
		if r.ExecID != e.ID() {
			t.Fatalf("retry used exec_id %q, want %q", r.ExecID, e.ID())
		}
	}
	r := f.starts[0]
	if *r.Cwd != "/tmp" || r.Env["A"] != "1" || *r.TimeoutSec != 1.5 || r.Shell || r.Stdin {
		t.Errorf("start body %+v", r)
	}
	// Catches: cwd sent as "" (which would mean something) instead of omitted.
	s.Start(context.Background(), []string{"true"}, StartOptions{ExecID: "mine"})
	if last := f.starts[len(f.starts)-1]; last.Cwd != nil || last.ExecID != "mine" || last.TimeoutSec != nil {
		t.Errorf("defaults: %+v", last)
	}
}

func TestRunStreamsAndAcks(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.chunks = []chunk{{protocol.StreamStdout, "out"}, {protocol.StreamStderr, "err"}}
	f.exitCode, f.streamExit = 2, 2
	s := direct(t, srv.URL, f.token)
	var o, e bytes.Buffer
	r, err := s.Run(context.Background(), []string{"sh", "-c", "x"}, RunOptions{Stdout: &o, Stderr: &e})
	if err != nil {
		t.Fatal(err)
	}
	if o.String() != "out" || e.String() != "err" || r.Stdout != "out" || *r.ExitCode != 2 || f.acks != 1 {
		t.Fatalf("run: %+v o=%q e=%q acks=%d", r, o.String(), e.String(), f.acks)
	}
	// Catches: a non-zero exit reading as success.
	if KindOf(r.Err()) != taxonomy.KindExecFailed {
		t.Errorf("exit 2 must be ExecFailed: %v", r.Err())
	}
}

// Run prefers the streamed bytes only when they are the whole output. Here
// the stream loses [0,3) to a gap, so the record (which kept every byte) is
// the result. Catches: Run returning the partial streamed bytes as if they
// were the output ("def" for "abcdef"), and a gap left out of OnGap.
func TestRunFallsBackToTheRecordAfterAGap(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.chunks = []chunk{{protocol.StreamStdout, "abcdef"}}
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		io.WriteString(w, ssetest.GapFrame(0, 3))
		io.WriteString(w, ssetest.OutputFrame(3, protocol.StreamStdout, []byte("def")))
		io.WriteString(w, ssetest.ExitFrame(0, 6))
		return true
	}
	s := direct(t, srv.URL, f.token)
	var live bytes.Buffer
	var gaps []protocol.GapEvent
	r, err := s.Run(context.Background(), []string{"x"}, RunOptions{Stdout: &live, OnGap: func(g protocol.GapEvent) { gaps = append(gaps, g) }})
	if err != nil || r.Stdout != "abcdef" || live.String() != "def" || !slices.Equal(gaps, []protocol.GapEvent{{From: 0, To: 3}}) {
		t.Fatalf("run %+v live %q gaps %v err %v", r, live.String(), gaps, err)
	}
}

// The client-side timeout is the Timeout kind and touches nothing: no kill,
// no ack. Catches: killing the exec on timeout, or reporting it as Retryable.
func TestRunTimeoutLeavesExecUntouched(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.phase = protocol.PhaseRunning
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		io.WriteString(w, ":\n\n")
		flush(w)
		<-r.Context().Done()
		return true
	}
	s := direct(t, srv.URL, f.token)
	_, err := s.Run(context.Background(), []string{"sleep", "100"}, RunOptions{ClientTimeout: 50 * time.Millisecond, StartOptions: StartOptions{ExecID: "long"}})
	if KindOf(err) != taxonomy.KindTimeout || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "long") {
		t.Fatalf("want Timeout naming the exec, got %v", err)
	}
	if f.kills != 0 || f.acks != 0 {
		t.Fatalf("timeout touched the exec: kills %d acks %d", f.kills, f.acks)
	}
}

// Wait reads the status from the exec record. The stream's exit event says 0
// and the record says 42: Wait must say 42. Catches: inferring the status
// from the stream. Also proves stdout and stderr are demultiplexed.
func TestProcessDemuxAndWaitReadsRecord(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.chunks = []chunk{{protocol.StreamStdout, "a1"}, {protocol.StreamStderr, "b1"}, {protocol.StreamStdout, "a2"}}
	f.exitCode, f.streamExit = 42, 0
	s := direct(t, srv.URL, f.token)
	p, err := s.Spawn(context.Background(), []string{"x"}, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(p.Stderr()); errc <- b }()
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "a1a2" || string(<-errc) != "b1" {
		t.Fatalf("stdout %q", out)
	}
	r, err := p.Wait(context.Background())
	if err != nil || r.ExitCode == nil || *r.ExitCode != 42 || f.acks != 1 {
		t.Fatalf("wait %+v %v acks %d", r, err, f.acks)
	}
}

// Catches: the stdin request shapes (data as base64, eof as the "eof" signal).
func TestStdin(t *testing.T) {
	f, srv := newFakeAgent(t)
	s := direct(t, srv.URL, f.token)
	e := s.Exec("e1")
	n, err := e.WriteStdin(context.Background(), []byte("hello"))
	if err != nil || n != 5 {
		t.Fatalf("write: %d %v", n, err)
	}
	if err := e.CloseStdin(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WriteStdin(context.Background(), make([]byte, protocol.DefaultMaxStdinWriteBytes+1)); KindOf(err) != taxonomy.KindInvalidArg {
		t.Errorf("oversized write: %v", err)
	}
}

func TestFiles(t *testing.T) {
	f, srv := newFakeAgent(t)
	s := direct(t, srv.URL, f.token)
	ctx := context.Background()
	payload := strings.Repeat("line\n", 1000)
	// The body is an io.Reader with no length: it is streamed, not buffered.
	if err := s.WriteFile(ctx, "/work/a.txt", io.MultiReader(strings.NewReader(payload)), 0o640); err != nil {
		t.Fatal(err)
	}
	if got := string(f.files["/work/a.txt"]); got != payload {
		t.Fatalf("server got %d bytes", len(got))
	}
	// Catches: mode sent as decimal (416) instead of octal.
	if q := f.fileQueries[len(f.fileQueries)-1]; !strings.Contains(q, "mode=640") {
		t.Errorf("write query %q", q)
	}
	var buf bytes.Buffer
	if _, err := s.ReadFile(ctx, "/work/a.txt", &buf, LineRange{Start: 2, End: 5}); err != nil || buf.String() != payload {
		t.Fatalf("read: %v", err)
	}
	if q := f.fileQueries[len(f.fileQueries)-1]; !strings.Contains(q, "start_line=2") || !strings.Contains(q, "end_line=5") {
		t.Errorf("read query %q", q)
	}
	// Catches: a missing file that errors.Is cannot recognise.
	_, err := s.ReadFile(ctx, "/nope", io.Discard, LineRange{})
	if !errors.Is(err, fs.ErrNotExist) || KindOf(err) != taxonomy.KindProtocol {
		t.Fatalf("missing file: %v", err)
	}
	tarBytes := bytes.Repeat([]byte{0, 1, 2, 3}, 2048)
	if err := s.WriteTar(ctx, "/work/dir", bytes.NewReader(tarBytes)); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if _, err := s.ReadTar(ctx, "/work/dir", &buf); err != nil || !bytes.Equal(buf.Bytes(), tarBytes) {
		t.Fatalf("tar round trip: %v", err)
	}
	if _, err := s.OpenTar(ctx, "/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing tar dir: %v", err)
	}
}
