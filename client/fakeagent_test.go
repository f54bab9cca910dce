package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/client/internal/ssetest"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// fakeAgent is an in-test agentd speaking protocol v1 with the generated
// types, scripted per test. It exists until the real agentd lands; it serves
// bytes over real HTTP on 127.0.0.1.
type fakeAgent struct {
	t     *testing.T
	token string

	mu       sync.Mutex
	chunks   []chunk // the exec's output, in offset order
	exitCode int32   // what the record says
	// streamExit is what the SSE exit event says (normally exitCode). A test
	// that sets them apart proves Wait reads the record.
	streamExit int32
	phase      protocol.Phase
	// attach scripts each stream connection by its index (0-based); nil means
	// serve everything from the requested offset and then exit.
	attach      func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool
	attaches    []uint64 // offsets requested, in order
	starts      []protocol.StartRequest
	acks, kills int
	headers     []http.Header
	statusOnce  map[string][]int // route -> statuses to answer before succeeding
	files       map[string][]byte
	fileQueries []string
}

type chunk struct {
	stream protocol.StreamKind
	data   string
}

func newFakeAgent(t *testing.T) (*fakeAgent, *httptest.Server) {
	f := &fakeAgent{t: t, token: "agent-secret-token", phase: protocol.PhaseExited, statusOnce: map[string][]int{}, files: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", f.health)
	mux.HandleFunc("POST /v1/exec/start", f.auth(f.start))
	mux.HandleFunc("GET /v1/exec/{id}", f.auth(f.poll))
	mux.HandleFunc("POST /v1/exec/{id}/ack", f.auth(f.ack))
	mux.HandleFunc("POST /v1/exec/{id}/kill", f.auth(f.kill))
	mux.HandleFunc("POST /v1/exec/{id}/stdin", f.auth(f.stdin))
	mux.HandleFunc("GET /v1/exec/{id}/stream", f.auth(f.stream))
	mux.HandleFunc("GET /v1/fs/file", f.auth(f.readFile))
	mux.HandleFunc("PUT /v1/fs/file", f.auth(f.writeFile))
	mux.HandleFunc("GET /v1/fs/tar", f.auth(f.readFile))
	mux.HandleFunc("PUT /v1/fs/tar", f.auth(f.writeFile))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeAgent) record(r *http.Request) {
	f.mu.Lock()
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
}

func (f *fakeAgent) lastHeader() http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.headers[len(f.headers)-1]
}

// scripted answers the next queued status for route, if any.
func (f *fakeAgent) scripted(route string, w http.ResponseWriter) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.statusOnce[route]
	if len(q) == 0 {
		return false
	}
	f.statusOnce[route] = q[1:]
	writeError(w, q[0], "scripted", "scripted failure")
	return true
}

func writeError(w http.ResponseWriter, status int, slug, detail string) {
	w.Header().Set(taxonomy.VersionHeader, "test")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(protocol.ErrorBody{Error: slug, Detail: detail})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set(taxonomy.VersionHeader, "test")
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (f *fakeAgent) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			writeError(w, 401, "unauthorized", "")
			return
		}
		h(w, r)
	}
}

func (f *fakeAgent) health(w http.ResponseWriter, r *http.Request) {
	f.record(r)
	if f.scripted("health", w) {
		return
	}
	writeJSON(w, protocol.Health{Version: "test", Bootstrapped: true})
}

func (f *fakeAgent) start(w http.ResponseWriter, r *http.Request) {
	var req protocol.StartRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, 400, taxonomy.SlugMalformedRequest, err.Error())
		return
	}
	f.mu.Lock()
	f.starts = append(f.starts, req)
	f.mu.Unlock()
	if f.scripted("start", w) {
		return
	}
	writeJSON(w, protocol.StartResponse{ExecID: req.ExecID, Phase: protocol.PhaseRunning})
}

func (f *fakeAgent) pollResponse(id string) protocol.PollResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := protocol.PollResponse{ExecID: id, Phase: f.phase}
	if f.phase != protocol.PhaseRunning {
		var out, errs string
		for _, c := range f.chunks {
			if c.stream == protocol.StreamStdout {
				out += c.data
			} else {
				errs += c.data
			}
		}
		code, no := f.exitCode, false
		p.ExitCode, p.Stdout, p.Stderr, p.Truncated = &code, &out, &errs, &no
	}
	return p
}

