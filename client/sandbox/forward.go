package sandbox

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// URLMinter mints a fresh PortURL for one guest port: MintURL bound to a
// control plane, a MicroVM id and a port (Sandbox.URL, bound likewise).
type URLMinter func(ctx context.Context) (PortURL, error)

// ForwardOptions shape a Forwarder.
type ForwardOptions struct {
	// RenewBefore is how long before a token's ExpiresAt the next request
	// mints a fresh one; zero is half the token's lifetime, so a request in
	// flight across the renewal still holds a token with that half left
	// (as client.DefaultRefreshAfter reasons for the session's token).
	RenewBefore time.Duration
	// Now is the clock renewal reads (default time.Now).
	Now func() time.Time
	// OnMint, if set, is told of every token minted (never its headers'
	// values: PortURL.String redacts them), for progress lines.
	OnMint func(PortURL)
	// ErrorLog receives the proxy's own failures; nil is the log package's
	// standard logger.
	ErrorLog *log.Logger
	// AnyHost serves requests whatever host their Host header names. By
	// default only a loopback name is served (localhost, *.localhost, an
	// address in 127.0.0.0/8, ::1): a web page whose own DNS name was
	// rebound to 127.0.0.1 sends its name as Host, and would otherwise read
	// the guest port with this machine's token. A forward listening beyond
	// loopback on purpose sets it.
	AnyHost bool
	// Transport reaches the endpoint (default: a clone of
	// http.DefaultTransport that ignores proxy variables for a loopback
	// endpoint).
	Transport http.RoundTripper
}

// Forwarder is an http.Handler that sends every request it serves, plain
// HTTP and WebSocket upgrades alike, to one guest port through the
// MicroVM's endpoint, adding the proxy headers of a token minted for that
// port alone and minting the next before the current one expires. Whatever
// proxy headers the caller sent are replaced, so a local client can never
// steer the request to another port. Serve it on a listener the caller
// chose: Forward serves it on one until its context ends.
type Forwarder struct {
	mint URLMinter
	o    ForwardOptions
	rp   *httputil.ReverseProxy

	mu    sync.Mutex
	cur   PortURL
	valid bool
	mints int
}

// NewForwarder forwards to the port mint mints for.
func NewForwarder(mint URLMinter, o ForwardOptions) *Forwarder {
	if o.Now == nil {
		o.Now = time.Now
	}
	f := &Forwarder{mint: mint, o: o}
	tr := o.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil // the endpoint is reached directly; a proxy variable would see both credentials
		tr = t
	}
	f.rp = &httputil.ReverseProxy{
		Rewrite:   f.rewrite,
		Transport: tr,
		// Server-sent events and downloads reach the browser as written.
		FlushInterval:  -1,
		ErrorLog:       o.ErrorLog,
		ModifyResponse: f.checkRefusal,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.logf("forwarding %s %s: %v", r.Method, r.URL.Path, err)
			status := http.StatusBadGateway
			if client.KindOf(err) == taxonomy.KindInvalidArg {
				status = http.StatusServiceUnavailable
			}
			http.Error(w, "microvm forward: "+err.Error(), status)
		},
	}
	return f
}

func (f *Forwarder) logf(format string, args ...any) {
	if f.o.ErrorLog != nil {
		f.o.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

// Mints is how many tokens the forwarder has minted.
func (f *Forwarder) Mints() int { f.mu.Lock(); defer f.mu.Unlock(); return f.mints }

// Current is the PortURL requests are sent with now, minting the first or
// the next one when the current one is within RenewBefore of its expiry. A
// failed renewal keeps the current token until its expiry.
func (f *Forwarder) Current(ctx context.Context) (PortURL, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.o.Now()
	if f.valid {
		renew := f.o.RenewBefore
		if renew <= 0 {
			renew = f.cur.Lifetime / 2
		}
		if now.Before(f.cur.ExpiresAt.Add(-renew)) {
			return f.cur, nil
		}
	}
	u, err := f.mint(ctx)
	if err != nil {
		// A renewal that failed (a throttled control plane, say) must not
		// fail a request the current token still covers: it is tried again
		// on the next request (finding endpoint-auth: minting is retryable).
		if f.valid && now.Before(f.cur.ExpiresAt) {
			f.logf("renewing the proxy token failed, the current one has %s left: %v", f.cur.ExpiresAt.Sub(now).Round(time.Second), err)
			return f.cur, nil
		}
		return PortURL{}, err
	}
	f.cur, f.valid = u, true
	f.mints++
	if f.o.OnMint != nil {
		f.o.OnMint(u)
	}
	return u, nil
}

// invalidate drops the current token, so the next request mints.
func (f *Forwarder) invalidate() { f.mu.Lock(); f.valid = false; f.mu.Unlock() }

type portURLKey struct{}

// ServeHTTP forwards r to the guest port.
func (f *Forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !f.o.AnyHost && !loopbackName(r.Host) {
		http.Error(w, "microvm forward: Host "+strconv.Quote(r.Host)+" is not a loopback name; a page whose DNS name points at this machine is not served", http.StatusForbidden)
		return
	}
	u, err := f.Current(r.Context())
	if err != nil {
		f.logf("minting a proxy token: %v", err)
		http.Error(w, "microvm forward: minting a proxy token: "+err.Error(), http.StatusBadGateway)
		return
	}
	// Full duplex: the guest may answer before the transport's last read of
	// the request body, and net/http's server would otherwise drain and
	// close that body under it, cutting the answer (issue 51).
	_ = http.NewResponseController(w).EnableFullDuplex()
	f.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), portURLKey{}, u)))
}

func (f *Forwarder) rewrite(pr *httputil.ProxyRequest) {
	u := pr.In.Context().Value(portURLKey{}).(PortURL)
	target, _ := url.Parse(u.URL)
	pr.SetURL(target)
	// The caller's own proxy headers, if any, never reach the endpoint:
	// the port is this forwarder's.
	pr.Out.Header.Del(taxonomy.ProxyAuthHeader)
	pr.Out.Header.Del(taxonomy.ProxyPortHeader)
	for k, v := range u.Headers {
		pr.Out.Header[k] = v
	}
}

// checkRefusal drops the token when the endpoint refused it (a 403: expired
// by the platform's clock, or revoked), so the next request mints afresh
// rather than failing until the renewal time (finding endpoint-auth). The
// refusal itself reaches the caller as the endpoint answered it.
func (f *Forwarder) checkRefusal(resp *http.Response) error {
	if resp.StatusCode == http.StatusForbidden {
		f.invalidate()
		f.logf("the endpoint refused the proxy token for %s %s (403); the next request mints a new one", resp.Request.Method, resp.Request.URL.Path)
	}
	return nil
}

// Forward serves f on ln until ctx ends, then stops accepting, closes
// ln and every connection (WebSockets included), and returns nil. A failure
// to serve is the error. Nothing but ln listens: which address it is bound
// to is the caller's choice.
func Forward(ctx context.Context, ln net.Listener, f *Forwarder) error {
	// Every request's context ends with ctx, which is what ends an upgraded
	// connection: the reverse proxy closes both sides of a WebSocket when
	// its request's context is done, and the server's Close does not reach
	// a hijacked connection.
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 30 * time.Second, ErrorLog: f.o.ErrorLog,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// Close, not Shutdown: a hijacked WebSocket would hold Shutdown open,
	// and Ctrl-C means stop now.
	err := srv.Close()
	if serr := <-done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// loopbackName reports whether a Host header names this machine by a
// loopback name: localhost, a name under .localhost (RFC 6761), or a
// loopback address.
func loopbackName(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
