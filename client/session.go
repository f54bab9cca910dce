package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// DefaultRefreshAfter is how long a minted proxy token is used before the
// session mints another: half the 60-minute ceiling, so a request in flight
// across the refresh still holds a token with about half an hour left.
// Refreshing just under the ceiling would put the expiry inside the window
// between building a request and the proxy reading it.
const DefaultRefreshAfter = time.Duration(taxonomy.MaxAuthTokenMinutes) * time.Minute / 2

// DefaultIdleTimeout is the silence after which an SSE connection is treated
// as dead: four of the daemon's keepalive intervals.
const DefaultIdleTimeout = time.Duration(taxonomy.SSEIdleTimeoutSec) * time.Second

// ProxyToken is what CreateMicrovmAuthToken returns: a map of header name to
// value, not a bare string. It prints as redacted and has no accessor that
// returns the secret as a string a caller could log by accident.
type ProxyToken struct {
	headers map[string]string
}

// NewProxyToken wraps the authToken header map of a CreateMicrovmAuthToken
// answer. The map is copied.
func NewProxyToken(headers map[string]string) ProxyToken {
	return ProxyToken{headers: maps.Clone(headers)}
}

func (t ProxyToken) authValue() (string, bool) {
	for k, v := range t.headers {
		if strings.EqualFold(k, taxonomy.ProxyAuthHeader) && v != "" {
			return v, true
		}
	}
	return "", false
}

// String names the token's header keys, never their values.
func (t ProxyToken) String() string {
	keys := slices.Sorted(maps.Keys(t.headers))
	return "ProxyToken{" + strings.Join(keys, ",") + ": REDACTED}"
}

// GoString is String, so %#v cannot print the secret either.
func (t ProxyToken) GoString() string { return t.String() }

// LogValue keeps the secret out of structured logs.
func (t ProxyToken) LogValue() slog.Value { return slog.StringValue(t.String()) }

// MintRequest is what a TokenMinter is asked for: a token for all of Ports,
// valid for Minutes (never more than taxonomy.MaxAuthTokenMinutes).
type MintRequest struct {
	Ports   []int
	Minutes int
}

// TokenMinter mints proxy tokens for one MicroVM, normally through the
// control plane's CreateMicrovmAuthToken. The session calls it inside each
// request's retry path, so a mint failure is retried like a dropped
// connection rather than failing a healthy run.
type TokenMinter interface {
	MintProxyToken(ctx context.Context, req MintRequest) (ProxyToken, error)
}

// TokenMinterFunc adapts a function to TokenMinter.
type TokenMinterFunc func(ctx context.Context, req MintRequest) (ProxyToken, error)

// MintProxyToken calls f.
func (f TokenMinterFunc) MintProxyToken(ctx context.Context, req MintRequest) (ProxyToken, error) {
	return f(ctx, req)
}

// Session talks to one agentd through one VM endpoint. Constructing it never
// touches the network. It is safe for concurrent use.
type Session struct {
	base        string // endpoint with a trailing slash, for the generated request builders
	agentToken  string
	hc          *http.Client
	retry       RetryPolicy
	idleTimeout time.Duration
	now         func() time.Time
	port        int
	proxy       *proxyAuth // nil for a Direct session
	pollEvery   time.Duration
	maxReattach int
	awake       *keepAwake  // nil: nothing is sent to keep the VM awake
	phase       VMPhaseFunc // nil: a stream does not know when its VM is suspended (pause.go)

	// offers is what the daemon serves beyond the reference's protocol v1,
	// learned once from /v1/schema (see daemonOffers).
	offersMu    sync.Mutex
	offersKnown bool
	offers      daemonOffers
}

// Option configures a Session.
type Option func(*Session) error

// WithHTTPClient sets the HTTP client. It must not set an overall Timeout,
// which would cut long streams; deadlines come from contexts.
func WithHTTPClient(c *http.Client) Option {
	return func(s *Session) error { s.hc = c; return nil }
}

// WithRetryPolicy sets how retryable failures are retried.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(s *Session) error { s.retry = p; return nil }
}

// WithIdleTimeout sets the SSE idle timeout (default DefaultIdleTimeout).
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Session) error {
		if d <= 0 {
			return Errorf(taxonomy.KindInvalidArg, "", "idle timeout %s is not positive", d)
		}
		s.idleTimeout = d
		return nil
	}
}

