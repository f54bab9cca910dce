package sandbox

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a forward that serves any Host (DNS rebinding: a page at
// rebound.example whose name now resolves to 127.0.0.1 would read the guest
// port with this machine's token, and a token would be minted for it), and
// one that lets the caller's own proxy headers reach the endpoint.
func TestForwarderServesOnlyLoopbackNames(t *testing.T) {
	var seen []http.Header
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Clone())
		io.WriteString(w, "guest")
	}))
	defer endpoint.Close()
	mint := func(context.Context) (PortURL, error) {
		h := http.Header{}
		h.Set(taxonomy.ProxyAuthHeader, "minted")
		h.Set(taxonomy.ProxyPortHeader, "8080")
		return PortURL{MicrovmID: "m", Port: 8080, URL: endpoint.URL + "/", Headers: h, ExpiresAt: time.Now().Add(time.Hour), Lifetime: time.Hour}, nil
	}
	for _, anyHost := range []bool{false, true} {
		fw := NewForwarder(mint, ForwardOptions{AnyHost: anyHost})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Forward(ctx, ln, fw) }()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		for _, tc := range []struct {
			host string
			ok   bool
		}{
			{"127.0.0.1:" + port, true},
			{"localhost:" + port, true},
			{"app.localhost:" + port, true},
			{"[::1]:" + port, true},
			{"127.0.0.2", true},
			{"rebound.example:" + port, anyHost},
			{"10.0.0.1:" + port, anyHost},
			{"localhost.evil.example", anyHost},
		} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
			req.Host = tc.host
			req.Header.Set(taxonomy.ProxyPortHeader, "9000")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := resp.StatusCode == 200 && string(b) == "guest"; got != tc.ok {
				t.Errorf("AnyHost %v, Host %q: %d %q, want served %v", anyHost, tc.host, resp.StatusCode, b, tc.ok)
			}
			if !tc.ok && !strings.Contains(string(b), "not a loopback name") {
				t.Errorf("Host %q refused without saying why: %q", tc.host, b)
			}
		}
		if !anyHost && fw.Mints() != 1 {
			t.Errorf("%d mints, want 1: a refused Host must not mint", fw.Mints())
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range seen {
		if h.Get(taxonomy.ProxyPortHeader) != "8080" || h.Get(taxonomy.ProxyAuthHeader) != "minted" {
			t.Fatalf("the endpoint saw %v, want the forward's own proxy headers", h)
		}
	}
}

// Catches: a failed renewal that fails the request while the current token
// still has life (a throttle at the renewal point would cut a healthy
// forward), and one that keeps serving a token past its expiry.
func TestForwarderKeepsItsTokenWhileARenewalFails(t *testing.T) {
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get(taxonomy.ProxyAuthHeader))
	}))
	defer endpoint.Close()
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	var calls atomic.Int32
	var failing atomic.Bool
	mint := func(context.Context) (PortURL, error) {
		n := calls.Add(1)
		if failing.Load() {
			return PortURL{}, errors.New("ThrottlingException: rate exceeded")
		}
		h := http.Header{}
		h.Set(taxonomy.ProxyAuthHeader, "token-"+strconv.Itoa(int(n)))
		return PortURL{URL: endpoint.URL + "/", Headers: h, ExpiresAt: clk.Now().Add(time.Minute), Lifetime: time.Minute}, nil
	}
	fw := NewForwarder(mint, ForwardOptions{Now: clk.Now, ErrorLog: log.New(io.Discard, "", 0)})
	srv := httptest.NewServer(fw)
	defer srv.Close()
	get := func() (int, string) {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, b := get(); status != 200 || b != "token-1" {
		t.Fatalf("%d %q", status, b)
	}
	failing.Store(true)
	clk.Advance(45 * time.Second) // past the renewal point, inside the life
	if status, b := get(); status != 200 || b != "token-1" || calls.Load() != 2 {
		t.Fatalf("a failed renewal with 15s left: %d %q after %d mints, want the current token", status, b, calls.Load())
	}
	clk.Advance(15 * time.Second) // at the expiry
	if status, b := get(); status != http.StatusBadGateway || !strings.Contains(b, "ThrottlingException") {
		t.Fatalf("an expired token with no renewal: %d %q, want 502 naming the mint failure", status, b)
	}
	failing.Store(false)
	if status, b := get(); status != 200 || b != "token-4" {
		t.Fatalf("after the control plane recovered: %d %q", status, b)
	}
}
