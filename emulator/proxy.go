package emulator

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"path"
	"strconv"
	"strings"
	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/wideconn"
)

// grant is what one CreateMicrovmAuthToken answer lets its bearer reach.
type grant struct {
	ports   []cp.PortSpecification
	expires time.Time
	shell   bool // a CreateMicrovmShellAuthToken grant: the shell, no port (shell.go)
}

// covers applies the allowedPorts union: any member admitting port admits
// it (finding allowed-ports-union).
func (g grant) covers(port int) bool {
	for _, p := range g.ports {
		switch {
		case p.AllPorts != nil:
			return true
		case p.Port != nil && *p.Port == port:
			return true
		case p.Range != nil && p.Range.StartPort <= port && port <= p.Range.EndPort:
			return true
		}
	}
	return false
}

// isHookPath reports whether p, cleaned, is the hook prefix or under it.
func isHookPath(p string) bool {
	if p == "" {
		return false
	}
	clean := strings.ToLower(path.Clean("/" + p))
	prefix := strings.ToLower(taxonomy.HookPrefix)
	return clean == prefix || strings.HasPrefix(clean, prefix+"/")
}

// discardLog swallows the reverse proxy's own log lines.
var discardLog = log.New(io.Discard, "", 0)

// proxyTransport reaches guests on loopback. It never consults a proxy
// environment variable: the guest is on this machine.
// Its connections write an upload through wideconn's buffer. net/http's
// own copy buffer is 32 KiB, and with FlushInterval -1 every read is a
// write and a flush: a 256 MiB download went to the caller as 8,192
// chunks, and an upload reached agentd in 32 KiB writes or chunks.
var proxyTransport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second, DisableCompression: true,
	DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wideconn.Conn(c), nil
	}}

