//go:build linux

package netpolicy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// guestNS is a network namespace this test made, holding a tun device
// whose other end a Net serves: the real kernel plays the guest.
type guestNS struct {
	do  chan func()
	tun *os.File
}

// run runs fn on the thread that lives in the guest's namespace; a socket
// fn opens belongs to that namespace for good.
func (g *guestNS) run(fn func()) {
	done := make(chan struct{})
	g.do <- func() { fn(); close(done) }
	<-done
}

func (g *guestNS) dial(network, addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	g.run(func() { c, err = net.DialTimeout(network, addr, 5*time.Second) })
	return c, err
}

// newGuestNS makes the namespace on a locked thread that is never handed
// back to the runtime (its goroutine ends locked, so the thread is
// discarded), configures the guest side the way the runtime will, and
// answers the tun's descriptor.
func newGuestNS(t *testing.T) *guestNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace and a tun device needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the ip command (iproute2) configures the test's guest side")
	}
	g := &guestNS{do: make(chan func())}
	ready := make(chan error, 1)
	quit := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- err
			return
		}
		tun, err := OpenTun("tun0")
		if err != nil {
			ready <- err
			return
		}
		g.tun = tun
		for _, args := range [][]string{
			{"link", "set", "lo", "up"},
			{"link", "set", "tun0", "up", "mtu", "1500"},
			{"addr", "add", GuestAddr.String() + "/24", "dev", "tun0"},
			{"route", "add", "default", "via", GatewayAddr.String()},
			{"-6", "addr", "add", "fd00:48::2/64", "dev", "tun0", "nodad"},
			{"-6", "route", "add", "default", "dev", "tun0"},
		} {
			// A child forked from this thread starts in its namespace.
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				ready <- &net.AddrError{Err: strings.TrimSpace(string(out)), Addr: strings.Join(args, " ")}
				return
			}
		}
		ready <- nil
		for {
			select {
			case fn := <-g.do:
				fn()
			case <-quit:
				return // locked: the thread dies with its namespace
			}
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("making the guest's namespace: %v", err)
	}
	t.Cleanup(func() { close(quit); g.tun.Close() })
	return g
}

// standIns is the outside world of a test: an upstream resolver and HTTPS
// servers on loopback, and a dialer that sends each name to its server.
type standIns struct {
	roots    *x509.CertPool
	resolver *net.Resolver
	servers  map[string]*httptest.Server // by name
	extra    map[string]string           // name -> a plain TCP stand-in's address
	mu       sync.Mutex
	got      map[string][]string // name -> Authorization headers received
}

func newStandIns(t *testing.T, extra map[string]string, names ...string) *standIns {
	t.Helper()
	s := &standIns{servers: map[string]*httptest.Server{}, extra: extra, got: map[string][]string{}}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stand-in upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	s.roots = x509.NewCertPool()
	s.roots.AddCert(caCert)
	for i, name := range names {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		lt := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: name},
			DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, lt, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		name := name
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.got[name] = append(s.got[name], r.Header.Get("Authorization"))
			s.mu.Unlock()
			if r.Header.Get("Upgrade") == "echo" {
				c, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
				brw.Flush()
				io.Copy(c, brw)
				return
			}
			w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
			w.Write([]byte("hello from " + name + " for " + r.Host))
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		s.servers[name] = srv
	}
	// The upstream resolver: every stand-in name has an address (loopback,
	// which only the test's Dial reaches); other names do not exist.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var m dnsmessage.Message
			if m.Unpack(buf[:k]) != nil || len(m.Questions) != 1 {
				continue
			}
			q := m.Questions[0]
			m.Header.Response, m.Header.RCode = true, dnsmessage.RCodeNameError
			qn := strings.TrimSuffix(q.Name.String(), ".")
			if _, ok := s.servers[qn]; ok || s.extra[qn] != "" {
				m.Header.RCode = dnsmessage.RCodeSuccess
				if q.Type == dnsmessage.TypeA {
					m.Answers = []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: q.Name, Type: q.Type, Class: q.Class, TTL: 5},
						Body: &dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}}}}
				}
			}
			out, _ := m.Pack()
			pc.WriteTo(out, from)
		}
	}()
	addr := pc.LocalAddr().String()
	s.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
	return s
}

// dial is Config.Dial: a name's server, on loopback, and nothing else.
func (s *standIns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, _ := net.SplitHostPort(addr)
	var d net.Dialer
	if a := s.extra[host]; a != "" {
		return d.DialContext(ctx, network, a)
	}
	srv, ok := s.servers[host]
	if !ok {
		return nil, &net.AddrError{Err: "no stand-in for this address", Addr: addr}
	}
	return d.DialContext(ctx, network, srv.Listener.Addr().String())
}

func (s *standIns) auths(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got[name]...)
}

// guestLookup sends one DNS query from the guest to the gateway.
func guestLookup(t *testing.T, g *guestNS, name string, typ dnsmessage.Type) (dnsmessage.RCode, []dnsmessage.Resource) {
	t.Helper()
	c, err := g.dial("udp", GatewayAddr.String()+":53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 4848, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: typ, Class: dnsmessage.ClassINET}}}
	b, _ := q.Pack()
	buf := make([]byte, 1500)
	// UDP: a bounded number of tries, each with a generous deadline.
	for try := 0; try < 5; try++ {
		c.Write(b)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		k, err := c.Read(buf)
		if err != nil {
			continue
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[:k]); err != nil {
			t.Fatalf("the gateway's answer does not parse: %v", err)
		}
		return m.Header.RCode, m.Answers
	}
	t.Fatalf("no DNS answer for %s from the gateway", name)
	return 0, nil
}

// serverFirst is a plain TCP stand-in that greets first, as SSH does, then
// echoes lines.
func serverFirst(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("SSH-2.0-standin\r\n"))
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}
