//go:build linux

package netpolicy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/cliapi"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

const realSecret = "real-secret-value-48-never-in-the-guest"

type world struct {
	plain  *recorder // plain.example.test, HTTP on port 80
	g      *guestNS
	n      *Net
	out    *standIns
	client *http.Client
	roots  *x509.CertPool // the guest's trust store: the sandbox CA
}

// newWorld serves a guest namespace under a policy allowing
// api.example.test and other.example.test on 443, with MODEL_KEY bound to
// api.example.test. denied.example.test exists upstream but is not allowed.
func newWorld(t *testing.T) *world {
	g := newGuestNS(t)
	plain := &recorder{}
	plainSrv := httptest.NewServer(plain)
	t.Cleanup(plainSrv.Close)
	out := newStandIns(t, map[string]string{"ssh.example.test": serverFirst(t), "plain.example.test": plainSrv.Listener.Addr().String()},
		"api.example.test", "other.example.test", "denied.example.test")
	n, err := New(Config{
		Policy: cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{hostRule("api.example.test", 443),
			hostRule("other.example.test", 443), hostRule("ssh.example.test", 22), hostRule("plain.example.test", 80)}},
		Secrets:  []Secret{NewSecret("MODEL_KEY", realSecret, "api.example.test", "plain.example.test")},
		Resolver: out.resolver,
		Dial:     out.dial,
		RootCAs:  out.roots,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- n.Serve(ctx, g.tun) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	w := &world{g: g, n: n, out: out, roots: x509.NewCertPool(), plain: plain}
	if !w.roots.AppendCertsFromPEM(n.CACertPEM()) {
		t.Fatal("the sandbox CA's PEM does not parse")
	}
	w.client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: w.roots},
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			host, port, _ := net.SplitHostPort(addr)
			a, err := w.resolve(t, host)
			if err != nil {
				return nil, err
			}
			return g.dial(network, net.JoinHostPort(a.String(), port))
		},
	}}
	return w
}

// resolve is the guest's A lookup through the gateway.
func (w *world) resolve(t *testing.T, name string) (netip.Addr, error) {
	rc, ans := guestLookup(t, w.g, name, dnsmessage.TypeA)
	if rc != dnsmessage.RCodeSuccess || len(ans) != 1 {
		return netip.Addr{}, fmt.Errorf("%s: rcode %v, %d answers", name, rc, len(ans))
	}
	return netip.AddrFrom4(ans[0].Body.(*dnsmessage.AResource).A), nil
}

// waitDenied polls the denied list (bounded) for an entry.
func (w *world) waitDenied(t *testing.T, proto, why, host string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		_, last := w.n.denied.snapshot()
		for _, d := range last {
			if d.Proto == proto && d.Why == why && (host == "" || d.Host == host) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := w.n.State()
	t.Fatalf("no %s refusal %q for %q in %+v", proto, why, host, st.Denied)
}

func (w *world) get(t *testing.T, url string, hdr http.Header) (string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			if strings.Contains(v, realSecret) {
				t.Errorf("the guest was answered the secret's value in %s", k)
			}
		}
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return string(b), fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), nil
}