// WithClock injects the clock the proxy-token refresh schedule reads.
func WithClock(now func() time.Time) Option {
	return func(s *Session) error { s.now = now; return nil }
}

// WithAgentPort sets the guest port agentd listens on (default 9000); it is
// the port a proxied session names in X-aws-proxy-port.
func WithAgentPort(port int) Option {
	return func(s *Session) error {
		if port < 1 || port > 65535 {
			return Errorf(taxonomy.KindInvalidArg, taxonomy.FindingAgentPortAgreement, "agent port %d is outside 1..65535", port)
		}
		s.port = port
		return nil
	}
}

// WithRefreshAfter sets how long a proxy token is used before re-minting. It
// must be strictly below the 60-minute ceiling.
func WithRefreshAfter(d time.Duration) Option {
	return func(s *Session) error {
		ceiling := time.Duration(taxonomy.MaxAuthTokenMinutes) * time.Minute
		if d <= 0 || d >= ceiling {
			return Errorf(taxonomy.KindInvalidArg, taxonomy.FindingEndpointAuth,
				"a proxy-token refresh interval of %s is not strictly inside (0, %s); refreshing at the ceiling races the expiry it exists to avoid", d, ceiling)
		}
		s.refreshAfter(d)
		return nil
	}
}

// WithPollInterval sets the longest pause between polls while waiting for an
// exec to exit (default one second; polls start faster and back off).
func WithPollInterval(d time.Duration) Option {
	return func(s *Session) error { s.pollEvery = d; return nil }
}

func (s *Session) refreshAfter(d time.Duration) {
	if s.proxy == nil {
		s.proxy = &proxyAuth{}
	}
	s.proxy.refreshAfter = d
}

func newSession(endpoint, agentToken string, opts []Option) (*Session, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, Errorf(taxonomy.KindInvalidArg, "", "endpoint %q is not an http(s) URL", endpoint)
	}
	if agentToken == "" {
		return nil, Errorf(taxonomy.KindInvalidArg, "", "the agent token is empty; agentd answers 401 to every bearer route")
	}
	base := u.String()
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	s := &Session{
		base: base, agentToken: agentToken, hc: http.DefaultClient, retry: DefaultRetryPolicy,
		idleTimeout: DefaultIdleTimeout, now: time.Now, port: taxonomy.DefaultAgentPort,
		pollEvery: time.Second, maxReattach: 5,
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Direct is a session with a daemon reached without the platform proxy: a
// local agentd, or the emulator. Only the agent token is sent.
func Direct(endpoint, agentToken string, opts ...Option) (*Session, error) {
	s, err := newSession(endpoint, agentToken, opts)
	if err != nil {
		return nil, err
	}
	s.proxy = nil // WithRefreshAfter means nothing without a proxy
	return s, nil
}

// Proxied is a session through the platform's endpoint proxy: each request
// also carries X-aws-proxy-auth from minter and X-aws-proxy-port naming the
// agent port. Tokens are minted lazily inside the request path and re-minted
// after DefaultRefreshAfter, after Invalidate, or when a new port widens the
// scope. Plain http is refused for anything but a loopback host, since the
// request carries two credentials.
func Proxied(endpoint, agentToken string, minter TokenMinter, opts ...Option) (*Session, error) {
	if minter == nil {
		return nil, Errorf(taxonomy.KindInvalidArg, taxonomy.FindingEndpointAuth, "a proxied session needs a token minter")
	}
	s, err := newSession(endpoint, agentToken, opts)
	if err != nil {
		return nil, err
	}
	if u, _ := url.Parse(s.base); u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return nil, Errorf(taxonomy.KindInvalidArg, taxonomy.FindingEndpointAuth,
			"endpoint %q is plain http; a proxied request carries the proxy token and the agent token, so only https (or loopback, for tests) is allowed", u.Redacted())
	}
	if s.proxy == nil {
		s.proxy = &proxyAuth{refreshAfter: DefaultRefreshAfter}
	}
	s.proxy.minter = minter
	return s, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Endpoint is the endpoint URL the session talks to.
func (s *Session) Endpoint() string { return s.base }

// String identifies the session without its tokens.
func (s *Session) String() string {
	mode := "direct"
	if s.proxy != nil {
		mode = "proxied port " + strconv.Itoa(s.port)
	}
	return "Session{" + s.base + " " + mode + " agent_token=REDACTED}"
}

// GoString is String, so %#v cannot print the agent token.
func (s *Session) GoString() string { return s.String() }

// LogValue keeps the agent token out of structured logs.
func (s *Session) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("endpoint", s.base), slog.String("agent_token", "REDACTED")}
	if s.proxy != nil {
		attrs = append(attrs, slog.Int("proxy_port", s.port))
	}
	return slog.GroupValue(attrs...)
}

