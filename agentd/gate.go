package agentd

// The gate every request passes before its handler: the routes registered
// from the generated operations table, the bearer check (503 before
// bootstrap, 401 for a wrong token, 413 for a declared body over the cap),
// the bounded unauthenticated bodies of the open routes, and the refusals
// those answer with.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

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
