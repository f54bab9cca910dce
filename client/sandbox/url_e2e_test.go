package sandbox

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testguest"
)

// guestServers launches a sandbox of a real emulator (agentd in its own
// namespaces, the emulator's token-checking endpoint proxy in front) on
// clock clk, and starts in it `python3 -m http.server 8080` serving a
// directory holding marker.txt, and the WebSocket echo server on 8081.
func guestServers(t *testing.T, clk *fakeClock) (*fixture, *Sandbox) {
	t.Helper()
	f := newFixture(t, emulator.Options{VMs: emulator.AgentdLauncher(agentdHost, nil), Now: clk.Now})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := Launch(ctx, f.cp, Options{Image: f.emu.AddImage("ports"), Wait: fast})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })
	if err := sb.WriteFile(ctx, "/tmp/site/marker.txt", []byte("from the guest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "/tmp/wsecho.py", []byte(testguest.WSEchoPy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"/usr/bin/python3", "-m", "http.server", "8080", "--bind", "127.0.0.1", "--directory", "/tmp/site"},
		{"/usr/bin/python3", "/tmp/wsecho.py", "8081"},
	} {
		if _, err := sb.Session().Start(ctx, cmd, client.StartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Bounded: python3 listens within a second or two.
	for _, port := range []string{"8080", "8081"} {
		for i := 0; ; i++ {
			r, err := sb.Run(ctx, []string{"/usr/bin/python3", "-c", "import socket; socket.create_connection(('127.0.0.1', " + port + "), 1)"}, client.RunOptions{})
			if err == nil && r.ExitStatus == 0 {
				break
			}
			if i == 100 {
				t.Fatalf("nothing listens on guest port %s: %+v %v", port, r, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return f, sb
}

func get(t *testing.T, u string, h http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func withPort(h http.Header, port int) http.Header {
	h = h.Clone()
	h.Set(taxonomy.ProxyPortHeader, strconv.Itoa(port))
	return h
}

func authTokenBodies(f *fixture) []string {
	var out []string
	for _, r := range f.emu.Requests() {
		if strings.HasSuffix(r.Path, "/auth-token") {
			out = append(out, string(r.Body))
		}
	}
	return out
}

// Catches: a URL token minted for a range, allPorts or the daemon's port as
// well (the 9000 rows would answer 200, and the mint body would differ);
// the port header left to the caller; an expiry not bounded by the model
// (90s, 61m and port 0 would reach the control plane); ExpiresAt read from
// the wrong clock; a proxy that forwards without a token, or past its
// expiry; and a URL handed out for a suspended or terminated VM.
func TestURLReachesOnlyItsGuestPort(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	f, sb := guestServers(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	before := len(authTokenBodies(f))
	u, err := sb.URL(ctx, 8080, URLOptions{Expires: 5 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	bodies := authTokenBodies(f)
	if len(bodies) != before+1 {
		t.Fatalf("%d mints for one URL", len(bodies)-before)
	}
	var body, want any
	_ = json.Unmarshal([]byte(bodies[len(bodies)-1]), &body)
	_ = json.Unmarshal([]byte(`{"allowedPorts":[{"port":8080}],"expirationInMinutes":5}`), &want)
	if !reflect.DeepEqual(body, want) {
		t.Fatalf("mint body %s, want exactly port 8080 for 5 minutes", bodies[len(bodies)-1])
	}
	if u.Port != 8080 || u.MicrovmID != sb.ID() || u.URL != "http://"+sb.Endpoint()+"/" {
		t.Fatalf("%v", u)
	}
	if !u.ExpiresAt.Equal(clk.Now().Add(5*time.Minute)) || u.Lifetime != 5*time.Minute {
		t.Fatalf("expires %s, want the mint's clock plus 5m", u.ExpiresAt)
	}
	if u.Headers.Get(taxonomy.ProxyPortHeader) != "8080" || u.Headers.Get(taxonomy.ProxyAuthHeader) == "" {
		t.Fatalf("headers %v", u)
	}
	if s := u.String() + u.GoString(); strings.Contains(s, u.Headers.Get(taxonomy.ProxyAuthHeader)) {
		t.Fatalf("String prints the token: %s", s)
	}

	if status, b := get(t, u.URL, u.Headers); status != 200 || !strings.Contains(b, "marker.txt") {
		t.Fatalf("the listing through the URL: %d %s", status, b)
	}
	if status, b := get(t, u.URL+"marker.txt", u.Headers); status != 200 || b != "from the guest\n" {
		t.Fatalf("a file through the URL: %d %q", status, b)
	}
	// Check tells the endpoint's answers apart, each with its kind.
	wantCheck := func(name string, u PortURL, status int, kind taxonomy.ErrorKind, finding taxonomy.FindingID) {
		t.Helper()
		got, err := u.Check(ctx, nil)
		var ce *client.Error
		if got != status || client.KindOf(err) != kind || !asClientError(err, &ce) || ce.Finding() != finding {
			t.Errorf("%s: Check %d %v, want %d %s %s", name, got, err, status, kind, finding)
		}
	}
	if status, err := u.Check(ctx, nil); status != 200 || err != nil {
		t.Fatalf("Check of a served port: %d %v", status, err)
	}
	wrongPort := u
	wrongPort.Headers = withPort(u.Headers, taxonomy.DefaultAgentPort)
	wantCheck("the 8080 token naming 9000", wrongPort, 403, taxonomy.KindCredentials, taxonomy.FindingAllowedPortsUnion)
	idle, err := sb.URL(ctx, 8082, URLOptions{Expires: time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	wantCheck("a port nothing listens on", idle, 502, taxonomy.KindPrecondition, taxonomy.FindingAllowedPortsUnion)

	// The same token names another port: agentd's 9000, an unused 9001.
	for _, port := range []int{taxonomy.DefaultAgentPort, 9001, 8081} {
		if status, b := get(t, u.URL+"v1/health", withPort(u.Headers, port)); status != 403 || !strings.Contains(b, "Access to port denied") {
			t.Errorf("the 8080 token on port %d: %d %s, want 403", port, status, b)
		}
	}
	if status, _ := get(t, u.URL, http.Header{}); status != 403 {
		t.Errorf("no headers: %d, want 403", status)
	}
	if status, _ := get(t, u.URL, http.Header{taxonomy.ProxyPortHeader: {"8080"}}); status != 403 {
		t.Errorf("the port header without the token: %d, want 403", status)
	}
	// Dead at its expiry by the emulator's clock, as the platform refuses it.
	clk.Advance(5*time.Minute - time.Second)
	if status, _ := get(t, u.URL, u.Headers); status != 200 {
		t.Fatalf("inside its life: %d", status)
	}
	clk.Advance(time.Second)
	if status, b := get(t, u.URL, u.Headers); status != 403 {
		t.Fatalf("expired: %d %s, want 403", status, b)
	}
	wantCheck("expired", u, 403, taxonomy.KindCredentials, taxonomy.FindingEndpointAuth)

	// A browser's form: the WebSocket offers the credentials as
	// subprotocols, straight to the endpoint, to the real guest's echo.
	wsu, err := sb.URL(ctx, 8081, URLOptions{Expires: 5 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if len(wsu.Subprotocols) != 3 || wsu.Subprotocols[2] != "lambda-microvms.port.8081" || strings.Contains(wsu.String(), wsu.Headers.Get(taxonomy.ProxyAuthHeader)) {
		t.Fatalf("subprotocols %q", wsu.Subprotocols)
	}
	cfg, err := websocket.NewConfig("ws"+strings.TrimPrefix(wsu.URL, "http"), "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Protocol = wsu.Subprotocols
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("the subprotocol handshake to the guest: %v", err)
	}
	_ = ws.SetDeadline(time.Now().Add(10 * time.Second))
	var echoed string
	if err := websocket.Message.Send(ws, "direct"); err != nil {
		t.Fatal(err)
	}
	if err := websocket.Message.Receive(ws, &echoed); err != nil || echoed != "echo:direct" {
		t.Fatalf("echo: %q %v", echoed, err)
	}
	ws.Close()
	// A live 8080 token's subprotocols naming 8081: refused.
	u2, err := sb.URL(ctx, 8080, URLOptions{Expires: 5 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Protocol = []string{u2.Subprotocols[0], u2.Subprotocols[1], "lambda-microvms.port.8081"}
	if ws, err := websocket.DialConfig(cfg); err == nil {
		ws.Close()
		t.Fatal("the 8080 token opened a WebSocket on 8081")
	}

	// Bad input is refused before any call.
	before = len(f.emu.Requests())
	for _, tc := range []struct {
		port    int
		expires time.Duration
		finding taxonomy.FindingID
	}{
		{0, 0, taxonomy.FindingAllowedPortsUnion},
		{65536, 0, taxonomy.FindingAllowedPortsUnion},
		{-1, time.Minute, taxonomy.FindingAllowedPortsUnion},
		{8080, 90 * time.Second, taxonomy.FindingEndpointAuth},
		{8080, 30 * time.Second, taxonomy.FindingEndpointAuth},
		{8080, 61 * time.Minute, taxonomy.FindingEndpointAuth},
		{8080, -time.Minute, taxonomy.FindingEndpointAuth},
	} {
		_, err := MintURL(ctx, f.cp, sb.ID(), tc.port, URLOptions{Expires: tc.expires})
		var ce *client.Error
		if client.KindOf(err) != taxonomy.KindInvalidArg || !asClientError(err, &ce) || ce.Finding() != tc.finding {
			t.Errorf("port %d expires %s: %v, want InvalidArg naming %s", tc.port, tc.expires, err, tc.finding)
		}
	}
	if n := len(f.emu.Requests()); n != before {
		t.Fatalf("refused input still sent %d requests", n-before)
	}
	if u, err := MintURL(ctx, f.cp, sb.ID(), 65535, URLOptions{Expires: time.Hour}); err != nil || u.Lifetime != time.Hour {
		t.Fatalf("the ceiling and the top port are allowed: %v %v", u, err)
	}

	// Not RUNNING: refused, naming the state, by the sandbox and by id.
	if err := sb.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Sandbox.URL": func() error { _, err := sb.URL(ctx, 8080, URLOptions{}); return err },
		"MintURL":     func() error { _, err := MintURL(ctx, f.cp, sb.ID(), 8080, URLOptions{}); return err },
	} {
		if err := call(); client.KindOf(err) != taxonomy.KindInvalidArg || !strings.Contains(err.Error(), "SUSPENDED") {
			t.Errorf("%s of a suspended VM: %v", name, err)
		}
	}
	sb.Terminate(ctx, TeardownOptions{})
	if _, err := MintURL(ctx, f.cp, sb.ID(), 8080, URLOptions{}); client.KindOf(err) != taxonomy.KindInvalidArg || !strings.Contains(err.Error(), "TERMINATED") {
		t.Errorf("MintURL of a terminated VM: %v", err)
	}
}

func asClientError(err error, ce **client.Error) bool {
	e, ok := err.(*client.Error)
	*ce = e
	return ok
}

// Catches: a forwarder that mints once and never again (the request after
// the renewal point would carry the old token and, past its expiry, fail),
// one that mints per request, one that keeps a token the endpoint refused,
// WebSocket upgrades not carried through (x/net/websocket's handshake would
// fail), a caller's own proxy headers reaching the endpoint (the 9000 row),
// and Forward leaving its listener open after its context ends.
func TestForwarderHTTPWebSocketAndRenewal(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	f, sb := guestServers(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	forward := func(port int, o ForwardOptions) (*Forwarder, string, func()) {
		fw := NewForwarder(func(ctx context.Context) (PortURL, error) {
			return sb.URL(ctx, port, URLOptions{Expires: time.Minute, Now: clk.Now})
		}, o)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- Forward(fctx, ln, fw) }()
		return fw, ln.Addr().String(), func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("Forward: %v", err)
			}
			if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
				c.Close()
				t.Errorf("%s still accepts after Forward returned", ln.Addr())
			}
		}
	}

	fw, addr, stop := forward(8080, ForwardOptions{Now: clk.Now})
	base := "http://" + addr + "/"
	if status, b := get(t, base, nil); status != 200 || !strings.Contains(b, "marker.txt") {
		t.Fatalf("the listing through the forward: %d %s", status, b)
	}
	// A caller naming another port is overridden: the forward is to 8080.
	h := http.Header{taxonomy.ProxyPortHeader: {"9000"}, taxonomy.ProxyAuthHeader: {"forged"}}
	if status, b := get(t, base+"marker.txt", h); status != 200 || b != "from the guest\n" {
		t.Fatalf("caller proxy headers: %d %q", status, b)
	}
	if fw.Mints() != 1 {
		t.Fatalf("%d mints for two requests inside the first token's life", fw.Mints())
	}
	// Renewal at half the 1-minute life, before the expiry.
	clk.Advance(29 * time.Second)
	get(t, base, nil)
	if fw.Mints() != 1 {
		t.Fatalf("minted again with %s of a 1m token left", 31*time.Second)
	}
	clk.Advance(2 * time.Second)
	if status, _ := get(t, base, nil); status != 200 || fw.Mints() != 2 {
		t.Fatalf("at 31s of 1m: %d, %d mints, want a renewal", status, fw.Mints())
	}
	// Past the first token's expiry: the renewed one carries on, and the
	// next renewal comes half its life after it was minted.
	clk.Advance(40 * time.Second)
	if status, _ := get(t, base, nil); status != 200 || fw.Mints() != 3 {
		t.Fatalf("at 71s: %d, %d mints, want 200 and a third token", status, fw.Mints())
	}
	stop()

	// WebSocket: the upgrade and frames both ways through the forward.
	_, wsAddr, wsStop := forward(8081, ForwardOptions{Now: clk.Now})
	cfg, err := websocket.NewConfig("ws://"+wsAddr+"/echo", "http://"+wsAddr+"/")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("WebSocket handshake through the forward: %v", err)
	}
	for _, msg := range []string{"one", "two", "three"} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := websocket.Message.Receive(ws, &got); err != nil || got != "echo:"+msg {
			t.Fatalf("echo of %q: %q %v", msg, got, err)
		}
	}
	// Ending Forward ends the upgraded connection too.
	wsStop()
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got string
	if err := websocket.Message.Receive(ws, &got); err == nil {
		t.Fatalf("the WebSocket outlived Forward: %q", got)
	}
	ws.Close()

	// A token the endpoint refuses (its clock is past the expiry while the
	// forwarder's is not) is dropped: one 403, then a fresh token.
	lag := &fakeClock{t: clk.Now()}
	fw2, addr2, stop2 := forward(8080, ForwardOptions{Now: lag.Now})
	defer stop2()
	if status, _ := get(t, "http://"+addr2+"/", nil); status != 200 {
		t.Fatalf("first request: %d", status)
	}
	clk.Advance(2 * time.Minute)
	if status, _ := get(t, "http://"+addr2+"/", nil); status != 403 {
		t.Fatalf("a token the emulator's clock expired: %d, want the endpoint's 403", status)
	}
	if status, _ := get(t, "http://"+addr2+"/", nil); status != 200 || fw2.Mints() != 2 {
		t.Fatalf("after a refusal: %d, %d mints, want a fresh token", status, fw2.Mints())
	}
	_ = f
}
