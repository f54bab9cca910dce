package agentd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Version is reported in every response's microvms-agentd-version header, in
// /v1/health and as /v1/schema's daemon_version. It is declared once, as
// x-daemon-version in api/openapi.yaml; a build may stamp another with
// -ldflags -X, and then all three report that one.
var Version = protocol.DaemonVersion

// shutdownGrace bounds how long a graceful shutdown waits for in-flight
// requests before closing the rest.
const shutdownGrace = 10 * time.Second

// Server implements protocol.ServerInterface: the hooks, the exec engine and
// health/schema here, the fs routes by delegation to FS.
type Server struct {
	cfg  Config
	log  *slog.Logger
	fs   *FS
	boot bootstrap

	// identity is the latest identity repair's report: startup's, then the
	// first bootstrap's once that finishes. Guarded by identityMu.
	identityMu sync.Mutex
	identity   IdentityReport
	// bootRepair runs the bootstrap repair once, before the first run hook's
	// 200; bootRepairDone closes when it has finished (or was skipped), so a
	// test can check it ran.
	bootRepair     sync.Once
	bootRepairDone chan struct{}
	execs          *registry
	schema         []byte
	metrics        metricsSampler // GET /v1/metrics (metrics_linux.go)

	// inner is the routed application; Handler wraps it in the rules that hold
	// for every response. A field so a test can route to a handler that panics.
	inner http.Handler

	terminate     chan struct{}
	terminateOnce sync.Once
	// stopping is closed when shutdown begins, so open SSE streams end and do
	// not hold the graceful shutdown until its deadline.
	stopping chan struct{}
	stopOnce sync.Once

	// openSlots holds one token per unauthenticated body being read
	// (limits.max_open_bodies).
	openSlots chan struct{}

	// conns holds the open connections under limits.max_connections.
	conns *connTable
	// watchSlots holds one token per open watch stream (limits.max_watches).
	watchSlots chan struct{}
}

var _ protocol.ServerInterface = (*Server)(nil)

// NewServer builds the daemon from cfg. It runs startup identity repair once
// (only when cfg.Identity.Enabled) before anything can be served, so no request
// can observe the image's shared identity. On the platform startup is before
// the image snapshot, so every VM restored from it would share that result;
// the first successful run hook (which every restored VM gets) repairs again.
func NewServer(cfg Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	cfg = cfg.normalized()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("agentd: open %s for children's stdin: %w", os.DevNull, err)
	}
	schema, err := schemaDocument(&cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:            cfg,
		log:            log,
		fs:             NewFS(cfg.LimitSet, log),
		schema:         schema,
		terminate:      make(chan struct{}),
		stopping:       make(chan struct{}),
		bootRepairDone: make(chan struct{}),
		openSlots:      make(chan struct{}, cfg.MaxOpenBodies),
		conns:          &connTable{bound: connBound(cfg.MaxConnections)},
		watchSlots:     make(chan struct{}, max(cfg.MaxWatches, 0)),
	}
	s.identity = RepairIdentity(cfg.Identity, log)
	logIdentityDecision(log, cfg.Identity, s.identity)
	s.execs = newRegistry(&s.cfg, log, devNull)
	inner, err := s.routes()
	if err != nil {
		return nil, err
	}
	s.inner = inner
	return s, nil
}

// Handler is the whole application: every rule that must hold for every
// response wraps the generated router.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serveOuter(w, r)
	})
}

// serveOuter is outermost, so nothing inside it can escape: the version header
// is set before anything else runs (404s and refusals included), and a panic
// anywhere below, auth and routing included, becomes a 500 instead of a
// dropped connection the client cannot tell from a dead VM.
func (s *Server) serveOuter(w http.ResponseWriter, r *http.Request) {
	if c, ok := r.Context().Value(connKey{}).(*tlsProbeConn); ok {
		c.handlerOwns()
		if c.slot != nil {
			// A connection inside a handler is never shed for a newcomer.
			c.slot.inHandler.Store(true)
			defer c.slot.inHandler.Store(false)
		}
	}
	w.Header().Set(protocol.VersionHeader, Version)
	tw := &trackingWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v) // a deliberate abort is the one panic that means "drop it"
		}
		s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path,
			"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		if tw.wrote.Load() {
			return // the status is already on the wire; end the body where it is
		}
		h := w.Header()
		clear(h)
		h.Set(protocol.VersionHeader, Version)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "internal error: the handler failed; the daemon is still serving\n")
	}()
	s.inner.ServeHTTP(tw, r)
}

