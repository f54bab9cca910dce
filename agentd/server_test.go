package agentd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/docs"
	"github.com/microvms/microvms/gen/protocol"
)

// Catches: the operations table and the generated router disagreeing about a
// route (the gate reads the table, the wrapper reads the security), e.g. a
// generator change that marks an fs route open in one and bearer in the
// other, or a route the table does not list (agentd would refuse to start).
func TestOperationsTableMatchesTheGeneratedRouter(t *testing.T) {
	got, err := probeBearerPatterns()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(operationsByPattern) {
		t.Fatalf("the router has %d routes, the table %d", len(got), len(operationsByPattern))
	}
	for pattern, bearer := range got {
		op, ok := operationsByPattern[pattern]
		if !ok {
			t.Errorf("%s is routed but not in protocol.Operations", pattern)
			continue
		}
		if op.Bearer != bearer {
			t.Errorf("%s: the table says bearer=%v, the generated wrapper %v", pattern, op.Bearer, bearer)
		}
	}
	for _, p := range []string{"GET /v1/health", "GET /v1/schema", "POST /aws/lambda-microvms/runtime/v1/run"} {
		if got[p] {
			t.Errorf("%s must stay open", p)
		}
	}
	for _, p := range []string{"POST /v1/exec/start", "GET /v1/fs/file", "PUT /v1/fs/tar"} {
		if !got[p] {
			t.Errorf("%s must be a bearer route", p)
		}
	}
}

// probeBearerPatterns asks the generated router itself which routes are
// bearer routes: it registers every route on a probe mux, sends each one a
// synthetic request, and records whether the generated wrapper put
// BearerAuthScopes in the context (it does exactly for operations with
// bearerAuth security).
func probeBearerPatterns() (map[string]bool, error) {
	rec := &patternRecorder{ServeMux: http.NewServeMux()}
	var sawBearer bool
	observe := func(r *http.Request) {
		_, sawBearer = r.Context().Value(protocol.BearerAuthScopes).([]string)
	}
	protocol.HandlerWithOptions(nil, protocol.StdHTTPServerOptions{
		BaseRouter: rec,
		Middlewares: []protocol.MiddlewareFunc{func(http.Handler) http.Handler {
			return http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { observe(r) })
		}},
		// A route whose required query parameters are missing from the probe
		// lands here, after the wrapper has already set the security scopes.
		ErrorHandlerFunc: func(_ http.ResponseWriter, r *http.Request, _ error) { observe(r) },
	})
	out := make(map[string]bool, len(rec.patterns))
	for _, pattern := range rec.patterns {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			return nil, fmt.Errorf("agentd: generated route %q has no method", pattern)
		}
		path = fillWildcards(path)
		req, err := http.NewRequest(method, path, nil)
		if err != nil {
			return nil, fmt.Errorf("agentd: probe %q: %w", pattern, err)
		}
		sawBearer = false
		rec.ServeHTTP(discardWriter{}, req)
		out[pattern] = sawBearer
	}
	return out, nil
}

// fillWildcards turns /v1/exec/{id}/stream into /v1/exec/x/stream.
func fillWildcards(path string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(path, '{')
		if i < 0 {
			b.WriteString(path)
			return b.String()
		}
		j := strings.IndexByte(path[i:], '}')
		if j < 0 {
			b.WriteString(path)
			return b.String()
		}
		b.WriteString(path[:i])
		b.WriteString("x")
		path = path[i+j+1:]
	}
}

type patternRecorder struct {
	*http.ServeMux
	patterns []string
}

func (p *patternRecorder) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	p.patterns = append(p.patterns, pattern)
	p.ServeMux.HandleFunc(pattern, h)
}

type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}

