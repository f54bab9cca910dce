package agentd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"

	"github.com/microvms/microvms/api"
	"github.com/microvms/microvms/gen/protocol"
)

const testToken = "test-token-0123456789"

// daemon is a real agentd serving real HTTP on 127.0.0.1 in this process.
type daemon struct {
	t      testing.TB
	srv    *Server
	cfg    Config
	base   string
	addr   string
	client *protocol.ClientWithResponses // every exchange validated against api/openapi.yaml
	http   *http.Client                  // the same validating transport, for raw requests
	done   chan error
	cancel context.CancelFunc
}

// testConfig is the default configuration with identity repair off, so tests
// never touch the host's machine-id.
func testConfig() Config {
	c := DefaultConfig()
	c.Identity.Enabled = false
	return c
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startDaemon serves a fresh Server on an ephemeral port until the test ends.
func startDaemon(t testing.TB, mutate func(*Config)) *daemon {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := NewServer(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	return serveDaemon(t, srv)
}

func serveDaemon(t testing.TB, srv *Server) *daemon {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{t: t, srv: srv, cfg: srv.cfg, addr: ln.Addr().String(), base: "http://" + ln.Addr().String(),
		done: make(chan error, 1), cancel: cancel}
	go func() { d.done <- srv.Serve(ctx, ln) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	d.http = &http.Client{Transport: &contractTransport{t: t, next: tr}}
	d.client, err = protocol.NewClientWithResponses(d.base, protocol.WithHTTPClient(d.http))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			t.Error("daemon did not shut down")
		}
		tr.CloseIdleConnections()
		srv.killAll()
	})
	return d
}

// killAll ends every child a test left running, so the test binary leaves no
// orphans behind.
func (s *Server) killAll() {
	s.execs.mu.Lock()
	defer s.execs.mu.Unlock()
	for _, e := range s.execs.execs {
		if !e.isFinished() {
			_ = killGroup(e.pgid)
		}
	}
}

// killGroup SIGKILLs a whole process group at once. Test cleanup only: the
// daemon itself signals through execEntry.signalGroup, which checks the group
// is still the exec's.
func killGroup(pgid int) error { return unix.Kill(-pgid, unix.SIGKILL) }

func auth(token string) protocol.RequestEditorFn {
	return func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}
}

// bootstrap installs testToken with an optional launch env.
func (d *daemon) bootstrap(env map[string]string) {
	d.t.Helper()
	payload := map[string]any{"agent_token": testToken}
	if env != nil {
		payload["env"] = env
	}
	raw, _ := json.Marshal(payload)
	s := string(raw)
	resp, err := d.client.HookRunWithResponse(context.Background(), protocol.RunHookEnvelope{RunHookPayload: &s})
	if err != nil || resp.StatusCode() != http.StatusOK {
		d.t.Fatalf("run hook: %v %v %s", err, resp.StatusCode(), resp.Body)
	}
}

func (d *daemon) start(req protocol.StartRequest) *protocol.ExecStartReply {
	d.t.Helper()
	resp, err := d.client.ExecStartWithResponse(context.Background(), req, auth(testToken))
	if err != nil {
		d.t.Fatalf("start: %v", err)
	}
	return resp
}

func (d *daemon) mustStart(req protocol.StartRequest) {
	d.t.Helper()
	if resp := d.start(req); resp.StatusCode() != http.StatusOK {
		d.t.Fatalf("start %s: %d %s", req.ExecID, resp.StatusCode(), resp.Body)
	}
}

func shell(id, script string) protocol.StartRequest {
	return protocol.StartRequest{ExecID: id, Command: []string{script}, Shell: true}
}

// outcome is a decoded exited poll or ack.
type outcome struct {
	ExecID            string              `json:"exec_id"`
	Phase             string              `json:"phase"`
	ExitCode          *int32              `json:"exit_code"`
	Signal            *int32              `json:"signal"`
	Stdout            *string             `json:"stdout"`
	Stderr            *string             `json:"stderr"`
	Truncated         *bool               `json:"truncated"`
	WritersMayBeAlive *bool               `json:"writers_may_be_alive"`
	Usage             *protocol.ExecUsage `json:"usage"`
	OomKilled         *bool               `json:"oom_killed"`
	raw               map[string]json.RawMessage
}