// Invalidate drops the cached proxy token, so the next request mints a
// fresh one. Call it after a resume: a token minted before the suspend may
// be past its life even if this process's clock says otherwise.
func (s *Session) Invalidate() {
	if s.proxy != nil {
		s.proxy.invalidate()
	}
}

// Mints is how many proxy tokens the session has minted (0 for Direct).
func (s *Session) Mints() int {
	if s.proxy == nil {
		return 0
	}
	s.proxy.mu.Lock()
	defer s.proxy.mu.Unlock()
	return s.proxy.mints
}

// ConnectHeaders are the proxy headers a caller needs to open its own
// connection to port on the same VM (a guest web server, say). The token's
// scope is widened to include port, never narrowed: the agent port keeps
// working. A Direct session returns no headers. The values are credentials;
// do not log them.
func (s *Session) ConnectHeaders(ctx context.Context, port int) (http.Header, error) {
	h := http.Header{}
	if s.proxy == nil {
		return h, nil
	}
	if port < 1 || port > 65535 {
		return nil, Errorf(taxonomy.KindInvalidArg, taxonomy.FindingAllowedPortsUnion, "port %d is outside 1..65535", port)
	}
	tok, err := s.proxy.token(ctx, s.now, s.port, port)
	if err != nil {
		return nil, err
	}
	for k, v := range tok.headers {
		h.Set(k, v)
	}
	if h.Get(taxonomy.ProxyPortHeader) == "" {
		h.Set(taxonomy.ProxyPortHeader, strconv.Itoa(port))
	}
	return h, nil
}

// proxyAuth caches one token and the set of ports it was minted for.
type proxyAuth struct {
	minter       TokenMinter
	refreshAfter time.Duration

	mu       sync.Mutex
	tok      ProxyToken
	ports    []int // sorted; what the last mint asked for
	mintedAt time.Time
	valid    bool
	mints    int
}

func (p *proxyAuth) invalidate() {
	p.mu.Lock()
	p.valid = false
	p.mu.Unlock()
}

// token returns a token that is fresh and covers agentPort and port, minting
// one for the union of the cached scope and port when needed. The lock is
// held across the mint so concurrent requests mint once.
func (p *proxyAuth) token(ctx context.Context, now func() time.Time, agentPort, port int) (ProxyToken, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := now()
	if p.valid && slices.Contains(p.ports, port) && t.Sub(p.mintedAt) < p.refreshAfter && !t.Before(p.mintedAt) {
		return p.tok, nil
	}
	want := slices.Clone(p.ports)
	for _, q := range []int{agentPort, port} {
		if !slices.Contains(want, q) {
			want = append(want, q)
		}
	}
	slices.Sort(want)
	tok, err := p.minter.MintProxyToken(ctx, MintRequest{Ports: want, Minutes: taxonomy.MaxAuthTokenMinutes})
	if err != nil {
		switch k := KindOf(err); k {
		case taxonomy.KindCredentials, taxonomy.KindInvalidArg, taxonomy.KindPrecondition:
			// No credentials, or a request the control plane refused as
			// malformed: the identical request cannot succeed, so it is not
			// the retryable AuthTokenMint.
			var finding taxonomy.FindingID
			var inner *Error
			if errors.As(err, &inner) {
				finding = inner.Finding()
			}
			return ProxyToken{}, Errorf(k, finding, "minting a proxy token for ports %v failed: %v", want, err).WithCause(err)
		}
		return ProxyToken{}, WireErrorf(taxonomy.WireAuthTokenMint,
			"minting a proxy token for ports %v failed: %v; minting is inside the request path, so the identical request may succeed", want, err).
			WithFinding(taxonomy.FindingEndpointAuth).WithCause(err)
	}
	if _, ok := tok.authValue(); !ok {
		return ProxyToken{}, WireErrorf(taxonomy.WireAuthTokenMint,
			"the minted token map has no %s entry (got %s)", taxonomy.ProxyAuthHeader, tok).WithFinding(taxonomy.FindingAuthTokenHeaderMap)
	}
	p.tok, p.ports, p.mintedAt, p.valid = tok, want, t, true
	p.mints++
	return tok, nil
}