// trackingWriter records whether the response has started, so the panic
// handler knows whether a 500 can still be sent. It forwards Flush, ReadFrom
// (sendfile for downloads) and Unwrap (http.ResponseController).
type trackingWriter struct {
	http.ResponseWriter
	wrote atomic.Bool
}

func (t *trackingWriter) WriteHeader(code int) {
	if code >= 200 {
		t.wrote.Store(true)
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(p []byte) (int, error) {
	t.wrote.Store(true)
	return t.ResponseWriter.Write(p)
}

func (t *trackingWriter) ReadFrom(r io.Reader) (int64, error) {
	t.wrote.Store(true)
	if rf, ok := t.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(t.ResponseWriter, r)
}

func (t *trackingWriter) Flush() {
	t.wrote.Store(true)
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// routes builds the generated router with the bearer gate spliced in between
// route matching and the generated wrapper. Matching first keeps an unknown
// path a 404 rather than a 401; gating before the wrapper means auth is
// decided before the wrapper parses query parameters (a bad offset from an
// unauthenticated caller is 401, not 400) and before any body byte is read.
func (s *Server) routes() (http.Handler, error) {
	mux := &gatedMux{ServeMux: http.NewServeMux(), gate: s.gate, open: s.openRoute}
	protocol.HandlerWithOptions(s, protocol.StdHTTPServerOptions{
		BaseRouter:       mux,
		ErrorHandlerFunc: s.paramError,
	})
	if mux.err != nil {
		return nil, mux.err
	}
	return mux, nil
}

// gatedMux is the BaseRouter handed to the generated HandlerWithOptions: it
// wraps each bearer route's handler in the gate as the route is registered.
type gatedMux struct {
	*http.ServeMux
	gate func(http.HandlerFunc) http.HandlerFunc
	open func(pattern string, h http.HandlerFunc) http.HandlerFunc
	err  error
}

// ServeHTTP answers an unmatched path (404, 405) without reading a body sent
// with it: net/http would otherwise read that body before writing the status,
// so a slow one held the connection open for as long as its sender liked.
func (m *gatedMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		if _, pattern := m.ServeMux.Handler(r); pattern == "" {
			w.Header().Set("Connection", "close")
		}
	}
	m.ServeMux.ServeHTTP(w, r)
}

func (m *gatedMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	op, known := operationsByPattern[pattern]
	if !known {
		// Cannot happen while the router and the table come from one
		// api/openapi.yaml; refusing to start beats serving a route whose
		// auth was never decided.
		m.err = fmt.Errorf("agentd: route %q is not in the operations table", pattern)
		return
	}
	if op.Bearer {
		h = m.gate(h)
	} else {
		h = m.open(pattern, h)
	}
	m.ServeMux.HandleFunc(pattern, h)
}

// operationsByPattern indexes api/openapi.yaml's operations table by the
// ServeMux pattern the generated router registers ("GET /v1/exec/{id}"): the
// bearer gate and the error-body media of each route are read from it, never
// retyped here.
var operationsByPattern = func() map[string]protocol.Operation {
	m := make(map[string]protocol.Operation, len(protocol.Operations))
	for _, op := range protocol.Operations {
		m[op.Method+" "+op.Pattern] = op
	}
	return m
}()

// gate decides a bearer route before the wrapper or handler runs: 503 until a
// token is installed, 401 for a missing or wrong one, 413 for a declared body
// over max_body_bytes; otherwise the body is capped on the wire and the route
// runs. Nothing here reads a body byte before the decision.
func (s *Server) gate(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if status := s.boot.authorize(r.Header.Get("Authorization")); status != 0 {
			s.log.Debug("request refused", "status", status, "method", r.Method, "path", r.URL.Path)
			s.refuse(w, r, status, "")
			return
		}
		markAuthenticated(r)
		if r.ContentLength > s.cfg.MaxBodyBytes {
			s.refuse(w, r, http.StatusRequestEntityTooLarge, bodyTooLargeText(s.cfg.MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		next(w, r)
	}
}

// markAuthenticated records that r's connection carried an authenticated
// request, so the connection bound sheds it only after every connection that
// never did.
func markAuthenticated(r *http.Request) {
	if c, ok := r.Context().Value(connKey{}).(*tlsProbeConn); ok && c.slot != nil {
		c.slot.authed.Store(true)
	}
}

// runHookPattern is the one open route that reads a body.
const runHookPattern = "POST " + protocol.HookPrefix + "/run"

// openRoute holds the open routes to what an unauthenticated caller may cost.
// Only the run hook reads a body: it gets one of max_open_bodies slots and
// open_body_timeout_secs to deliver it. Every other open route ignores any
// body sent to it and closes the connection after answering, instead of
// reading that body to keep the connection (which a slow body would stretch
// out indefinitely: 150 bodies at a byte per two seconds were all still open
// after 90 s, and under a low fd limit health stopped answering).
func (s *Server) openRoute(pattern string, next http.HandlerFunc) http.HandlerFunc {
	if pattern != runHookPattern {
		return func(w http.ResponseWriter, r *http.Request) {
			// An open route needs no token, but a caller that sends the right
			// one (a client's health check) counts as authenticated for the
			// connection bound's shedding order.
			if h := r.Header.Get("Authorization"); h != "" && s.boot.authorize(h) == 0 {
				markAuthenticated(r)
			}
			if r.ContentLength != 0 {
				w.Header().Set("Connection", "close")
			}
			next(w, r)
		}
	}
	return func(w http.ResponseWriter, r *http.Request) {
		release, ok := s.openBody(w)
		if !ok {
			w.Header().Set("Connection", "close")
			http.Error(w, "too many unauthenticated request bodies are being read (limits.max_open_bodies); retry", http.StatusServiceUnavailable)
			return
		}
		defer release()
		next(w, r)
	}
}

// openBody claims a slot to read an unauthenticated body and bounds the read
// by open_body_timeout_secs. It reports false, claiming nothing, when every
// slot is taken.
func (s *Server) openBody(w http.ResponseWriter) (release func(), ok bool) {
	select {
	case s.openSlots <- struct{}{}:
	default:
		s.log.Warn("refusing an unauthenticated body: every slot is taken", "max_open_bodies", s.cfg.MaxOpenBodies)
		return nil, false
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.OpenBodyTimeout))
	return func() { <-s.openSlots }, true
}

func bodyTooLargeText(limit int64) string {
	return "request body is larger than max_body_bytes (" + strconv.FormatInt(limit, 10) + " bytes)\n"
}

// refuse answers a request the daemon will not serve. A small body is drained
// first, because unread bytes left in the socket make the server reset the
// connection and a pooled client sees a transport error instead of the status;
// a body over max_drain_bytes is not worth reading, so the connection closes.
// The cap is ours to set: left alone, net/http would read up to 256 KiB of a
// refused body on an unauthenticated caller's behalf.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, text string) {
	if !s.drain(w, r) {
		w.Header().Set("Connection", "close")
	}
	if text == "" {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(text)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, text)
}

// drain reads and discards at most max_drain_bytes of a refused body and
// reports whether the whole body was consumed (so keep-alive can survive).
func (s *Server) drain(w http.ResponseWriter, r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return true
	}
	if r.ContentLength > s.cfg.MaxDrainBytes {
		return false
	}
	// Reading would send "100 Continue" and invite the body we are refusing.
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		return false
	}
	// The caller may be unauthenticated: the drain takes a slot and has a
	// deadline like any open body, and with no slot free it is skipped.
	release, ok := s.openBody(w)
	if !ok {
		return false
	}
	defer release()
	n, err := io.CopyN(io.Discard, r.Body, s.cfg.MaxDrainBytes+1)
	return errors.Is(err, io.EOF) && n <= s.cfg.MaxDrainBytes
}

