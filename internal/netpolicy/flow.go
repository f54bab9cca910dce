package netpolicy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// flow is one guest TCP connection the policy let through.
type flow struct {
	name   string     // the name its synthetic address stands for, or ""
	addr   netip.Addr // the real address, for a CIDR flow
	port   uint16
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	conns []io.Closer
}

func (f *flow) label() string {
	if f.name != "" {
		return f.name
	}
	return f.addr.String()
}

func (f *flow) allowedBy(p *compiled) bool {
	if f.name != "" {
		return p.allowName(f.name, f.port)
	}
	return p.allowAddr(f.addr, f.port)
}

// hold registers a connection the flow closes when it ends.
func (f *flow) hold(c io.Closer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx.Err() != nil {
		c.Close()
		return
	}
	f.conns = append(f.conns, c)
}

func (f *flow) close() {
	f.cancel()
	f.mu.Lock()
	cs := f.conns
	f.conns = nil
	f.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (n *Net) track(f *flow) {
	n.mu.Lock()
	n.flows[f] = struct{}{}
	n.mu.Unlock()
}

func (n *Net) untrack(f *flow) {
	n.mu.Lock()
	delete(n.flows, f)
	n.mu.Unlock()
	f.close()
}

// decide answers the flow a guest's SYN to dst:port would open, or the
// reason it is refused.
func (n *Net) decide(dst netip.Addr, port uint16) (f *flow, why, label string) {
	pol := n.policy.Load()
	if SyntheticNet.Contains(dst) {
		name, ok := n.synth.nameOf(dst)
		if !ok {
			return nil, whyAddr, dst.String()
		}
		if !pol.allowName(name, port) {
			if pol.nameAllowed(name) {
				return nil, whyPort, name
			}
			return nil, whyHost, name
		}
		return &flow{name: name, port: port}, "", name
	}
	if !pol.allowAddr(dst, port) {
		return nil, whyAddr, dst.String()
	}
	return &flow{addr: dst, port: port}, "", dst.String()
}

// serveFlow carries an accepted guest connection until either side ends
// it or the flow is closed.
func (n *Net) serveFlow(f *flow, guest net.Conn) {
	defer n.untrack(f)
	f.hold(guest)
	if f.name == "" {
		n.splice(f, guest, net.JoinHostPort(f.addr.String(), strconv.Itoa(int(f.port))), nil)
		return
	}
	// A name flow is classified by the guest's first bytes: a TLS
	// ClientHello is terminated, an HTTP request is checked, anything else
	// is carried as it is. A guest silent for serverFirstWait may be
	// waiting for a server that speaks first (SSH, SMTP): the upstream is
	// dialled then, and if it speaks before the guest does, the flow is
	// carried as it is. A TLS or HTTP server never speaks first, so
	// waiting does not buy a guest an unterminated TLS flow to one.
	upstream := net.JoinHostPort(f.name, strconv.Itoa(int(f.port)))
	first := make(chan chunk, 1)
	go func() {
		b := make([]byte, 4096)
		k, err := guest.Read(b)
		first <- chunk{b[:k], err}
	}()
	lf := &lateFirst{ch: first, conn: guest}
	timer := time.NewTimer(serverFirstWait)
	defer timer.Stop()
	var early net.Conn
	upSpoke := make(chan error, 1)
	var earlyBR *bufio.Reader
	for {
		select {
		case c := <-first:
			lf.ch = nil
			lf.pending, lf.err, lf.got = c.b, c.err, true
			if early != nil {
				early.Close() // nothing was exchanged on it
			}
			if len(c.b) == 0 {
				return
			}
			br := bufio.NewReader(lf)
			pc := &peekedConn{Conn: guest, r: br}
			switch {
			case c.b[0] == 0x16:
				n.serveTLS(f, pc)
			case looksHTTP(br):
				n.serveHTTP(f, pc, false)
			default:
				n.splice(f, pc, upstream, nil)
			}
			return
		case <-timer.C:
			c, err := n.dial(f.ctx, "tcp", upstream)
			if err != nil {
				return
			}
			f.hold(c)
			early, earlyBR = c, bufio.NewReader(c)
			go func() { _, err := earlyBR.Peek(1); upSpoke <- err }()
		case err := <-upSpoke:
			if err != nil {
				return
			}
			n.splice(f, &peekedConn{Conn: guest, r: lf}, "", &peekedConn{Conn: early, r: earlyBR})
			return
		case <-f.ctx.Done():
			return
		}
	}
}

// maxHeaderBytes bounds a guest request's line and headers (net/http's
// server default).
const maxHeaderBytes = http.DefaultMaxHeaderBytes

// serverFirstWait is how long a name flow waits for the guest's first
// bytes before it looks for a server that speaks first.
const serverFirstWait = 2 * time.Second

type chunk struct {
	b   []byte
	err error
}

// lateFirst reads the guest's first chunk (read by another goroutine,
// arriving on ch) and then the connection itself.
type lateFirst struct {
	ch      chan chunk
	got     bool
	pending []byte
	err     error
	conn    net.Conn
}

func (l *lateFirst) Read(p []byte) (int, error) {
	if !l.got {
		c := <-l.ch
		l.got, l.pending, l.err = true, c.b, c.err
	}
	if len(l.pending) > 0 {
		k := copy(p, l.pending)
		l.pending = l.pending[k:]
		return k, nil
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.conn.Read(p)
}

// looksHTTP reports whether the buffered bytes start with an HTTP/1 method
// and a space.
func looksHTTP(br *bufio.Reader) bool {
	b, _ := br.Peek(8)
	i := strings.IndexByte(string(b), ' ')
	if i < 3 {
		return false
	}
	for _, c := range b[:i] {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// peekedConn is a connection whose first bytes were already read into r.
type peekedConn struct {
	net.Conn
	r io.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *peekedConn) CloseWrite() error {
	closeWrite(c.Conn)
	return nil
}

// splice copies both ways between the guest and upstream: up when the
// flow already holds one, else a new connection to addr.
func (n *Net) splice(f *flow, guest net.Conn, addr string, up net.Conn) {
	if up == nil {
		var err error
		if up, err = n.dial(f.ctx, "tcp", addr); err != nil {
			return
		}
		f.hold(up)
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, guest); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(guest, up); closeWrite(guest); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// serveTLS terminates the guest's TLS with a leaf for the flow's name; an
// SNI naming any other host is refused as fronting.
func (n *Net) serveTLS(f *flow, guest net.Conn) {
	var fronted string
	conf := &tls.Config{
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			sni := strings.ToLower(strings.TrimSuffix(h.ServerName, "."))
			if sni != "" && sni != f.name {
				fronted = sni
				return nil, errors.New("the SNI is not the name this connection was resolved for")
			}
			return n.ca.leaf(f.name)
		},
	}
	tc := tls.Server(guest, conf)
	f.hold(tc)
	if err := tc.HandshakeContext(f.ctx); err != nil {
		if fronted != "" {
			n.denied.add(fronted, f.port, "tcp", whyFronting)
		}
		return
	}
	n.serveHTTP(f, tc, true)
}

// serveHTTP reads the guest's HTTP/1 requests one by one, refuses any whose
// Host is not the flow's name, puts bound secrets in place of their
// placeholders, and sends each upstream.
func (n *Net) serveHTTP(f *flow, guest net.Conn, overTLS bool) {
	scheme := "http"
	if overTLS {
		scheme = "https"
	}
	upstream := net.JoinHostPort(f.name, strconv.Itoa(int(f.port)))
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			c, err := n.dial(ctx, network, upstream)
			if err == nil {
				f.hold(c)
			}
			return c, err
		},
		TLSClientConfig:   &tls.Config{RootCAs: n.cfg.RootCAs, ServerName: f.name, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}
	defer tr.CloseIdleConnections()
	// An upgrade (a WebSocket) goes over HTTP/1.1, where a 101 answer hands
	// back the connection.
	tr1 := tr.Clone()
	tr1.ForceAttemptHTTP2 = false
	tr1.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	tr1.TLSClientConfig.NextProtos = []string{"http/1.1"}
	defer tr1.CloseIdleConnections()
	var bound []binding
	if overTLS {
		// A secret never goes out in clear text.
		for _, b := range n.bindings {
			for _, h := range b.Hosts {
				if hostMatches(h, f.name) {
					bound = append(bound, b)
					break
				}
			}
		}
	}
	// A request's line and headers are read under maxHeaderBytes, as
	// net/http's server does; its body is streamed upstream.
	lr := &io.LimitedReader{R: guest}
	br := bufio.NewReader(lr)
	for f.ctx.Err() == nil {
		lr.N = maxHeaderBytes
		req, err := http.ReadRequest(br)
		if err != nil {
			if lr.N <= 0 {
				refuse(guest, http.StatusRequestHeaderFieldsTooLarge, "the request's headers are over the proxy's bound")
			}
			return
		}
		lr.N = math.MaxInt64
		host := strings.ToLower(req.Host)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if req.Method == http.MethodConnect {
			n.denied.add(req.Host, f.port, "tcp", whyPort)
			refuse(guest, http.StatusMethodNotAllowed, "CONNECT is refused: a connection's destination is its address, checked against the network policy")
			return
		}
		if strings.TrimSuffix(host, ".") != f.name {
			n.denied.add(host, f.port, "tcp", whyFronting)
			refuse(guest, http.StatusMisdirectedRequest, fmt.Sprintf("Host %q is not %q, the name this connection was resolved for", req.Host, f.name))
			return
		}
		for _, b := range bound {
			substitute(req.Header, b)
		}
		if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
			// Answered here so the guest sends its body at once; the
			// upstream request then carries it whole.
			req.Header.Del("Expect")
			if _, err := io.WriteString(guest, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return
			}
		}
		req.URL.Scheme, req.URL.Host, req.RequestURI = scheme, upstream, ""
		rt := tr
		upgrade := req.Header.Get("Upgrade") != ""
		if upgrade {
			rt = tr1
		}
		resp, err := rt.RoundTrip(req.WithContext(f.ctx))
		if err != nil {
			refuse(guest, http.StatusBadGateway, "the upstream request failed")
			return
		}
		// A bound host that echoes a credential back in a header does
		// not hand the guest the value: it reads the placeholder there.
		for _, b := range bound {
			unsubstitute(resp.Header, b)
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			n.carryUpgrade(f, guest, br, resp)
			return
		}
		werr := resp.Write(guest)
		resp.Body.Close()
		if werr != nil || req.Close || resp.Close {
			return
		}
	}
}

// substitute replaces b's placeholder by its value in every header value,
// including inside a Basic credential's base64.
func substitute(h http.Header, b binding) {
	for k, vs := range h {
		for i, v := range vs {
			if strings.Contains(v, b.placeholder) {
				vs[i] = strings.ReplaceAll(v, b.placeholder, b.value)
				continue
			}
			if enc, ok := strings.CutPrefix(v, "Basic "); ok {
				if raw, err := base64.StdEncoding.DecodeString(enc); err == nil && strings.Contains(string(raw), b.placeholder) {
					vs[i] = "Basic " + base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(string(raw), b.placeholder, b.value)))
				}
			}
		}
		h[k] = vs
	}
}

// unsubstitute puts b's placeholder back where an answer's header carries
// its value.
func unsubstitute(h http.Header, b binding) {
	for _, vs := range h {
		for i, v := range vs {
			vs[i] = strings.ReplaceAll(v, b.value, b.placeholder)
		}
	}
}

func refuse(w io.Writer, status int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// carryUpgrade answers the guest with a 101 and carries both directions
// as they are: after an upgrade the flow is no longer HTTP.
func (n *Net) carryUpgrade(f *flow, guest net.Conn, br *bufio.Reader, resp *http.Response) {
	up, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return
	}
	f.hold(up)
	resp.Body = nil
	if err := resp.Write(guest); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); done <- struct{}{} }()
	go func() { _, _ = io.Copy(guest, up); done <- struct{}{} }()
	<-done
}