// authorize adds the bearer (unless bearer is false) and, for a proxied
// session, both proxy headers, minting if the cached token is stale.
func (s *Session) authorize(ctx context.Context, req *http.Request, bearer bool) error {
	if bearer {
		req.Header.Set("Authorization", "Bearer "+s.agentToken)
	}
	if s.proxy == nil {
		return nil
	}
	tok, err := s.proxy.token(ctx, s.now, s.port, s.port)
	if err != nil {
		return err
	}
	for k, v := range tok.headers {
		req.Header.Set(k, v)
	}
	if req.Header.Get(taxonomy.ProxyPortHeader) == "" {
		req.Header.Set(taxonomy.ProxyPortHeader, strconv.Itoa(s.port))
	}
	return nil
}

// call describes one request for send. Whether it carries the bearer token
// and may be sent again is the operation's, from protocol.Operations.
type call struct {
	op    string // a protocol.Op* id, also named in messages
	build func(server string) (*http.Request, error)
	file  bool // a 404 means fs.ErrNotExist
	// path is the file or directory a file call names, quoted in its errors.
	path string
	// command is the argv an exec start names, quoted in a spawn failure.
	command []string
	// oneShot: the body is the caller's reader, which a second request
	// cannot replay, so not even a proxy refusal resends it.
	oneShot bool
	// resumesItself: the caller reconnects on its own terms (a stream
	// resumes at its cursor), so send makes one attempt.
	resumesItself bool
}

// send builds, authorizes and sends c, retrying retryable failures when c
// is safe to repeat. The proxy token is obtained inside each attempt, so a
// retry after a stale or invalidated token mints a fresh one. A proxied
// request the endpoint proxy refuses (403) is sent once more with a freshly
// minted token, whatever its method: the proxy refused before forwarding, so
// the daemon never saw the first one. Only a oneShot body, which cannot be
// replayed, is not resent. On success the caller owns resp.Body.
func (s *Session) send(ctx context.Context, c call) (*http.Response, error) {
	op, ok := protocol.OperationByID(c.op)
	if !ok {
		return nil, Errorf(taxonomy.KindUnexpected, "", "%s: not an operation of api/openapi.yaml", c.op)
	}
	reminted := false // at most one re-mint per call, across all attempts
	var attempt func(ctx context.Context) (*http.Response, error)
	attempt = func(ctx context.Context) (*http.Response, error) {
		req, err := c.build(s.base)
		if err != nil {
			return nil, Errorf(taxonomy.KindInvalidArg, "", "%s: building the request: %w", c.op, err)
		}
		req = req.WithContext(ctx)
		if err := s.authorize(ctx, req, op.Bearer); err != nil {
			return nil, err
		}
		resp, err := s.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctxErr(ctx.Err(), "%s: %v", c.op, ctx.Err())
			}
			return nil, WireErrorf(taxonomy.WireTransport, "%s: %v", c.op, err).WithCause(err)
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return resp, nil
		}
		err = s.statusError(c, resp)
		if errors.Is(err, errProxyRefused) && !reminted && !c.oneShot {
			// statusError dropped the cached token; authorize mints anew.
			reminted = true
			return attempt(ctx)
		}
		return nil, err
	}
	if !op.Idempotent || c.oneShot || c.resumesItself {
		return attempt(ctx)
	}
	return RetryValue(ctx, s.retry, attempt)
}