// paramError answers a request the generated wrapper could not bind: always
// 400, never 404 (a client maps 404 to "absent"), in the body media the
// route's 400 declares (the exec routes' JSON ErrorBody, the fs routes' text).
func (s *Server) paramError(w http.ResponseWriter, r *http.Request, err error) {
	switch operationsByPattern[r.Pattern].ErrorMedia[http.StatusBadRequest] {
	case "application/json":
		writeError(w, taxonomy.SlugMalformedRequest, err.Error())
	case "text/plain":
		FSParamError(w, err)
	default:
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
}

// httpServer is the daemon's HTTP server: the handler and the limits a
// connection gets before anything is authenticated.
func (s *Server) httpServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// limits.max_header_bytes: what one connection may make the daemon
		// hold before anything is authenticated.
		MaxHeaderBytes: int(min(s.cfg.MaxHeaderBytes, math.MaxInt32)),
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		// The connection rides in each request's context so serveOuter can
		// tell it a handler owns the next response; idle hands it back.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if pc, ok := c.(*tlsProbeConn); ok && st == http.StateIdle {
				pc.serverOwns()
			}
		},
	}
}

// Serve answers on ln until ctx ends or the terminate hook arrives, then shuts
// down gracefully: in-flight requests finish (up to a deadline) and open
// streams end without an exit event, which tells their clients the connection
// ended, not the command.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := s.httpServer()
	s.log.Info("connection bound", "max_connections", s.conns.bound, "configured", s.cfg.MaxConnections)
	go s.execs.collectLoop(s.stopping)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(&tlsProbeListener{Listener: ln, log: s.log, table: s.conns}) }()
	select {
	case err := <-errc:
		s.stop()
		return err
	case <-ctx.Done():
	case <-s.terminate:
	}
	s.log.Info("shutting down", "grace", shutdownGrace.String())
	s.stop()
	shutdownWithin(hs, shutdownGrace)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// shutdownWithin lets in-flight requests finish for up to grace, then closes
