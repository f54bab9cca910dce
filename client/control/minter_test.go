package control

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches, in the one minter closure client/sandbox and cmd/microvm share:
// a mint scoped to one port instead of every port the session asks for (a
// ConnectHeaders port would be refused 403 by the proxy), the expiry not
// taken from the request's minutes, and the X-aws-proxy-port header left in
// the token (it would override the port the session names per request, so
// agentd's requests would go to the other port).
func TestProxyMinterMintsTheSessionsScope(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ctx := ctxT(t)
	ref, _ := buildImage(t, h, "minter")
	vm, err := h.c.Launch(ctx, LaunchSpec{Image: ref, Connectors: Connectors{Ingress: true}})
	if err != nil {
		t.Fatal(err)
	}
	m := h.c.ProxyMinter(vm.MicrovmId)

	tok, err := m.MintProxyToken(ctx, client.MintRequest{Ports: []int{8080, 9000}, Minutes: 45})
	if err != nil {
		t.Fatal(err)
	}
	last := h.emu.Requests()[len(h.emu.Requests())-1]
	if want := `{"allowedPorts":[{"port":8080},{"port":9000}],"expirationInMinutes":45}`; !strings.Contains(string(last.Body), want) {
		t.Fatalf("mint body %s, want %s", last.Body, want)
	}
	if s := tok.String(); !strings.Contains(s, taxonomy.ProxyAuthHeader) || strings.Contains(s, taxonomy.ProxyPortHeader) {
		t.Fatalf("token headers %s: want %s and no %s", s, taxonomy.ProxyAuthHeader, taxonomy.ProxyPortHeader)
	}
	if _, err := m.MintProxyToken(ctx, client.MintRequest{Minutes: 45}); err == nil {
		t.Fatal("a mint for no port was sent")
	}

	// Through a session: the agent port's requests name the agent port even
	// after the scope was widened to another one.
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get(taxonomy.ProxyPortHeader)+" "+map[bool]string{true: "auth", false: "noauth"}[r.Header.Get(taxonomy.ProxyAuthHeader) != ""])
		mu.Unlock()
		_, _ = w.Write([]byte(`{"bootstrapped":true}`))
	}))
	defer srv.Close()
	s, err := client.Proxied(srv.URL, "agent-token", m, client.WithAgentPort(9000))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.ConnectHeaders(ctx, 8080)
	if err != nil || ch.Get(taxonomy.ProxyPortHeader) != "8080" || ch.Get(taxonomy.ProxyAuthHeader) == "" {
		t.Fatalf("connect headers %v, %v", ch, err)
	}
	if _, err := s.Health(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "9000 auth" {
		t.Fatalf("agent requests carried %v, want [9000 auth]", got)
	}
}