// TestGuestNetworkUnderPolicy is the hostile list, from a real
// kernel in a network namespace whose only link is the tun Serve holds.
// Each subtest names the wrong edit it catches.
func TestGuestNetworkUnderPolicy(t *testing.T) {
	w := newWorld(t)
	placeholder := w.n.GuestEnv()["MODEL_KEY"]
	if placeholder == "" || strings.Contains(placeholder, realSecret) {
		t.Fatalf("the guest's env value %q is not an opaque placeholder", placeholder)
	}

	// Catches: the allowed path broken, or the secret not substituted.
	t.Run("allowed host reachable, secret substituted on the bound host only", func(t *testing.T) {
		body, err := w.get(t, "https://api.example.test/v1", http.Header{"Authorization": {"Bearer " + placeholder}})
		if err != nil || !strings.Contains(body, "hello from api.example.test") {
			t.Fatalf("allowed bound host: %q, %v", body, err)
		}
		if got := w.out.auths("api.example.test"); len(got) != 1 || got[0] != "Bearer "+realSecret {
			t.Fatalf("the bound host received %q, want the real value", got)
		}
		body, err = w.get(t, "https://other.example.test/", http.Header{"Authorization": {"Bearer " + placeholder}})
		if err != nil || !strings.Contains(body, "hello from other.example.test") {
			t.Fatalf("allowed unbound host: %q, %v", body, err)
		}
		if got := w.out.auths("other.example.test"); len(got) != 1 || got[0] != "Bearer "+placeholder {
			t.Fatalf("the unbound host received %q, want the placeholder unchanged", got)
		}
	})

	// Catches: a name flow that waits for the guest's bytes for ever (a
	// server that speaks first, as SSH does, would never be reached).
	t.Run("server that speaks first, carried as it is", func(t *testing.T) {
		a, err := w.resolve(t, "ssh.example.test")
		if err != nil {
			t.Fatal(err)
		}
		c, err := w.g.dial("tcp", a.String()+":22")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		if line, err := br.ReadString('\n'); err != nil || line != "SSH-2.0-standin\r\n" {
			t.Fatalf("greeting: %q, %v", line, err)
		}
		fmt.Fprintf(c, "ping\n")
		if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("echo: %q, %v", line, err)
		}
	})

	// Catches: an upgrade answered and then dropped, or its request sent
	// without the secret.
	t.Run("upgrade to a WebSocket-style stream on the bound host", func(t *testing.T) {
		before := len(w.out.auths("api.example.test"))
		a, err := w.resolve(t, "api.example.test")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := w.g.dial("tcp", a.String()+":443")
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(raw, &tls.Config{ServerName: "api.example.test", RootCAs: w.roots})
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\nAuthorization: Bearer %s\r\n\r\n", placeholder)
		br := bufio.NewReader(tc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v, %v", resp, err)
		}
		fmt.Fprintf(tc, "ping\n")
		if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("echo after the upgrade: %q, %v", line, err)
		}
		got := w.out.auths("api.example.test")
		if len(got) != before+1 || got[before] != "Bearer "+realSecret {
			t.Fatalf("the upgrade request carried %q", got[before:])
		}
	})

	// Catches: substituting a secret into a request that goes out in clear
	// text, or a plain-HTTP flow that skips the Host check.
	t.Run("a bound secret never goes out in clear text", func(t *testing.T) {
		body, err := w.get(t, "http://plain.example.test/", http.Header{"Authorization": {"Bearer " + placeholder}})
		if err != nil || body != "plain" {
			t.Fatalf("plain HTTP to an allowed host: %q, %v", body, err)
		}
		if got := w.plain.auths(); len(got) != 1 || got[0] != "Bearer "+placeholder {
			t.Fatalf("the plain-HTTP server received %q, want the placeholder unchanged", got)
		}
		req, _ := http.NewRequest("GET", "http://plain.example.test/", nil)
		req.Host = "denied.example.test"
		resp, err := w.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest || len(w.plain.auths()) != 1 {
			t.Fatalf("a plain-HTTP request with a foreign Host got %d", resp.StatusCode)
		}
	})

	// Catches: reading a guest's request headers without a bound.
	t.Run("request headers over the bound", func(t *testing.T) {
		a, err := w.resolve(t, "api.example.test")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := w.g.dial("tcp", a.String()+":443")
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(raw, &tls.Config{ServerName: "api.example.test", RootCAs: w.roots})
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(20 * time.Second))
		go fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: api.example.test\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 2*maxHeaderBytes))
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("an over-long header got %d", resp.StatusCode)
		}
	})

	// Catches: a flow check that lets an address through by default.
	t.Run("direct connection to an address not allowed", func(t *testing.T) {
		c, err := w.g.dial("tcp", "192.0.2.10:443")
		if err == nil {
			c.Close()
			t.Fatal("a connection to 192.0.2.10:443 was accepted")
		}
		w.waitDenied(t, "tcp", whyAddr, "192.0.2.10")
		// A synthetic address no name was handed out for.
		if c, err := w.g.dial("tcp", "198.19.255.1:443"); err == nil {
			c.Close()
			t.Fatal("an unassigned synthetic address was accepted")
		}
	})

	// Catches: registering ipv6 with the stack, or a filter passing it.
	t.Run("IPv6", func(t *testing.T) {
		var err error
		w.g.run(func() {
			var c net.Conn
			c, err = net.DialTimeout("tcp", "[2001:db8::48]:443", 2*time.Second)
			if err == nil {
				c.Close()
			}
		})
		if err == nil {
			t.Fatal("an IPv6 connection was accepted")
		}
		w.waitDenied(t, "ipv6", whyProto, "2001:db8::48")
	})

	// Catches: a UDP forwarder, or the filter letting UDP off the DNS port.
	t.Run("UDP", func(t *testing.T) {
		for _, to := range []string{"192.0.2.53:53", GatewayAddr.String() + ":123"} {
			c, err := w.g.dial("udp", to)
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("exfiltrate"))
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			if k, err := c.Read(make([]byte, 64)); err == nil {
				t.Fatalf("UDP to %s was answered (%d bytes)", to, k)
			}
			c.Close()
		}
		w.waitDenied(t, "udp", whyProto, "192.0.2.53")
		w.waitDenied(t, "udp", whyProto, GatewayAddr.String())
	})

	// Catches: ICMP or a raw IP protocol reaching the stack. The raw
	// socket is opened by this test's root, which owns the namespace; a
	// guest process could not open one (TestGuestHoldsNoNetworkCapability).
	t.Run("raw socket", func(t *testing.T) {
		var err error
		w.g.run(func() {
			var fd int
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, 253) // RFC 3692's experimental protocol
			if err != nil {
				return
			}
			defer unix.Close(fd)
			err = unix.Sendto(fd, []byte("raw payload"), 0, &unix.SockaddrInet4{Addr: [4]byte{192, 0, 2, 99}})
			if err != nil {
				return
			}
			fd2, err2 := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
			if err2 != nil {
				err = err2
				return
			}
			defer unix.Close(fd2)
			echo := []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0} // type 8, checksum over zero id/seq
			err = unix.Sendto(fd2, echo, 0, &unix.SockaddrInet4{Addr: GatewayAddr.As4()})
		})
		if err != nil {
			t.Fatal(err)
		}
		w.waitDenied(t, "other", whyProto, "192.0.2.99")
		w.waitDenied(t, "icmp", whyProto, GatewayAddr.String())
	})

	// Catches: answering every name, or answering TXT.
	t.Run("DNS for a denied name and a TXT lookup", func(t *testing.T) {
		if rc, ans := guestLookup(t, w.g, "denied.example.test", dnsmessage.TypeA); rc != dnsmessage.RCodeNameError || len(ans) != 0 {
			t.Fatalf("a denied name (which exists upstream) got %v with %d answers", rc, len(ans))
		}
		w.waitDenied(t, "dns", whyHost, "denied.example.test")
		if rc, _ := guestLookup(t, w.g, "c2VjcmV0.api.example.test", dnsmessage.TypeTXT); rc != dnsmessage.RCodeRefused {
			t.Fatalf("a TXT lookup got %v", rc)
		}
		if rc, _ := guestLookup(t, w.g, "api.example.test", dnsmessage.TypeTXT); rc != dnsmessage.RCodeRefused {
			t.Fatalf("a TXT lookup of an allowed name got %v", rc)
		}
		w.waitDenied(t, "dns", whyQuery, "api.example.test")
	})

	// Catches: not terminating TLS (the Host would go unseen), or
	// forgetting the Host check, or accepting a foreign SNI.
	t.Run("TLS with an allowed SNI but a Host not allowed", func(t *testing.T) {
		before := len(w.out.auths("api.example.test"))
		req, _ := http.NewRequest("GET", "https://api.example.test/", nil)
		req.Host = "denied.example.test"
		req.Header.Set("Authorization", "Bearer "+placeholder)
		resp, err := w.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Fatalf("a fronted request got %d", resp.StatusCode)
		}
		if len(w.out.auths("api.example.test")) != before {
			t.Fatal("a fronted request reached upstream")
		}
		w.waitDenied(t, "tcp", whyFronting, "denied.example.test")

		// The SNI itself naming another host than the address stands for.
		a, err := w.resolve(t, "api.example.test")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := w.g.dial("tcp", a.String()+":443")
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(raw, &tls.Config{ServerName: "fronted.example.test", RootCAs: w.roots})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err == nil {
			t.Fatal("a handshake with a foreign SNI succeeded")
		}
		tc.Close()
		w.waitDenied(t, "tcp", whyFronting, "fronted.example.test")
	})

	// Catches: a port check that looks at the name only, or a proxy
	// honouring CONNECT.
	t.Run("CONNECT to an allowed host on a port not allowed", func(t *testing.T) {
		a, err := w.resolve(t, "api.example.test")
		if err != nil {
			t.Fatal(err)
		}
		if c, err := w.g.dial("tcp", a.String()+":8443"); err == nil {
			c.Close()
			t.Fatal("api.example.test:8443 was accepted")
		}
		w.waitDenied(t, "tcp", whyPort, "api.example.test")
		raw, err := w.g.dial("tcp", a.String()+":443")
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(raw, &tls.Config{ServerName: "api.example.test", RootCAs: w.roots})
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(tc, "CONNECT api.example.test:22 HTTP/1.1\r\nHost: api.example.test:22\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("CONNECT got %d", resp.StatusCode)
		}
	})

	// Catches: SetPolicy applying to new connections only, or not at all.
	t.Run("policy change closes an open connection and refuses the next", func(t *testing.T) {
		a, err := w.resolve(t, "other.example.test")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := w.g.dial("tcp", a.String()+":443")
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(raw, &tls.Config{ServerName: "other.example.test", RootCAs: w.roots})
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(tc)
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("before the change: %d", resp.StatusCode)
		}
		if err := w.n.SetPolicy(cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{hostRule("api.example.test", 443)}}); err != nil {
			t.Fatal(err)
		}
		// SetPolicy has closed it; the guest sees the end within the
		// issue's second (a generous bound: the close is already sent).
		tc.SetReadDeadline(time.Now().Add(time.Second))
		_, err = br.ReadByte()
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the open connection to a removed host is still open: %v", err)
		}
		w.waitDenied(t, "tcp", whyChanged, "other.example.test")
		if c, err := w.g.dial("tcp", a.String()+":443"); err == nil {
			c.Close()
			t.Fatal("a new connection to the removed host was accepted")
		}
		if rc, _ := guestLookup(t, w.g, "other.example.test", dnsmessage.TypeA); rc != dnsmessage.RCodeNameError {
			t.Fatalf("the removed name still resolves: %v", rc)
		}
		if _, err := w.get(t, "https://api.example.test/", nil); err != nil {
			t.Fatalf("the host still allowed: %v", err)
		}
	})

	// Catches: a State that leaks the value, or loses the counts.
	t.Run("network show", func(t *testing.T) {
		st := w.n.State()
		if !st.Enforced || st.DeniedCount < 10 || len(st.Denied) == 0 || len(st.Secrets) != 1 || st.Secrets[0].Placeholder != placeholder {
			t.Fatalf("state: %+v", st)
		}
		if s := fmt.Sprintf("%v %+v %#v", st, st, w.n.cfg.Secrets); strings.Contains(s, realSecret) {
			t.Fatal("the secret's value is in a printed state")
		}
	})
}

// recorder is an HTTP stand-in that keeps the Authorization headers it got.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.got = append(r.got, req.Header.Get("Authorization"))
	r.mu.Unlock()
	w.Write([]byte("plain"))
}

func (r *recorder) auths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}