// every connection still open, so a handler that outlives the grace cannot
// hold the daemon's exit.
func shutdownWithin(hs *http.Server, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		_ = hs.Close()
	}
}

// logIdentityDecision is the one startup line saying whether identity repair
// ran and why, so a deployment can tell from its log which case it is in.
func logIdentityDecision(log *slog.Logger, cfg IdentityConfig, rep IdentityReport) {
	why := cfg.Why
	if why == "" {
		why = "the configuration says so"
	}
	if !cfg.Enabled {
		log.Info("identity repair skipped: "+why, "identity_repaired", false, "finding", taxonomy.FindingGuestNotDetectable)
		return
	}
	log.Info("identity repair ran: "+why, "identity_repaired", rep.Repaired, "identity_degraded", rep.Degraded)
}

func (s *Server) stop() { s.stopOnce.Do(func() { close(s.stopping) }) }

// identityReport is the latest repair's report, for health.
func (s *Server) identityReport() IdentityReport {
	s.identityMu.Lock()
	defer s.identityMu.Unlock()
	return s.identity
}

// repairIdentityAtBootstrap runs identity repair again, once, before the
// first successful run hook answers 200: a restored VM's startup repair
// happened before the snapshot, in the image build, so until this ran every
// exec would see the snapshot's machine-id and hostname. It is a few syscalls
// and file writes; a failure is logged and reported by health as degraded,
// never fatal to the hook.
func (s *Server) repairIdentityAtBootstrap() {
	s.bootRepair.Do(func() {
		defer close(s.bootRepairDone)
		if !s.cfg.Identity.Enabled {
			return
		}
		rep := RepairIdentity(s.cfg.Identity, s.log.With("at", "bootstrap"))
		s.identityMu.Lock()
		s.identity = rep
		s.identityMu.Unlock()
	})
}

// tlsProbeListener answers raw TLS handshake bytes on the plain port with a
// 400. Something in the platform's path probes the port with TLS first; left
// to net/http, a ClientHello has no newline to end a request line, so the
// probe would hang until a timeout instead of being told.
type tlsProbeListener struct {
	net.Listener
	log *slog.Logger
	// table bounds the connections held open (limits.max_connections); nil
	// holds any number.
	table *connTable
}

func (l *tlsProbeListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		pc := &tlsProbeConn{Conn: c, log: l.log, table: l.table}
		if l.table == nil {
			return pc, nil
		}
		slot, ok := l.table.admit(c.Close)
		if !ok {
			// Every held connection is inside a handler: this one waits for
			// nothing and is closed at once, so the accept loop never stalls.
			l.log.Debug("connection bound full, every connection busy; closing the newcomer", "max_connections", l.table.bound)
			_ = c.Close()
			continue
		}
		pc.slot = slot
		return pc, nil
	}
}

// tlsHandshakeRecord is the TLS record type of a handshake (RFC 8446 §5.1); no
// HTTP/1 method starts with it.
const tlsHandshakeRecord = 0x16

type tlsProbeConn struct {
	net.Conn
	log     *slog.Logger
	checked atomic.Bool
	// handled is false while net/http itself may answer on this connection:
	// from accept, or from the end of a response (StateIdle), until a
	// handler starts. What it writes then is a response of its own (400 for
	// a malformed request, 431, 501, 505, 417), which never passed through
	// serveOuter; Write stamps the version header into it.
	handled atomic.Bool
	// table and slot are this connection's place under the connection bound.
	table *connTable
	slot  *connSlot
}

type connKey struct{}

