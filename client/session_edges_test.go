package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/client/internal/ssetest"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Edges of building and describing a Session that the mutation run left
// untested (docs/mutation.md, client). None of them sends a request.

// https is as good as http, any other scheme is refused, and so is a zero
// idle timeout (every stream would end at once). Catches the https test
// negated in newSession (https refused, another scheme let through) and
// WithIdleTimeout's `d <= 0` made `d < 0`.
func TestSessionConstructionEdges(t *testing.T) {
	m := &countingMinter{}
	if _, err := Proxied("https://vm.example.invalid", "tok", m); err != nil {
		t.Fatalf("an https endpoint: %v", err)
	}
	if _, err := Proxied("ftp://vm.example.invalid", "tok", m); KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("an ftp endpoint: %v", err)
	}
	if _, err := Proxied("https://vm.example.invalid", "tok", m, WithIdleTimeout(0)); KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("a zero idle timeout: %v", err)
	}
}

// String and LogValue say whether the session is proxied, and through
// which port, and never carry the agent token. Catches either `proxy != nil`
// test negated (a direct session described as proxied, or the reverse).
func TestSessionDescribesItsMode(t *testing.T) {
	const secret = "secret-agent-token"
	direct, err := Direct("http://127.0.0.1:1", secret)
	if err != nil {
		t.Fatal(err)
	}
	proxied, err := Proxied("https://vm.example.invalid", secret, &countingMinter{}, WithAgentPort(9000))
	if err != nil {
		t.Fatal(err)
	}
	if s := direct.String(); !strings.Contains(s, " direct ") || strings.Contains(s, "proxied") || strings.Contains(s, secret) {
		t.Fatalf("direct: %s", s)
	}
	if s := proxied.String(); !strings.Contains(s, "proxied port 9000") || strings.Contains(s, secret) {
		t.Fatalf("proxied: %s", s)
	}
	port := func(v slog.Value) (int64, bool) {
		for _, a := range v.Group() {
			if a.Key == "proxy_port" {
				return a.Value.Int64(), true
			}
			if strings.Contains(a.Value.String(), secret) {
				t.Fatalf("log value carries the token: %v", v)
			}
		}
		return 0, false
	}
	if p, ok := port(direct.LogValue()); ok {
		t.Fatalf("a direct session logged proxy_port %d", p)
	}
	if p, ok := port(proxied.LogValue()); !ok || p != 9000 {
		t.Fatalf("a proxied session logged proxy_port %d (%v)", p, ok)
	}
}

// ConnectHeaders takes ports 1 and 65535 and refuses 0 and 65536 before
// minting. Catches either bound made strict the wrong way (`port < 1` as
// `<= 1`, `port > 65535` as `>=`).
func TestConnectHeadersPortBoundsAreInclusive(t *testing.T) {
	m := &countingMinter{}
	s, err := Proxied("https://vm.example.invalid", "tok", m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []int{1, 65535} {
		h, err := s.ConnectHeaders(ctx, p)
		if err != nil || h.Get(taxonomy.ProxyAuthHeader) == "" {
			t.Fatalf("port %d: %v %v", p, h, err)
		}
	}
	before := m.count()
	for _, p := range []int{0, 65536} {
		if _, err := s.ConnectHeaders(ctx, p); KindOf(err) != taxonomy.KindInvalidArg {
			t.Fatalf("port %d: %v", p, err)
		}
	}
	if m.count() != before {
		t.Fatal("a refused port was minted for")
	}
}

// Only a 2xx is success: a 300 whose body is a well-formed health answer
// is still an error. Catches `StatusCode < 300` made `<= 300` in send.
func TestStatus300IsNotSuccess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMultipleChoices)
		json.NewEncoder(w).Encode(protocol.Health{Version: "test", Bootstrapped: true})
	}))
	defer srv.Close()
	s := direct(t, srv.URL, "tok")
	if h, err := s.Health(context.Background()); err == nil {
		t.Fatalf("a 300 read as health %+v", h)
	}
}