// statusError classifies a non-2xx answer exactly as api/errors.yaml says:
// the slug (or, without a known slug, the status) picks the wire kind and
// the wire kind picks the error kind.
func (s *Session) statusError(c call, resp *http.Response) error {
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	slug, detail := "", strings.TrimSpace(string(raw))
	var body protocol.ErrorBody
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		slug, detail = body.Error, body.Detail
	}
	msg := fmt.Sprintf("%s: HTTP %d", c.op, resp.StatusCode)
	if slug != "" {
		msg += " " + slug
	}
	if detail != "" {
		msg += ": " + detail
	}
	// The slug, when the daemon sent a known one, classifies before the
	// status: spawn_failed is a 500 that no retry can fix.
	wire, ok := taxonomy.WireKindFromSlug(slug)
	if !ok {
		wire, ok = taxonomy.WireKindFromStatus(resp.StatusCode)
	}
	if !ok {
		if resp.StatusCode == http.StatusForbidden && s.proxy != nil {
			// The endpoint proxy's refusal: an expired token or a port outside
			// its scope. Drop the token: send re-mints and resends once, and
			// the caller's next request re-mints too.
			s.proxy.invalidate()
			return Errorf(taxonomy.KindCredentials, taxonomy.FindingAllowedPortsUnion, "%s (the endpoint proxy refused the token; it may have expired or not cover port %d)", msg, s.port).WithCause(errProxyRefused)
		}
		if resp.StatusCode == http.StatusForbidden {
			// agentd never answers 403; a direct session that meets one is
			// talking to the endpoint proxy, which wants a proxy token this
			// session was built not to send. Not resent: no token would
			// change the answer.
			return Errorf(taxonomy.KindCredentials, taxonomy.FindingEndpointAuth, "%s (the endpoint expects a proxy token; this session sends none)", msg)
		}
		return Errorf(taxonomy.KindUnexpected, "", "%s (a status agentd does not send)", msg)
	}
	msg += hintFor(c, wire, slug)
	e := WireError(wire, msg)
	if slug != "" {
		e = e.withSlug(slug)
	}
	if c.file && wire == taxonomy.WireNotFound {
		e = e.WithCause(fs.ErrNotExist)
	} else if slug == "" && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed) {
		e = e.WithCause(errNoRoute)
	}
	return e
}

// errNoRoute is the cause of a 404 or 405 without an agentd error slug: no
// route has the path (x-unmatched-path), so the daemon (or something in
// front of it) does not serve the operation at all.
var errNoRoute = errors.New("the daemon serves no such route")

// hintFor is what a person does next about a daemon refusal, with the path
// or command it concerns. The error kind stays what api/errors.yaml derives
// (the exit table is the reference's and deliberately coarse); the message is
// where the specific fix goes.
func hintFor(c call, wire taxonomy.WireKind, slug string) string {
	switch {
	case wire == taxonomy.WireUnauthorized:
		return "; the agent token is not the one installed at launch: reattach with the token the launching process read from Sandbox.AgentToken (or `microvm run --keep` printed)"
	case c.file && wire == taxonomy.WireNotFound:
		return fmt.Sprintf("; %q does not exist in the VM: check the path (relative paths are resolved against the daemon's working directory, the image WORKDIR), or write it first", c.path)
	case slug == "spawn_failed":
		return fmt.Sprintf("; the command %q could not be started: its program is not on the image's PATH or its cwd does not exist; name the program by absolute path, fix Cwd, or set Shell with one script string", c.command)
	}
	return ""
}

// decodeJSON reads a JSON answer into v, closing the body. At most
// MaxAnswerBytes are read: more is a TooLarge error naming that bound.
func decodeJSON(op string, resp *http.Response, v any) error {
	return decodeJSONMax(op, resp, v, "MAX_ANSWER_BYTES", taxonomy.MaxAnswerBytes)
}

// decodeRecord is decodeJSON for the answers that carry output or many
// entries (an exec record, a listing page), bounded by MaxRecordAnswerBytes.
func decodeRecord(op string, resp *http.Response, v any) error {
	return decodeJSONMax(op, resp, v, "MAX_RECORD_ANSWER_BYTES", taxonomy.MaxRecordAnswerBytes)
}

func decodeJSONMax(op string, resp *http.Response, v any, key string, limit int64) error {
	defer resp.Body.Close()
	if resp.ContentLength > limit {
		// Refused before a byte is read.
		return overBound(op, &BoundError{Key: key, Limit: limit, What: fmt.Sprintf("the answer's Content-Length %d", resp.ContentLength)}, "")
	}
	br := newBoundedReader(resp.Body, &BoundError{Key: key, Limit: limit, What: "the answer"})
	if err := json.NewDecoder(br).Decode(v); err != nil {
		var be *BoundError
		if errors.As(err, &be) {
			return overBound(op, be, "")
		}
		return Errorf(taxonomy.KindProtocol, "", "%s: the answer is not the documented JSON: %w", op, err)
	}
	return nil
}

