package emulator

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testvm"
)

// wsGuest is a guest whose run hook answers 200 and whose port 8081 is a
// WebSocket echo recording what each handshake carried.
type wsGuest struct {
	mu    sync.Mutex
	seen  []http.Header
	conns int
}

func (g *wsGuest) launcher(t *testing.T) Launcher {
	return func(ctx context.Context, spec GuestSpec) (*Guest, error) {
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		echo := httptest.NewServer(websocket.Server{
			Handshake: func(c *websocket.Config, r *http.Request) error {
				g.mu.Lock()
				g.seen = append(g.seen, r.Header.Clone())
				g.mu.Unlock()
				// A guest naming an application subprotocol only when it
				// was offered one; otherwise none, which the platform's
				// proxy answers for.
				if len(c.Protocol) > 0 && c.Protocol[0] == "my-app" {
					c.Protocol = []string{"my-app"}
				} else {
					c.Protocol = nil
				}
				return nil
			},
			Handler: func(ws *websocket.Conn) {
				g.mu.Lock()
				g.conns++
				g.mu.Unlock()
				io.Copy(ws, ws)
			},
		})
		t.Cleanup(hook.Close)
		t.Cleanup(echo.Close)
		return &Guest{
			Ports: map[int]string{spec.HookPort: strings.TrimPrefix(hook.URL, "http://"), 8081: strings.TrimPrefix(echo.URL, "http://")},
			Stop:  func() { hook.Close(); echo.Close() },
		}, nil
	}
}

// Catches: an endpoint proxy that ignores the subprotocol form of the
// credentials (a browser's only form), that honours it for another port or
// without a token, that lets its own subprotocols (the token among them)
// reach the guest, that drops an application subprotocol, or that leaves the
// caller without the lambda-microvms answer when the guest names none.
func TestEndpointProxyTakesWebSocketSubprotocols(t *testing.T) {
	g := &wsGuest{}
	s, base := serve(t, Options{VMs: g.launcher(t)})
	vm := run(t, s, base, testvm.Payload())
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	tok := mintToken(t, base, vm.MicrovmId, 5, `[{"port":8081}]`)

	dial := func(protocols []string, header http.Header) (*websocket.Conn, error) {
		cfg, err := websocket.NewConfig("ws://"+vm.Endpoint+"/", "http://localhost/")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Protocol, cfg.Header = protocols, header
		cfg.Dialer = nil
		return websocket.DialConfig(cfg)
	}
	echo := func(ws *websocket.Conn) {
		t.Helper()
		_ = ws.SetDeadline(time.Now().Add(10 * time.Second))
		if err := websocket.Message.Send(ws, "ping"); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil || got != "ping" {
			t.Fatalf("echo: %q %v", got, err)
		}
		ws.Close()
	}
	platform := func(token, port string) []string {
		return []string{taxonomy.WebSocketSubprotocol, taxonomy.WebSocketAuthPrefix + token, taxonomy.WebSocketPortPrefix + port}
	}
	lastSeen := func() http.Header {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.seen[len(g.seen)-1]
	}

	ws, err := dial(platform(tok, "8081"), nil)
	if err != nil {
		t.Fatalf("the measured three-value handshake: %v", err)
	}
	if p := ws.Config().Protocol; len(p) != 1 || p[0] != taxonomy.WebSocketSubprotocol {
		t.Errorf("the caller saw subprotocol %v, want %s when the guest names none", p, taxonomy.WebSocketSubprotocol)
	}
	echo(ws)
	if h := lastSeen(); h.Get("Sec-WebSocket-Protocol") != "" || h.Get(taxonomy.ProxyAuthHeader) != "" || h.Get(taxonomy.ProxyPortHeader) != "" {
		t.Errorf("the guest saw the proxy's credentials: %v", h)
	}

	ws, err = dial(append(platform(tok, "8081"), "my-app"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := lastSeen(); h.Get("Sec-WebSocket-Protocol") != "my-app" {
		t.Errorf("the guest saw %q, want the application's subprotocol alone", h.Values("Sec-WebSocket-Protocol"))
	}
	if p := ws.Config().Protocol; len(p) != 1 || p[0] != "my-app" {
		t.Errorf("the caller saw %v, want the guest's my-app", p)
	}
	echo(ws)

	// The header form (what microvm forward sends) upgrades too.
	ws, err = dial(nil, http.Header{taxonomy.ProxyAuthHeader: {tok}, taxonomy.ProxyPortHeader: {"8081"}})
	if err != nil {
		t.Fatalf("the header form: %v", err)
	}
	echo(ws)

	g.mu.Lock()
	before := g.conns
	g.mu.Unlock()
	tok9000 := mintToken(t, base, vm.MicrovmId, 5, `[{"port":9000}]`)
	for name, protocols := range map[string][]string{
		"a token for another port":         platform(tok9000, "8081"),
		"the token's port named elsewhere": platform(tok, "9000"),
		"no token":                         {taxonomy.WebSocketSubprotocol, taxonomy.WebSocketPortPrefix + "8081"},
		"a forged token":                   platform("emulator-token-forged", "8081"),
	} {
		if ws, err := dial(protocols, nil); err == nil {
			ws.Close()
			t.Errorf("%s: the handshake succeeded", name)
		}
	}
	g.mu.Lock()
	after := g.conns
	g.mu.Unlock()
	if after != before {
		t.Errorf("%d refused handshakes reached the guest", after-before)
	}
}