// Catches: auth placed inside the generated wrapper (a bad query from an
// unauthenticated caller would then be 400, leaking route shape before auth),
// a 404 for a control route before bootstrap, or 401 for an unmatched path.
func TestRefusalOrdering(t *testing.T) {
	d := startDaemon(t, nil)
	ctx := context.Background()
	bearerRoutes := []struct{ method, path string }{
		{"POST", "/v1/exec/start"}, {"GET", "/v1/exec/x"}, {"GET", "/v1/exec/x/stream?offset=1"},
		{"POST", "/v1/exec/x/stdin"}, {"POST", "/v1/exec/x/ack"}, {"POST", "/v1/exec/x/kill"},
		{"GET", "/v1/fs/file?path=/etc/hostname"}, {"PUT", "/v1/fs/file?path=/tmp/x"},
		{"GET", "/v1/fs/tar?path=/tmp"}, {"PUT", "/v1/fs/tar?path=/tmp"},
	}
	do := func(method, path, token string, off bool) *http.Response {
		t.Helper()
		c := ctx
		if off {
			c = offContract(ctx)
		}
		if strings.HasPrefix(path, "/v1/nope") || path == "/v1/exec" || strings.HasPrefix(path, "/v1/execs") {
			c = unrouted(ctx)
		}
		req, _ := http.NewRequestWithContext(c, method, d.base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := d.http.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		if resp.Header.Get(protocol.VersionHeader) != Version {
			t.Errorf("%s %s: no version header", method, path)
		}
		return resp
	}
	for _, r := range bearerRoutes {
		if got := do(r.method, r.path, "", true).StatusCode; got != http.StatusServiceUnavailable {
			t.Errorf("before bootstrap %s %s = %d, want 503", r.method, r.path, got)
		}
	}
	// A malformed query before bootstrap is still 503: auth first.
	if got := do("GET", "/v1/exec/x/stream?offset=nope", "", true).StatusCode; got != http.StatusServiceUnavailable {
		t.Errorf("bad offset before bootstrap = %d, want 503", got)
	}
	for _, path := range []string{"/v1/health", "/v1/schema"} {
		if got := do("GET", path, "", false).StatusCode; got != http.StatusOK {
			t.Errorf("%s before bootstrap = %d", path, got)
		}
	}
	for _, hook := range []string{"ready", "validate", "suspend", "resume"} {
		if got := do("POST", protocol.HookPrefix+"/"+hook, "", false).StatusCode; got != http.StatusOK {
			t.Errorf("%s hook before bootstrap = %d", hook, got)
		}
	}
	for _, path := range []string{"/v1/nope", "/v1/exec", "/v1/execs/start"} {
		if got := do("GET", path, testToken, true).StatusCode; got != http.StatusNotFound {
			t.Errorf("unmatched %s = %d, want 404", path, got)
		}
	}

	d.bootstrap(nil)
	for _, r := range bearerRoutes {
		if got := do(r.method, r.path, "", true).StatusCode; got != http.StatusUnauthorized {
			t.Errorf("no token %s %s = %d, want 401", r.method, r.path, got)
		}
		if got := do(r.method, r.path, testToken+"x", true).StatusCode; got != http.StatusUnauthorized {
			t.Errorf("wrong token %s %s = %d, want 401", r.method, r.path, got)
		}
	}
	if got := do("GET", "/v1/exec/x/stream?offset=nope", "wrong", true).StatusCode; got != http.StatusUnauthorized {
		t.Errorf("bad offset with wrong token = %d, want 401 (auth before query parsing)", got)
	}
	resp := do("GET", "/v1/exec/x/stream?offset=nope", testToken, true)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad offset with the token = %d, want 400", resp.StatusCode)
	}
	for _, path := range []string{"/v1/nope", "/v1/exec"} {
		if got := do("POST", path, "", true).StatusCode; got != http.StatusNotFound {
			t.Errorf("unmatched %s after bootstrap = %d, want 404", path, got)
		}
	}
	if got := do("GET", "/v1/exec/unknown", testToken, false).StatusCode; got != http.StatusNotFound {
		t.Errorf("unknown exec = %d, want 404", got)
	}
}