// Close releases the connection's place under the bound.
func (c *tlsProbeConn) Close() error {
	if c.slot != nil {
		c.table.release(c.slot)
	}
	return c.Conn.Close()
}

func (c *tlsProbeConn) handlerOwns() { c.handled.Store(true) }
func (c *tlsProbeConn) serverOwns()  { c.handled.Store(false) }

// Write stamps the version header into the first write net/http makes while
// no handler owns the connection. Only that first write, and only when it is
// a status line whose header block lacks the header: writes inside a
// handler's response, body bytes included, are never examined, so a file
// that happens to start with "HTTP/1.1" downloads unchanged.
func (c *tlsProbeConn) Write(p []byte) (int, error) {
	if c.handled.Load() || !c.handled.CompareAndSwap(false, true) {
		return c.Conn.Write(p)
	}
	stamped, ok := stampVersion(p)
	if !ok {
		return c.Conn.Write(p)
	}
	n, err := c.Conn.Write(stamped)
	if err != nil {
		return min(n, len(p)), err
	}
	return len(p), nil
}

// stampVersion inserts the version header after the status line of a
// response head that lacks it.
func stampVersion(p []byte) ([]byte, bool) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.")) {
		return nil, false
	}
	line := bytes.Index(p, []byte("\r\n"))
	end := bytes.Index(p, []byte("\r\n\r\n"))
	if line < 0 || end < 0 {
		return nil, false
	}
	head := bytes.ToLower(p[line : end+2])
	if bytes.Contains(head, []byte("\r\n"+protocol.VersionHeader+":")) {
		return nil, false
	}
	out := make([]byte, 0, len(p)+len(protocol.VersionHeader)+len(Version)+4)
	out = append(out, p[:line+2]...)
	out = append(out, protocol.VersionHeader+": "...)
	out = append(out, Version...)
	out = append(out, "\r\n"...)
	return append(out, p[line+2:]...), true
}

func (c *tlsProbeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.checked.CompareAndSwap(false, true) && p[0] == tlsHandshakeRecord {
		c.log.Debug("TLS handshake on the plain HTTP port; answered 400", "remote", c.RemoteAddr().String())
		c.answerTLSProbe()
		return 0, io.EOF
	}
	return n, err
}

// ReadFrom hands the copy to the wrapped connection's ReadFrom, so a
// download served through http.response.ReadFrom still reaches sendfile on
// the *net.TCPConn underneath; without it the wrapper hides that method and
// net/http copies the file through a 32 KiB buffer instead. Writes never touch
// the probe check, which is about the first bytes read.
func (c *tlsProbeConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// writerOnly hides every method but Write, so io.Copy cannot recurse into
// ReadFrom.
type writerOnly struct{ io.Writer }

func (c *tlsProbeConn) answerTLSProbe() {
	const body = "this port speaks plain HTTP, not TLS\n"
	resp := "HTTP/1.1 400 Bad Request\r\n" +
		protocol.VersionHeader + ": " + Version + "\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Connection: close\r\n\r\n" + body
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.Conn, resp); err != nil {
		return
	}
	// Half-close and swallow what the prober still sends, so closing does not
	// turn into a reset that destroys the 400 before the peer reads it.
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, c.Conn, 64<<10)
}

// The fs routes are served by FS. The gate has already authorized the
// request, refused a declared length over max_body_bytes, and wrapped r.Body
// in http.MaxBytesReader(max_body_bytes); that is the only place the cap is
// applied, so an undeclared over-cap upload surfaces to FS as
// *http.MaxBytesError while reading.

// FsReadFile delegates to FS.
// A read ends with shutdown too, so an endless device being read does not
// hold the graceful shutdown for its whole grace.
func (s *Server) FsReadFile(w http.ResponseWriter, r *http.Request, p protocol.FsReadFileParams) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	s.fs.ReadFile(w, r.WithContext(ctx), p)
}

// FsWriteFile delegates to FS.
func (s *Server) FsWriteFile(w http.ResponseWriter, r *http.Request, p protocol.FsWriteFileParams) {
	s.fs.WriteFile(w, r, p)
}

// FsReadTar delegates to FS.
func (s *Server) FsReadTar(w http.ResponseWriter, r *http.Request, p protocol.FsReadTarParams) {
	s.fs.ReadTar(w, r, p)
}

// FsWriteTar delegates to FS.
func (s *Server) FsWriteTar(w http.ResponseWriter, r *http.Request, p protocol.FsWriteTarParams) {
	s.fs.WriteTar(w, r, p)
}