// A refusal's message carries the daemon's slug and detail, and a body
// that is not an error object is quoted as the detail with no slug.
// Catches either test in statusError negated (`slug != ""`: the slug
// dropped, or an empty one printed; `detail != ""`: the detail dropped).
func TestRefusalMessageNamesSlugAndDetail(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{http.StatusConflict, `{"error":"already_acked","detail":"exec e1 was acked"}`, "HTTP 409 already_acked: exec e1 was acked"},
		{http.StatusBadGateway, "upstream went away", "HTTP 502: upstream went away"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.status)
			io.WriteString(w, c.body)
		}))
		s := direct(t, srv.URL, "tok", WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
		_, err := s.Health(context.Background())
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("HTTP %d %s: %v, want it to say %q", c.status, c.body, err, c.want)
		}
	}
}

// Close ends a stream with io.EOF unless it already failed, in which case
// its failure stays. Catches Close's `st.err == nil` negated: a stream
// closed before any read would then answer Next with no event and no error
// forever, and a failed one would read as cleanly ended.
func TestStreamCloseKeepsAFailure(t *testing.T) {
	s := direct(t, "http://127.0.0.1:1", "tok")
	st := s.Exec("e1").Stream(context.Background(), 0)
	st.Close()
	if _, err := st.Next(); err != io.EOF {
		t.Fatalf("Next after Close: %v, want io.EOF", err)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"exec_not_found","detail":"no exec e1"}`)
	}))
	defer srv.Close()
	st = direct(t, srv.URL, "tok").Exec("e1").Stream(context.Background(), 0)
	_, ferr := st.Next()
	if ferr == nil || ferr == io.EOF {
		t.Fatalf("a stream of an unknown exec: %v", ferr)
	}
	st.Close()
	if _, err := st.Next(); err != ferr {
		t.Fatalf("Next after closing a failed stream: %v, want its failure %v", err, ferr)
	}
}

// After a reconnect the daemon may replay a frame that ends exactly at the
// cursor; it was delivered already, and nothing of it (not even an empty
// output event) is delivered again. Catches the skip made `end < cursor`.
func TestStreamSkipsAReplayEndingAtTheCursor(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		io.WriteString(w, ssetest.OutputFrame(0, protocol.StreamStdout, []byte("abc")))
		if n > 0 {
			io.WriteString(w, ssetest.OutputFrame(3, protocol.StreamStdout, []byte("def")))
			io.WriteString(w, ssetest.ExitFrame(0, 6))
		}
		return true
	}
	st := direct(t, srv.URL, f.token).Exec("e1").Stream(context.Background(), 0)
	var outputs []string
	for range 100 {
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == EventOutput {
			outputs = append(outputs, string(ev.Data))
		}
	}
	if len(outputs) != 2 || outputs[0] != "abc" || outputs[1] != "def" {
		t.Fatalf("output events %q, want [abc def]", outputs)
	}
	// The stream request asks for frames or an event stream. Catches the
	// request builder's `err == nil` negated (the Accept header never set).
	if a := f.lastHeader().Get("Accept"); a != protocol.FramesMediaType+", text/event-stream;q=0.5" {
		t.Fatalf("stream request Accept %q", a)
	}
}

// A daemon that never answers within the idle timeout is retried like a
// dropped connection, and the give-up says so. Catches attach's
// `st.ctx.Err() == nil` negated (the timeout reported as the caller's
// cancellation, which is not retried) and exhausted's `lastErr != nil`
// negated (the give-up forgets why the last attempt failed).
func TestStreamWithNoAnswerIsRetriedThenNamed(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		<-r.Context().Done() // no header, no byte
		return true
	}
	// 250 ms, not less: the fake counts an attach when its handler runs, and
	// on a loaded machine (load 30) a 10 ms timeout once ended an attempt
	// before its request reached the handler.
	s := direct(t, srv.URL, f.token, WithIdleTimeout(250*time.Millisecond))
	s.maxReattach = 1
	_, _, _, _, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	f.mu.Lock()
	attaches := len(f.attaches)
	f.mu.Unlock()
	if KindOf(err) != taxonomy.KindRetryable || !errors.Is(err, errStreamIdle) || !strings.Contains(err.Error(), "gave up after 2 attempts") ||
		!strings.Contains(err.Error(), "no answer within the idle timeout") || attaches != 2 {
		t.Fatalf("%v after %d attaches", err, attaches)
	}
}

// The reattach backoff doubles from 50 ms and stops at 1.6 s. Catches the
// base or the shift changed (`50/time.Millisecond`, `attempt+1`,
// `-(attempt-1)`): tests never time the waits, so only this pins them.
func TestReattachBackoffDoubles(t *testing.T) {
	want := []time.Duration{50, 100, 200, 400, 800, 1600, 1600, 1600}
	for i, w := range want {
		if got := reattachBackoff(i + 1); got != w*time.Millisecond {
			t.Errorf("attempt %d: %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
}

// WriteStdin and WriteStdinAndClose take exactly the daemon's per-write cap
// and refuse a byte more without sending it; CloseStdin sends the eof
// signal and no data field. Catches either cap made `>=` (a write of
// exactly the cap refused)
// and stdin's `len(data) > 0` made `>= 0` (an empty data_b64 sent with
// every eof).
func TestStdinCapAndEOFOnTheWire(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(raw))
		mu.Unlock()
		var req protocol.StdinRequest
		json.Unmarshal(raw, &req)
		n := 0
		if req.DataB64 != nil {
			b, _ := base64.StdEncoding.DecodeString(*req.DataB64)
			n = len(b)
		}
		writeJSON(w, protocol.StdinResponse{ExecID: r.PathValue("id"), Written: uint(n), EOF: req.Signal != nil})
	}))
	defer srv.Close()
	e := direct(t, srv.URL, "tok").Exec("e1")
	ctx := context.Background()
	if n, err := e.WriteStdin(ctx, make([]byte, protocol.DefaultMaxStdinWriteBytes)); err != nil || n != protocol.DefaultMaxStdinWriteBytes {
		t.Fatalf("a write of exactly the cap: %d, %v", n, err)
	}
	if _, err := e.WriteStdin(ctx, make([]byte, protocol.DefaultMaxStdinWriteBytes+1)); KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("a write over the cap: %v", err)
	}
	if err := e.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	// The same cap for the last chunk.
	if n, err := e.WriteStdinAndClose(ctx, make([]byte, protocol.DefaultMaxStdinWriteBytes)); err != nil || n != protocol.DefaultMaxStdinWriteBytes {
		t.Fatalf("a last chunk of exactly the cap: %d, %v", n, err)
	}
	if _, err := e.WriteStdinAndClose(ctx, make([]byte, protocol.DefaultMaxStdinWriteBytes+1)); KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("a last chunk over the cap: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 3 {
		t.Fatalf("%d stdin requests, want 3 (the refused writes are never sent)", len(bodies))
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(bodies[1]), &last); err != nil || len(last) != 1 || last["signal"] != "eof" {
		t.Fatalf("CloseStdin sent %s, want only the eof signal", bodies[1])
	}
}

// Run whose stream gives up still answers from the exec's record.
// Catches Run's `ctx.Err() != nil` negated (a stream
// that gave up while the caller's context is live reported as a timeout
// instead of falling back to the record).
func TestRunFallsBackToTheRecordWhenTheStreamGivesUp(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.chunks = []chunk{{protocol.StreamStdout, "from the record"}}
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool { return true } // every body ends at once
	s := direct(t, srv.URL, f.token)
	s.maxReattach = 1
	r, err := s.Run(context.Background(), []string{"true"}, RunOptions{})
	if err != nil || r.Stdout != "from the record" || !r.Success() {
		t.Fatalf("run over a stream that gave up: %+v, %v", r, err)
	}
}

// WriteTar returns the daemon's refusal. Catches its `err != nil` negated
// (a refused upload then closes the body of an answer it does not have).
func TestWriteTarReturnsARefusal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"bad_request","detail":"not a tar"}`)
	}))
	defer srv.Close()
	err := direct(t, srv.URL, "tok").WriteTar(context.Background(), "/w", strings.NewReader("not a tar"))
	if err == nil || !strings.Contains(err.Error(), "not a tar") {
		t.Fatalf("a refused tar upload: %v", err)
	}
}