// Catches: comparing the header after decoding it as text, or a header
// check that panics on non-ASCII: the request must get a 401, not a reset.
func TestNonASCIIAuthorizationIsAnswered(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	c, br := dialRaw(t, d.addr)
	fmt.Fprintf(c, "GET /v1/exec/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\xc3\xb6k\xe9n\xff\r\n\r\n")
	resp := readResponse(t, br, "GET")
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get(protocol.VersionHeader) == "" {
		t.Fatalf("non-ASCII token: %d %v", resp.StatusCode, resp.Header)
	}
	// And the token itself may be non-ASCII bytes: compared as bytes, it matches.
	d2 := startDaemon(t, nil)
	c2, br2 := dialRaw(t, d2.addr)
	payload, _ := json.Marshal(map[string]string{"agent_token": "tök"})
	env, _ := json.Marshal(map[string]string{"runHookPayload": string(payload)})
	fmt.Fprintf(c2, "POST %s/run HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", protocol.HookPrefix, len(env), env)
	if r := readResponse(t, br2, "POST"); r.StatusCode != http.StatusOK {
		t.Fatalf("bootstrap with a non-ASCII token: %d", r.StatusCode)
	}
	fmt.Fprintf(c2, "GET /v1/exec/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tök\r\n\r\n")
	if r := readResponse(t, br2, "GET"); r.StatusCode != http.StatusNotFound {
		t.Fatalf("the right non-ASCII token: %d, want 404 (authorized, unknown exec)", r.StatusCode)
	}
}

// Catches: removing the recover in serveOuter (the connection drops with no
// status), or recovering without the version header.
func TestPanicIsA500AndTheConnectionSurvives(t *testing.T) {
	srv, err := NewServer(testConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	real := srv.inner
	srv.inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/boom" {
			w.Header().Set("Content-Type", "text/event-stream")
			panic("deliberate test panic")
		}
		real.ServeHTTP(w, r)
	})
	d := serveDaemon(t, srv)
	c, br := dialRaw(t, d.addr)
	fmt.Fprintf(c, "GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
	resp := readResponse(t, br, "GET")
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("panic: status %d", resp.StatusCode)
	}
	if resp.Header.Get(protocol.VersionHeader) != Version || strings.Contains(resp.Header.Get("Content-Type"), "event-stream") {
		t.Fatalf("panic response headers: %v", resp.Header)
	}
	// Same connection, next request.
	fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp := readResponse(t, br, "GET"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after a panic the connection answered %d", resp.StatusCode)
	}
}

// Catches: removing tlsProbeListener (net/http waits for a request line that
// a ClientHello never finishes, so the probe hangs instead of getting a 400).
func TestTLSHandshakeOnThePlainPortIs400(t *testing.T) {
	d := startDaemon(t, nil)
	c, br := dialRaw(t, d.addr)
	// A TLS 1.2 ClientHello record header and the start of its body.
	hello := []byte{0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03}
	hello = append(hello, bytes.Repeat([]byte{0x42}, 160)...)
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	resp := readResponse(t, br, "GET")
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(protocol.VersionHeader) != Version {
		t.Fatalf("TLS probe: %d %v", resp.StatusCode, resp.Header)
	}
	// A real TLS client gets a prompt handshake error, not a hang.
	conn, err := tls.DialWithDialer(&netDialer, "tcp", d.addr, &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		conn.Close()
		t.Fatal("a TLS handshake against the plain port succeeded")
	}
	// The daemon still serves plain HTTP afterwards.
	resp2, err := d.client.HealthWithResponse(context.Background())
	if err != nil || resp2.StatusCode() != http.StatusOK {
		t.Fatalf("health after a TLS probe: %v", err)
	}
}