func (f *fakeAgent) poll(w http.ResponseWriter, r *http.Request) {
	if f.scripted("poll", w) {
		return
	}
	writeJSON(w, f.pollResponse(r.PathValue("id")))
}

func (f *fakeAgent) ack(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.acks++
	f.mu.Unlock()
	writeJSON(w, f.pollResponse(r.PathValue("id")))
}

func (f *fakeAgent) kill(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.kills++
	f.mu.Unlock()
	writeJSON(w, protocol.KillResponse{ExecID: r.PathValue("id"), Killed: true})
}

func (f *fakeAgent) stdin(w http.ResponseWriter, r *http.Request) {
	var req protocol.StdinRequest
	json.NewDecoder(r.Body).Decode(&req)
	n := 0
	if req.DataB64 != nil {
		b, _ := base64.StdEncoding.DecodeString(*req.DataB64)
		n = len(b)
	}
	writeJSON(w, protocol.StdinResponse{ExecID: r.PathValue("id"), Written: uint(n), EOF: req.Signal != nil})
}

// framesFrom renders every chunk at or after offset, as agentd replays.
func (f *fakeAgent) framesFrom(offset uint64) (frames []string, total uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var pos uint64
	for _, c := range f.chunks {
		end := pos + uint64(len(c.data))
		if end > offset {
			start := max(offset, pos)
			frames = append(frames, ssetest.OutputFrame(start, c.stream, []byte(c.data)[start-pos:]))
		}
		pos = end
	}
	return frames, pos
}

func (f *fakeAgent) stream(w http.ResponseWriter, r *http.Request) {
	offset, _ := strconv.ParseUint(r.URL.Query().Get("offset"), 10, 64)
	f.mu.Lock()
	n := len(f.attaches)
	f.attaches = append(f.attaches, offset)
	script := f.attach
	f.mu.Unlock()
	if f.scripted("stream", w) {
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set(taxonomy.VersionHeader, "test")
	w.WriteHeader(200)
	if script != nil && script(n, w, r, offset) {
		return
	}
	frames, total := f.framesFrom(offset)
	for _, fr := range frames {
		io.WriteString(w, ": keepalive\n\n")
		io.WriteString(w, fr)
	}
	f.mu.Lock()
	code := f.streamExit
	f.mu.Unlock()
	io.WriteString(w, ssetest.ExitFrame(code, total))
}

func (f *fakeAgent) readFile(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.fileQueries = append(f.fileQueries, r.URL.RawQuery)
	b, ok := f.files[r.URL.Query().Get("path")]
	f.mu.Unlock()
	if !ok {
		w.WriteHeader(404)
		io.WriteString(w, "no such file")
		return
	}
	w.Write(b)
}

func (f *fakeAgent) writeFile(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(400)
		return
	}
	f.mu.Lock()
	f.files[r.URL.Query().Get("path")] = b
	f.fileQueries = append(f.fileQueries, r.URL.RawQuery)
	f.mu.Unlock()
	w.WriteHeader(204)
}

// flush pushes written frames to the client now.
func flush(w http.ResponseWriter) { w.(http.Flusher).Flush() }

// manualClock is an injectable clock a test advances by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// countingMinter mints distinguishable tokens and records what it was asked.
type countingMinter struct {
	mu       sync.Mutex
	requests []MintRequest
	fail     int // fail this many mints first
}

func (m *countingMinter) MintProxyToken(_ context.Context, req MintRequest) (ProxyToken, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail > 0 {
		m.fail--
		return ProxyToken{}, fmt.Errorf("ThrottlingException")
	}
	m.requests = append(m.requests, req)
	return NewProxyToken(map[string]string{taxonomy.ProxyAuthHeader: fmt.Sprintf("jwe-%d", len(m.requests))}), nil
}

func (m *countingMinter) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.requests)
}

// fastRetry keeps retries in tests to microseconds.
var fastRetry = WithRetryPolicy(RetryPolicy{MaxAttempts: 4, BaseDelay: time.Microsecond, MaxDelay: time.Microsecond})