// A regular file is uploaded with its remaining size as the Content-Length,
// never chunked; one read to its end (nothing remaining) is sent as an
// empty body of length 0. Catches newUploadBody's `off <= size` made `<`
// (a file at its end sent chunked) and withSize's tests negated or made
// `size <= 0` (the size never set, or a zero size left as an unknown
// length, which the transport sends chunked).
func TestFileUploadsCarryTheirLength(t *testing.T) {
	type seen struct {
		length  int64
		chunked bool
		n       int
	}
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got <- seen{r.ContentLength, len(r.TransferEncoding) > 0, int(n)}
		writeJSON(w, map[string]any{"path": "/f", "bytes": n})
	}))
	defer srv.Close()
	s := direct(t, srv.URL, "tok")
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	if err := s.WriteFile(ctx, "/f", f, 0); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.length != 5 || g.chunked || g.n != 5 {
		t.Fatalf("a 5-byte file went as %+v", g)
	}
	// The transport closed f once it was sent; a second handle, read to
	// its end.
	f, err = os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFile(ctx, "/f", f, 0); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.length != 0 || g.chunked || g.n != 0 {
		t.Fatalf("a file at its end went as %+v", g)
	}
}

// A SizedReader is uploaded with its declared length as the Content-Length,
// never chunked, even when it is a pipe; one that ends short fails the
// upload instead of sending a cut body as whole. Catches newUploadBody
// missing the sizedReader case (sent chunked) or sending its size as -1.
func TestSizedUploadsCarryTheirLength(t *testing.T) {
	type seen struct {
		length  int64
		chunked bool
		n       int
	}
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got <- seen{r.ContentLength, len(r.TransferEncoding) > 0, int(n)}
		writeJSON(w, map[string]any{"path": "/w"})
	}))
	defer srv.Close()
	s := direct(t, srv.URL, "tok")
	ctx := context.Background()
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte(strings.Repeat("t", 3000))); pw.Close() }()
	if err := s.WriteTar(ctx, "/w", SizedReader(pr, 3000)); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.length != 3000 || g.chunked || g.n != 3000 {
		t.Fatalf("a 3000-byte sized pipe went as %+v", g)
	}
	if err := s.WriteTar(ctx, "/w", SizedReader(strings.NewReader("short"), 3000)); err == nil {
		t.Fatal("a sized reader that ended short was uploaded")
	}
}