func (d *daemon) poll(id string) (int, outcome) {
	d.t.Helper()
	resp, err := d.client.ExecPollWithResponse(context.Background(), id, auth(testToken))
	if err != nil {
		d.t.Fatalf("poll: %v", err)
	}
	var o outcome
	if resp.StatusCode() == http.StatusOK {
		if err := json.Unmarshal(resp.Body, &o); err != nil {
			d.t.Fatalf("poll body: %v", err)
		}
		_ = json.Unmarshal(resp.Body, &o.raw)
	}
	return resp.StatusCode(), o
}

// waitExited polls until the exec leaves running, within a deadline.
func (d *daemon) waitExited(id string) outcome {
	d.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		code, o := d.poll(id)
		if code != http.StatusOK {
			d.t.Fatalf("poll %s: %d", id, code)
		}
		if o.Phase != string(protocol.PhaseRunning) {
			return o
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.t.Fatalf("exec %s still running at the deadline", id)
	return outcome{}
}

// sseEvent is one parsed server-sent event, or a comment line.
type sseEvent struct {
	name    string
	data    string
	id      string
	hasID   bool
	idLate  bool // the id line came after the data line
	comment bool
}

func (e sseEvent) output() (uint64, string, []byte) {
	var ev protocol.OutputEvent
	if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
		panic(err)
	}
	b, err := base64.StdEncoding.DecodeString(ev.Output)
	if err != nil {
		panic(err)
	}
	return ev.Offset, string(ev.Stream), b
}

// readSSE parses a whole event stream body.
func readSSE(t testing.TB, body io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" || cur.data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
			out = append(out, sseEvent{comment: true})
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		case strings.HasPrefix(line, "id: "):
			cur.id, cur.hasID, cur.idLate = strings.TrimPrefix(line, "id: "), true, cur.data != ""
		}
	}
	return out
}

// checkID fails unless e carries an id line before its data, holding want:
// the offset a reconnect resumes at. Catches an id missing from an event,
// an id naming the event's start (a reconnecting EventSource would replay
// it), and an id after the data line (the client's parser then copies every
// frame instead of reading it in place).
func checkID(t testing.TB, i int, e sseEvent, want uint64) {
	t.Helper()
	if !e.hasID || e.idLate || e.id != strconv.FormatUint(want, 10) {
		t.Fatalf("event %d (%s): id %q (present %v, after data %v), want %d before the data line", i, e.name, e.id, e.hasID, e.idLate, want)
	}
}

// stream reads a whole SSE stream of exec id from offset (nil: none given).
func (d *daemon) stream(id string, offset *uint64) []sseEvent {
	d.t.Helper()
	resp, err := d.client.ExecStream(context.Background(), id, &protocol.ExecStreamParams{Offset: offset}, auth(testToken))
	if err != nil {
		d.t.Fatalf("stream: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		d.t.Fatalf("stream status %d: %s", resp.StatusCode, b)
	}
	return readSSE(d.t, resp.Body)
}

// collect concatenates output events, checking offsets are contiguous from
// start, and returns the bytes, the gaps, and the exit event.
func collect(t testing.TB, events []sseEvent, start uint64) ([]byte, []protocol.GapEvent, *protocol.ExitEvent) {
	t.Helper()
	var out []byte
	var gaps []protocol.GapEvent
	var exit *protocol.ExitEvent
	cursor := start
	for i, e := range events {
		if exit != nil && !e.comment {
			t.Fatalf("event %q after exit", e.name)
		}
		switch e.name {
		case protocol.EventOutput:
			off, _, b := e.output()
			if off != cursor {
				t.Fatalf("event %d: output at offset %d, want %d", i, off, cursor)
			}
			out = append(out, b...)
			cursor += uint64(len(b))
			checkID(t, i, e, cursor)
		case protocol.EventGap:
			var g protocol.GapEvent
			_ = json.Unmarshal([]byte(e.data), &g)
			if g.From != cursor {
				t.Fatalf("gap from %d, want %d", g.From, cursor)
			}
			gaps = append(gaps, g)
			cursor = g.To
			checkID(t, i, e, g.To)
		case protocol.EventExit:
			exit = &protocol.ExitEvent{}
			_ = json.Unmarshal([]byte(e.data), exit)
			checkID(t, i, e, exit.Offset)
		}
	}
	if exit == nil {
		t.Fatalf("stream ended without an exit event")
	}
	return out, gaps, exit
}

// ---- contract validation ----

var (
	contractOnce   sync.Once
	contractRouter routers.Router
	contractErr    error
)

func loadContract() (routers.Router, error) {
	contractOnce.Do(func() {
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder(protocol.FramesMediaType, openapi3filter.FileBodyDecoder)
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPI)
		if err != nil {
			contractErr = err
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			contractErr = err
			return
		}
		contractRouter, contractErr = legacyrouter.NewRouter(doc)
	})
	return contractRouter, contractErr
}

