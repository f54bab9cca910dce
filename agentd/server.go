package agentd

import (
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
	// schema is /v1/schema's body, built at the first request: with any
	// limit changed it is the embedded document re-encoded, about 650 KB of
	// allocation that an idle daemon would otherwise keep resident.
	schema func() ([]byte, error)
	// capabilities is /v1/capabilities's body, built at the first request.
	capabilities func() ([]byte, error)
	metrics      metricsSampler // GET /v1/metrics (metrics_linux.go)

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
	s := &Server{
		cfg:            cfg,
		log:            log,
		fs:             NewFS(cfg.LimitSet, log),
		terminate:      make(chan struct{}),
		stopping:       make(chan struct{}),
		bootRepairDone: make(chan struct{}),
		openSlots:      make(chan struct{}, cfg.MaxOpenBodies),
		conns:          &connTable{bound: connBound(cfg.MaxConnections)},
		watchSlots:     make(chan struct{}, max(cfg.MaxWatches, 0)),
	}
	s.schema = sync.OnceValues(func() ([]byte, error) { return schemaDocument(&s.cfg) })
	s.capabilities = sync.OnceValues(func() ([]byte, error) { return capabilitiesDocument(&s.cfg) })
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