// Resize returns the daemon's refusal (an exec on pipes is not_a_tty, a
// Conflict). Catches its `err != nil` negated (the refusal's missing
// answer then decoded).
func TestResizeReturnsARefusal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":"not_a_tty","detail":"exec e1 runs on pipes"}`)
	}))
	defer srv.Close()
	err := direct(t, srv.URL, "tok").Exec("e1").Resize(context.Background(), 24, 80)
	if !errors.Is(err, WireKindError(taxonomy.WireConflict)) || !strings.Contains(err.Error(), "not_a_tty") {
		t.Fatalf("resize of an exec on pipes: %v", err)
	}
}

// ListPage sends a page size only when one is asked for. Catches the
// `Limit != 0` test negated (limit=0 sent by default, an asked-for limit
// dropped).
func TestListPageSendsTheLimitAskedFor(t *testing.T) {
	queries := make(chan url.Values, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries <- r.URL.Query()
		writeJSON(w, protocol.ListResponse{})
	}))
	defer srv.Close()
	s := direct(t, srv.URL, "tok")
	ctx := context.Background()
	if _, err := s.ListPage(ctx, "/w", ListOptions{Limit: 2}); err != nil {
		t.Fatal(err)
	}
	if q := <-queries; q.Get("limit") != "2" {
		t.Fatalf("limit 2 sent as %v", q)
	}
	if _, err := s.ListPage(ctx, "/w", ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if q := <-queries; q.Has("limit") {
		t.Fatalf("no limit asked for, sent %v", q)
	}
}

// Mkdir sends a mode only when one is given, in octal, and reports what
// the daemon says it created. Catches the `mode != 0` test negated (mode
// "0" sent by default, a given mode dropped).
func TestMkdirSendsTheModeGiven(t *testing.T) {
	queries := make(chan url.Values, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries <- r.URL.Query()
		writeJSON(w, protocol.MkdirResponse{Created: true})
	}))
	defer srv.Close()
	s := direct(t, srv.URL, "tok")
	ctx := context.Background()
	if created, err := s.Mkdir(ctx, "/w/d", 0o700); err != nil || !created {
		t.Fatalf("mkdir: %v %v", created, err)
	}
	if q := <-queries; q.Get("mode") != "700" {
		t.Fatalf("mode 0700 sent as %v", q)
	}
	if _, err := s.Mkdir(ctx, "/w/d", 0); err != nil {
		t.Fatal(err)
	}
	if q := <-queries; q.Has("mode") {
		t.Fatalf("no mode given, sent %v", q)
	}
}