type offContractKey struct{}

type unroutedKey struct{}

// unrouted marks a request to a path no operation has: the spec has nothing
// to say about it (kin-openapi's router also matches /v1/exec to /v1/exec/{id}
// with an empty id, which the daemon rightly answers 404 as unmatched).
func unrouted(ctx context.Context) context.Context {
	return context.WithValue(ctx, unroutedKey{}, true)
}

// offContract marks a request the test sends malformed on purpose: its
// response is still validated against the spec, but the request is not.
func offContract(ctx context.Context) context.Context {
	return context.WithValue(ctx, offContractKey{}, true)
}

// exchanges counts validated exchanges, so the contract test can prove the
// validator actually ran.
var exchanges atomic.Int64

// contractTransport validates every request it sends and every response it
// receives against api/openapi.yaml. A status the spec does not list for the
// operation, a missing version header, or a body of the wrong shape fails the
// test that made the request.
type contractTransport struct {
	t    testing.TB
	next http.RoundTripper
}

func (c *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Context().Value(unroutedKey{}) != nil {
		return c.next.RoundTrip(req)
	}
	router, err := loadContract()
	if err != nil {
		c.t.Errorf("contract: load api/openapi.yaml: %v", err)
		return c.next.RoundTrip(req)
	}
	route, pathParams, rerr := router.FindRoute(req)
	if rerr != nil {
		if req.Context().Value(offContractKey{}) == nil {
			c.t.Errorf("contract: %s %s matches no operation: %v", req.Method, req.URL.Path, rerr)
		}
		return c.next.RoundTrip(req)
	}
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		MultiError:            true,
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: pathParams, Route: route, Options: opts}
	if req.Context().Value(offContractKey{}) == nil {
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
			req.Body.Close()
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		vreq := req.Clone(req.Context())
		vreq.Body = io.NopCloser(bytes.NewReader(body))
		in.Request = vreq
		if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
			c.t.Errorf("contract: request %s %s violates the spec: %v", req.Method, req.URL.Path, err)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	exchanges.Add(1)
	rin := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "text/event-stream") || ct == protocol.FramesMediaType {
		// The body is a live stream; its events (or frames) are checked by
		// the tests.
		o := *opts
		o.ExcludeResponseBody = true
		rin.Options = &o
		rin.Body = io.NopCloser(strings.NewReader(""))
		if err := openapi3filter.ValidateResponse(req.Context(), rin); err != nil {
			c.t.Errorf("contract: response %d to %s %s violates the spec: %v", resp.StatusCode, req.Method, req.URL.Path, err)
		}
		return resp, nil
	}
	body, rerr2 := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr2 != nil {
		return resp, nil
	}
	rin.Body = io.NopCloser(bytes.NewReader(body))
	if err := openapi3filter.ValidateResponse(req.Context(), rin); err != nil {
		c.t.Errorf("contract: response %d to %s %s violates the spec: %v\nbody: %.300s", resp.StatusCode, req.Method, req.URL.Path, err, body)
	}
	return resp, nil
}

// rawRequest sends bytes on a fresh TCP connection and returns the conn with
// a reader positioned at the response.
func dialRaw(t testing.TB, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func readResponse(t testing.TB, br *bufio.Reader, method string) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp
}

func errorBody(t testing.TB, body []byte) protocol.ErrorBody {
	t.Helper()
	var e protocol.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return e
}

func u64(v uint64) *uint64 { return &v }

var netDialer = net.Dialer{Timeout: 5 * time.Second}

func b64enc(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