// Catches: closing every refused request whose length is not declared (a
// pooled client's connection dies under a small chunked body), and draining
// without the max_drain_bytes cap (net/http alone would read up to 256 KiB of
// a refused body before giving up; the 64 KiB chunked case stays open then).
func TestRefusedBodiesDrainSmallAndCloseLarge(t *testing.T) {
	d := startDaemon(t, func(c *Config) { c.MaxDrainBytes = 4096 })
	d.bootstrap(nil)

	c, br := dialRaw(t, d.addr)
	small := bytes.Repeat([]byte("a"), 1000)
	fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: %d\r\n\r\n%s", len(small), small)
	resp := readResponse(t, br, "POST")
	if resp.StatusCode != http.StatusUnauthorized || resp.Close {
		t.Fatalf("small refused body: %d close=%v", resp.StatusCode, resp.Close)
	}
	fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp := readResponse(t, br, "GET"); resp.StatusCode != http.StatusOK {
		t.Fatalf("keep-alive after a drained refusal: %d", resp.StatusCode)
	}

	// Small and chunked: drained, and the connection is reused.
	fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n%s\r\n0\r\n\r\n", small)
	if resp := readResponse(t, br, "POST"); resp.StatusCode != http.StatusUnauthorized || resp.Close {
		t.Fatalf("small chunked refused body: %d close=%v", resp.StatusCode, resp.Close)
	}
	fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp := readResponse(t, br, "GET"); resp.StatusCode != http.StatusOK {
		t.Fatalf("keep-alive after a drained chunked refusal: %d", resp.StatusCode)
	}

	// Declared large: answered without reading, then closed.
	c2, br2 := dialRaw(t, d.addr)
	fmt.Fprintf(c2, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<20)
	go func() { _, _ = c2.Write(bytes.Repeat([]byte("b"), 1<<20)) }()
	resp2 := readResponse(t, br2, "POST")
	if resp2.StatusCode != http.StatusUnauthorized || !resp2.Close {
		t.Fatalf("large refused body: %d close=%v", resp2.StatusCode, resp2.Close)
	}
	if _, err := br2.ReadByte(); err == nil {
		t.Fatal("connection stayed open after refusing a large body")
	}

	// Chunked, undeclared length over the cap: drained up to the cap, then closed.
	c3, br3 := dialRaw(t, d.addr)
	fmt.Fprintf(c3, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	go func() {
		for range 64 {
			if _, err := fmt.Fprintf(c3, "400\r\n%s\r\n", bytes.Repeat([]byte("c"), 0x400)); err != nil {
				return
			}
		}
		fmt.Fprintf(c3, "0\r\n\r\n")
	}()
	resp3 := readResponse(t, br3, "POST")
	if resp3.StatusCode != http.StatusUnauthorized || !resp3.Close {
		t.Fatalf("chunked large refused body: %d close=%v", resp3.StatusCode, resp3.Close)
	}
}

// Catches: a missing wire cap on bearer bodies (max_body_bytes).
func TestBodyOverMaxBodyBytesIs413(t *testing.T) {
	d := startDaemon(t, func(c *Config) { c.MaxBodyBytes = 1024 })
	d.bootstrap(nil)
	big := protocol.StartRequest{ExecID: "big", Command: []string{"true", strings.Repeat("x", 2048)}}
	if got := d.start(big).StatusCode(); got != http.StatusRequestEntityTooLarge {
		t.Fatalf("declared-length body over the cap: %d, want 413", got)
	}
	// Chunked (no declared length): caught while reading.
	body, _ := json.Marshal(big)
	req, _ := http.NewRequest("POST", d.base+"/v1/exec/start", io.MultiReader(bytes.NewReader(body)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body over the cap: %d, want 413", resp.StatusCode)
	}
	if code, _ := d.poll("big"); code != http.StatusNotFound {
		t.Fatalf("an over-cap start registered an exec: %d", code)
	}
}

// Catches: a run hook that quotes serde-style values (the token) in its 400,
// that refuses unknown keys (a dead launch for a newer client), or that lets
// a replay or a conflicting token change the launch env.
func TestRunHookPayloads(t *testing.T) {
	const secret = "super-secret-agent-token"
	cases := []struct {
		name, payload string
		noPayload     bool
		want          int
		mention       string
	}{
		{name: "token only", payload: `{"agent_token":"t1"}`, want: 200},
		{name: "unknown keys ignored", payload: `{"agent_token":"t1","future":{"x":[1,2]},"env":{"A":"1"}}`, want: 200},
		{name: "null env", payload: `{"agent_token":"t1","env":null}`, want: 200},
		{name: "not an object", payload: `["agent_token"]`, want: 400, mention: "not a JSON object"},
		{name: "not json", payload: `agent_token=` + secret, want: 400, mention: "not a JSON object"},
		{name: "missing token", payload: `{"env":{"A":"1"}}`, want: 400, mention: "agent_token"},
		{name: "token not a string", payload: `{"agent_token":42}`, want: 400, mention: "agent_token"},
		{name: "empty token", payload: `{"agent_token":""}`, want: 400, mention: "empty"},
		{name: "env not an object", payload: `{"agent_token":"` + secret + `","env":"A=1"}`, want: 400, mention: "env"},
		{name: "env value a number", payload: `{"agent_token":"` + secret + `","env":{"PORT":8080}}`, want: 400, mention: "PORT"},
		{name: "env value an object", payload: `{"agent_token":"` + secret + `","env":{"NESTED":{"v":"` + secret + `"}}}`, want: 400, mention: "NESTED"},
		{name: "env key with =", payload: `{"agent_token":"` + secret + `","env":{"A=B":"x"}}`, want: 400, mention: "env"},
		{name: "no runHookPayload", noPayload: true, want: 400, mention: "runHookPayload"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemon(t, nil)
			body := protocol.RunHookEnvelope{}
			ctx := context.Background()
			if !tc.noPayload {
				body.RunHookPayload = &tc.payload
			} else {
				ctx = offContract(ctx) // the spec requires runHookPayload
			}
			resp, err := d.client.HookRunWithResponse(ctx, body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode() != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode(), tc.want, resp.Body)
			}
			if strings.Contains(string(resp.Body), secret) || strings.Contains(string(resp.Body), "8080") {
				t.Fatalf("the refusal quotes a value: %s", resp.Body)
			}
			if !strings.Contains(string(resp.Body), tc.mention) {
				t.Fatalf("the refusal does not name %q: %s", tc.mention, resp.Body)
			}
			if boot := d.srv.boot.bootstrapped(); boot != (tc.want == 200) {
				t.Fatalf("bootstrapped=%v after %d", boot, tc.want)
			}
		})
	}
	t.Run("envelope not JSON", func(t *testing.T) {
		d := startDaemon(t, nil)
		resp, err := d.client.HookRunWithBodyWithResponse(offContract(context.Background()), "application/json", strings.NewReader("{nope"))
		if err != nil || resp.StatusCode() != 400 {
			t.Fatalf("%v %d", err, resp.StatusCode())
		}
	})
	t.Run("replay and conflict change nothing", func(t *testing.T) {
		d := startDaemon(t, nil)
		d.bootstrap(map[string]string{"WANTED": "yes"})
		for _, p := range []struct {
			token string
			want  int
		}{{testToken, 200}, {"other", 409}} {
			raw, _ := json.Marshal(map[string]any{"agent_token": p.token, "env": map[string]string{"WANTED": "hijacked"}})
			s := string(raw)
			resp, err := d.client.HookRunWithResponse(context.Background(), protocol.RunHookEnvelope{RunHookPayload: &s})
			if err != nil || resp.StatusCode() != p.want {
				t.Fatalf("token %q: %v %d", p.token, err, resp.StatusCode())
			}
		}
		if got := d.srv.boot.env()["WANTED"]; got != "yes" {
			t.Fatalf("launch env changed to %q", got)
		}
		if d.srv.boot.authorize("Bearer other") != http.StatusUnauthorized {
			t.Fatal("a conflicting run hook replaced the token")
		}
	})
}