// endpointHandler is vm's endpoint: the platform's proxy in front of the
// guest. It checks, in this order, the token (minted for this MicroVM and
// unexpired by the emulator's clock), the port (inside the token's scope),
// then whether the guest takes traffic, and forwards with both proxy headers
// (and the platform's WebSocket subprotocols) removed, so the guest never
// sees the caller's proxy credential. The credentials come from the two
// headers, or, for a WebSocket upgrade without them, from the subprotocols a
// browser offers instead (finding websocket-subprotocols).
func (s *Server) endpointHandler(vm *microvm) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, portValue := r.Header.Get(taxonomy.ProxyAuthHeader), r.Header.Get(taxonomy.ProxyPortHeader)
		ws := offeredSubprotocols(r.Header)
		if tok == "" && isWebSocketUpgrade(r) && ws.token != "" {
			// A browser's WebSocket cannot set headers, so it offers the
			// credentials as subprotocols (finding websocket-subprotocols).
			tok, portValue = ws.token, ws.port
		}
		s.mu.Lock()
		g, minted := vm.grants[tok]
		now := s.opt.Now()
		s.mu.Unlock()

		// Every refusal of the credential is a 403, as the platform's proxy
		// answers (finding endpoint-auth); the messages are the emulator's
		// own except the measured "Access to port denied".
		switch {
		case tok == "" || !minted:
			http.Error(w, "Missing or invalid "+taxonomy.ProxyAuthHeader, http.StatusForbidden)
			return
		case !now.Before(g.expires):
			http.Error(w, "Token expired", http.StatusForbidden)
			return
		}
		if g.shell {
			s.serveShell(w, r, vm)
			return
		}
		// The hook prefix is the platform's, reached over loopback from
		// inside (finding hooks-over-loopback), never from outside: one
		// proxied POST .../terminate killed the guest. Compared cleaned and
		// in any case, and on the request line as sent too, so ./, //, and
		// percent-encoded spellings do not slip past.
		requestPath, _, _ := strings.Cut(r.RequestURI, "?")
		if isHookPath(r.URL.Path) || isHookPath(r.URL.RawPath) || isHookPath(requestPath) {
			http.Error(w, "the lifecycle hook prefix "+taxonomy.HookPrefix+" is the platform's and is not forwarded", http.StatusForbidden)
			return
		}
		port, err := strconv.Atoi(portValue)
		if err != nil || !g.covers(port) {
			http.Error(w, "Access to port denied", http.StatusForbidden)
			return
		}
		// An authorized request is inbound traffic: it holds off the idle
		// policy, or auto-resumes a VM it suspended (finding idle-policy).
		state, guest, freezeErr := s.arrive(vm)
		// Authorized but nothing to reach: 502, the measured answer for a
		// scoped port with no listener. What the platform answers for a
		// suspended or terminated VM is unmeasured; 502 keeps "not
		// authorized" and "not there" apart the same way.
		if guest == nil || freezeErr != nil || (state != cp.MicrovmStateRUNNING && state != cp.MicrovmStatePENDING) {
			http.Error(w, "MicroVM "+vm.id+" is not taking traffic (state "+string(state)+")", http.StatusBadGateway)
			return
		}
		addr, ok := guest.Ports[port]
		if guest.Dial != nil {
			// Dialed from inside the guest: any port it listens on.
			addr, ok = "127.0.0.1:"+strconv.Itoa(port), true
		}
		if !ok {
			http.Error(w, "Nothing is listening on port "+strconv.Itoa(port), http.StatusBadGateway)
			return
		}
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host = "http", addr
				pr.Out.Host = ""
				if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
					pr.Out.Body = wideconn.Body(pr.Out.Body)
				}
				pr.Out.Header.Del(taxonomy.ProxyAuthHeader)
				pr.Out.Header.Del(taxonomy.ProxyPortHeader)
				// The proxy's own subprotocols never reach the guest; an
				// application's arrives alone.
				if ws.platform {
					pr.Out.Header.Del("Sec-WebSocket-Protocol")
					if len(ws.rest) > 0 {
						pr.Out.Header.Set("Sec-WebSocket-Protocol", strings.Join(ws.rest, ", "))
					}
				}
			},
			ModifyResponse: func(resp *http.Response) error {
				// A guest that names no subprotocol: the caller still sees
				// the one it offered, as the platform answers.
				if ws.marker && resp.StatusCode == http.StatusSwitchingProtocols && resp.Header.Get("Sec-WebSocket-Protocol") == "" {
					resp.Header.Set("Sec-WebSocket-Protocol", taxonomy.WebSocketSubprotocol)
				}
				return nil
			},
			Transport: guest.RoundTripper(proxyTransport),
			// SSE and tar downloads must reach the caller as they are
			// written, not when a buffer fills.
			FlushInterval: -1,
			BufferPool:    wideconn.Buffers,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				http.Error(w, "Bad gateway: "+err.Error(), http.StatusBadGateway)
			},
			// The caller sees a failed copy as a cut answer; the emulator
			// runs inside a user's program (the Python and TypeScript
			// packages, microvm run --local), whose stderr is not ours.
			ErrorLog: discardLog,
		}
		// Full duplex: the guest may answer before the transport has taken
		// its last read of the request body (agentd's run route answers
		// once it has decoded the request). Without it net/http's server,
		// writing the response headers, drains and closes that body under
		// the transport, which then closes the guest connection and cuts
		// the answer mid-body (issue 51).
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
}

// subprotocols is what a request offered in Sec-WebSocket-Protocol, split
// into the platform's own values and the rest.
type subprotocols struct {
	marker      bool   // lambda-microvms itself was offered
	token, port string // the values after the auth and port prefixes
	platform    bool   // any of the platform's three was offered
	rest        []string
}

// offeredSubprotocols reads every Sec-WebSocket-Protocol line, each a
// comma-separated list (RFC 6455 section 4.1).
func offeredSubprotocols(h http.Header) subprotocols {
	var sp subprotocols
	for _, line := range h.Values("Sec-WebSocket-Protocol") {
		for _, v := range strings.Split(line, ",") {
			v = strings.TrimSpace(v)
			switch {
			case v == "":
			case v == taxonomy.WebSocketSubprotocol:
				sp.marker, sp.platform = true, true
			case strings.HasPrefix(v, taxonomy.WebSocketAuthPrefix):
				sp.token, sp.platform = strings.TrimPrefix(v, taxonomy.WebSocketAuthPrefix), true
			case strings.HasPrefix(v, taxonomy.WebSocketPortPrefix):
				sp.port, sp.platform = strings.TrimPrefix(v, taxonomy.WebSocketPortPrefix), true
			default:
				sp.rest = append(sp.rest, v)
			}
		}
	}
	return sp
}

// isWebSocketUpgrade reports whether r asks to become a WebSocket.
func isWebSocketUpgrade(r *http.Request) bool {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return false
	}
	for _, v := range r.Header.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return true
			}
		}
	}
	return false
}