// Health reads GET /v1/health. It carries no bearer (the route is open), only
// the proxy headers a proxied session needs to reach it.
func (s *Session) Health(ctx context.Context) (protocol.Health, error) {
	var h protocol.Health
	resp, err := s.send(ctx, call{op: protocol.OpHealth, build: protocol.NewHealthRequest})
	if err != nil {
		return h, err
	}
	return h, decodeJSON("health", resp, &h)
}

var errStreamIdle = errors.New("no bytes within the idle timeout")

// errProxyRefused is the cause of a Credentials error for a proxied request
// the endpoint proxy answered 403: it never reached agentd.
var errProxyRefused = errors.New("the endpoint proxy refused the request")

// daemonOffers is what this session's daemon serves beyond the reference's
// protocol v1 that the exec paths use: the run route (start, stream and
// release in one exchange) and binary frames on the stream and run routes
// (recorded; a stream asks for frames by content negotiation either way).
type daemonOffers struct {
	run    bool
	frames bool
	// maxOutput is the daemon's running max_output_bytes, 0 when unknown:
	// a run's record keeps that much of each stream, and so does Run.
	maxOutput int
	// routes is every route the daemon listed, as "METHOD /pattern".
	routes map[string]bool
}

// Serves reports whether this session's daemon serves the operation op (a
// protocol.Op* name), as its /v1/capabilities (or /v1/schema) lists it,
// asked once per session. A route beyond the reference's protocol v1 is
// not there on the reference's daemon or an older one of ours, so a caller
// with a fallback asks here first instead of sending a body to a 404. False
// when the daemon's routes cannot be learnt (it may still serve op).
func (s *Session) Serves(ctx context.Context, op string) bool {
	o, ok := protocol.OperationByID(op)
	if !ok {
		return false
	}
	s.daemonOffers(ctx)
	s.offersMu.Lock()
	defer s.offersMu.Unlock()
	return s.offers.routes[o.Method+" "+o.Pattern]
}

// daemonOffers learns, once per session, whether the daemon serves the run
// route and binary frames, from its /v1/capabilities (a few hundred bytes)
// or, where that is 404 (the reference's daemon, an older one of ours), its
// /v1/schema document (about 124 KB, which took 3 ms of a local session's
// first exchange to fetch and decode; issue 52): a reference daemon lists
// neither and gets protocol v1's routes. A fetch that fails in transport is
// not remembered, so the next exec asks again; until then the exec uses
// protocol v1's routes, which every daemon serves.
func (s *Session) daemonOffers(ctx context.Context) daemonOffers {
	s.offersMu.Lock()
	defer s.offersMu.Unlock()
	if s.offersKnown {
		return s.offers
	}
	op := protocol.OpCapabilities
	resp, err := s.send(ctx, call{op: op, build: protocol.NewCapabilitiesRequest})
	var werr *Error
	if errors.As(err, &werr) && werr.wire == taxonomy.WireNotFound {
		op = protocol.OpSchema
		resp, err = s.send(ctx, call{op: op, build: protocol.NewSchemaRequest})
	}
	if err != nil {
		if KindOf(err) != taxonomy.KindRetryable && ctx.Err() == nil {
			s.offersKnown = true // the daemon answered: it has no such document
		}
		return daemonOffers{}
	}
	var doc struct {
		Routes []struct {
			Method string `json:"method"`
			Path   string `json:"path"`
		} `json:"routes"`
		Frames struct {
			MediaType string `json:"media_type"`
		} `json:"frames"`
		Limits map[string]float64 `json:"limits"`
	}
	// Both documents name these members alike (api/openapi.yaml's
	// Capabilities is the schema's, abridged).
	if decodeJSON(op, resp, &doc) == nil {
		run, _ := protocol.OperationByID(protocol.OpExecRun)
		s.offers.routes = make(map[string]bool, len(doc.Routes))
		for _, r := range doc.Routes {
			if r.Method == run.Method && r.Path == run.Pattern {
				s.offers.run = true
			}
			s.offers.routes[r.Method+" "+r.Path] = true
		}
		s.offers.frames = doc.Frames.MediaType == protocol.FramesMediaType
		if v := doc.Limits["max_output_bytes"]; v >= 0 && v < 1<<40 {
			s.offers.maxOutput = int(v)
		}
	}
	s.offersKnown = true
	return s.offers
}