// Catches: a check-then-set across two lock sections in install, which lets
// two racing run hooks both see an empty slot and both answer 200.
func TestConcurrentRunHooksHaveOneWinner(t *testing.T) {
	for round := range 5 {
		d := startDaemon(t, nil)
		const n = 24
		codes := make([]int, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				raw, _ := json.Marshal(map[string]string{"agent_token": fmt.Sprintf("tok-%d-%d", round, i)})
				s := string(raw)
				<-start
				resp, err := d.client.HookRunWithResponse(context.Background(), protocol.RunHookEnvelope{RunHookPayload: &s})
				if err != nil {
					t.Error(err)
					return
				}
				codes[i] = resp.StatusCode()
			}()
		}
		close(start)
		wg.Wait()
		winners, losers := 0, 0
		winner := -1
		for i, c := range codes {
			switch c {
			case 200:
				winners++
				winner = i
			case 409:
				losers++
			}
		}
		if winners != 1 || losers != n-1 {
			t.Fatalf("round %d: %d winners, %d conflicts: %v", round, winners, losers, codes)
		}
		if d.srv.boot.authorize(fmt.Sprintf("Bearer tok-%d-%d", round, winner)) != 0 {
			t.Fatalf("the winner's token is not the installed one")
		}
	}
}

// Catches: health counting exited-but-unacked execs as busy (a VM kept alive
// for a finished command), or dropping entries from execs before collection.
func TestHealthBusyAndExecs(t *testing.T) {
	d := startDaemon(t, func(c *Config) { c.ExecTTL = 50 * time.Millisecond })
	health := func() protocol.Health {
		t.Helper()
		resp, err := d.client.HealthWithResponse(context.Background())
		if err != nil || resp.JSON200 == nil {
			t.Fatalf("health: %v", err)
		}
		return *resp.JSON200
	}
	h := health()
	if h.Busy || h.Execs != 0 || h.Bootstrapped || h.Version != Version || h.IdentityRepaired {
		t.Fatalf("idle health: %+v", h)
	}
	d.bootstrap(nil)
	d.mustStart(protocol.StartRequest{ExecID: "s", Command: []string{"sh", "-c", "read x"}, Stdin: true})
	if h := health(); !h.Busy || h.Execs != 1 || !h.Bootstrapped {
		t.Fatalf("running: %+v", h)
	}
	d.client.ExecStdinWithResponse(context.Background(), "s", protocol.StdinRequest{Signal: strp("eof")}, auth(testToken))
	d.waitExited("s")
	if h := health(); h.Busy || h.Execs != 1 {
		t.Fatalf("exited, unacked: %+v", h)
	}
	d.client.ExecAckWithResponse(context.Background(), "s", auth(testToken))
	deadline := time.Now().Add(10 * time.Second)
	for health().Execs != 0 {
		if time.Now().After(deadline) {
			t.Fatal("acked exec never collected")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func strp(s string) *string { return &s }

// Catches: serving a stale or hand-written document, or limits that do not
// follow the running configuration.
func TestSchemaIsTheGeneratedDocument(t *testing.T) {
	d := startDaemon(t, nil)
	resp, err := d.client.SchemaWithResponse(context.Background())
	if err != nil || resp.StatusCode() != 200 {
		t.Fatal(err)
	}
	if !bytes.Equal(resp.Body, docs.SchemaJSON) {
		t.Fatal("/v1/schema is not docs/schema.json at default limits")
	}
	d2 := startDaemon(t, func(c *Config) { c.StreamReplayBytes = 4096; c.KillGrace = 2 * time.Second })
	resp2, _ := d2.client.SchemaWithResponse(context.Background())
	var doc struct {
		Limits map[string]float64 `json:"limits"`
	}
	if err := json.Unmarshal(resp2.Body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Limits["stream_replay_bytes"] != 4096 || doc.Limits["kill_grace_secs"] != 2 || doc.Limits["port"] != 9000 {
		t.Fatalf("limits not from the running config: %v", doc.Limits)
	}
}

// Catches: /v1/capabilities drifting from the protocol document it
// abridges (a route added to the spec but not listed, a limit not taken from
// the running configuration, a version or frames type of its own), which a
// client trusts instead of fetching the document.
func TestCapabilitiesAreTheSchemasMembers(t *testing.T) {
	for _, mod := range []func(*Config){nil, func(c *Config) { c.MaxOutputBytes = 10_000_001; c.KillGrace = 3 * time.Second }} {
		d := startDaemon(t, mod)
		ctx := context.Background()
		schema, err := d.client.SchemaWithResponse(ctx)
		if err != nil || schema.StatusCode() != 200 {
			t.Fatal(err)
		}
		caps, err := d.client.CapabilitiesWithResponse(ctx)
		if err != nil || caps.StatusCode() != 200 {
			t.Fatal(err)
		}
		// The document decoded into the capabilities' own type keeps just
		// the members they abridge.
		var want, got protocol.Capabilities
		if err := json.Unmarshal(schema.Body, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(caps.Body, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("/v1/capabilities is not /v1/schema's members:\n got %+v\nwant %+v", got, want)
		}
		if len(caps.Body) > 8<<10 {
			t.Errorf("/v1/capabilities is %d bytes; it exists to be small", len(caps.Body))
		}
	}
}

// Catches: a terminate hook that does not stop serving, or one that cuts the
// connection before answering.
func TestTerminateHookShutsDownGracefully(t *testing.T) {
	d := startDaemon(t, nil)
	resp, err := d.client.HookTerminateWithResponse(context.Background())
	if err != nil || resp.StatusCode() != 200 {
		t.Fatalf("terminate: %v", err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
		d.done <- nil // for cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after terminate")
	}
}

// Catches: a limit added to api/openapi.yaml with an env var that Config
// never reads, or an env override that is ignored.
func TestEveryLimitIsWired(t *testing.T) {
	env := map[string]string{}
	for _, l := range protocol.Limits {
		if l.Env == "" {
			continue
		}
		var probe protocol.LimitSet
		if !probe.SetLimit(l.Name, 1) {
			t.Errorf("limit %s (%s) has no LimitSet field", l.Name, l.Env)
		}
		env[l.Env] = "7"
	}
	env[protocol.EnvRepairIdentity] = "0"
	c, warnings := LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if len(warnings) != 0 {
		t.Fatalf("warnings: %v", warnings)
	}
	for _, l := range protocol.Limits {
		if got, ok := c.LimitValue(l.Name); l.Env != "" && (!ok || got != 7) {
			t.Errorf("%s=7 was not applied (got %v)", l.Env, got)
		}
	}
	if c.Identity.Enabled {
		t.Error("AGENTD_REPAIR_IDENTITY=0 did not disable identity repair")
	}
	def, _ := LoadConfig(func(string) (string, bool) { return "", false })
	if def.Port != 9000 || def.SSEKeepalive != 15*time.Second || def.ListenAddr() != ":9000" {
		t.Errorf("defaults: port %d keepalive %v addr %q", def.Port, def.SSEKeepalive, def.ListenAddr())
	}
	bad, warnings := LoadConfig(func(k string) (string, bool) {
		if k == "AGENTD_PORT" {
			return "ninety", true
		}
		return "", false
	})
	if bad.Port != 9000 || len(warnings) != 1 {
		t.Errorf("an unparseable port: %d %v", bad.Port, warnings)
	}
}