// The watch stream's frames join their data lines with newlines, as SSE
// says. Catches the `data != nil` test negated (a newline put before the
// first line and none between the others).
func TestWatchFrameJoinsDataLines(t *testing.T) {
	fr := newWatchFrames(strings.NewReader("event: change\ndata: a\ndata: b\n\n"))
	name, data, err := fr.next()
	if err != nil || name != "change" || string(data) != "a\nb" {
		t.Fatalf("%q %q %v", name, data, err)
	}
}

// errors.Is with a target that names a finding matches only that finding.
// Catches the finding comparison negated in Error.Is.
func TestErrorIsComparesTheFinding(t *testing.T) {
	err := Errorf(taxonomy.KindInvalidArg, taxonomy.FindingEndpointAuth, "x")
	if !errors.Is(err, Errorf(taxonomy.KindInvalidArg, taxonomy.FindingEndpointAuth, "target")) {
		t.Fatal("the same kind and finding did not match")
	}
	if errors.Is(err, Errorf(taxonomy.KindInvalidArg, taxonomy.FindingAllowedPortsUnion, "target")) {
		t.Fatal("another finding matched")
	}
	if !errors.Is(err, KindError(taxonomy.KindInvalidArg)) {
		t.Fatal("a target without a finding did not match")
	}
}

// The retry delay after attempt n is drawn from [d/2, d], d the base
// doubled n times and capped. Catches the doubling loop's bound changed
// (`i <= attempt`: one doubling too many; `i >= attempt`: none after the
// first attempt, or all of them at once; `i--`), its cap test negated (no
// doubling at all), and the final clamp's test negated (no clamp).
func TestRetryDelayRanges(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for _, c := range []struct {
		attempt  int
		min, max time.Duration
	}{
		{0, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 200 * time.Millisecond, 400 * time.Millisecond},
		{6, 500 * time.Millisecond, time.Second},
	} {
		for range 20 {
			if d := p.delay(c.attempt); d < c.min || d > c.max {
				t.Fatalf("delay(%d) = %v, want within [%v, %v]", c.attempt, d, c.min, c.max)
			}
		}
	}
	// The delays are jittered, not all d. Catches the jitter's `d <= 1`
	// test negated (every delay then exactly d).
	seen := map[time.Duration]bool{}
	for range 20 {
		seen[p.delay(0)] = true
	}
	if len(seen) < 2 {
		t.Fatalf("20 delays after the first attempt, all %v", seen)
	}
	// The smallest delay that is jittered, 2 ns, is drawn from [1, 2].
	// Catches the draw's bound `d/2+1` made `d/2-1` (rand.N(0) panics).
	tiny := RetryPolicy{BaseDelay: 2, MaxDelay: 2}
	for range 20 {
		if d := tiny.delay(0); d < 1 || d > 2 {
			t.Fatalf("a 2 ns delay drew %v", d)
		}
	}
	// No ceiling (MaxDelay 0): no doubling either, and no cap to zero.
	// Catches the cap's `MaxDelay > 0` made `>= 0`.
	p.MaxDelay = 0
	for range 20 {
		if d := p.delay(3); d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("delay(3) without a ceiling = %v", d)
		}
	}
}

// SizeClasses lists the documented classes in table order, smallest first.
// Catches the index stored as `i - 1` (the first class invalid, every other
// one its neighbour).
func TestSizeClassesFollowTheTable(t *testing.T) {
	got := SizeClasses()
	if len(got) != len(sizeTable) {
		t.Fatalf("%d classes, table has %d", len(got), len(sizeTable))
	}
	for i, c := range got {
		if c.IsZero() || c.BaselineMiB() != sizeTable[i].BaselineMiB {
			t.Fatalf("class %d: %v, want baseline %d MiB", i, c, sizeTable[i].BaselineMiB)
		}
	}
}
