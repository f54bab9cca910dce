//go:build unix

package emulator

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Catches: a guest agentd listening on every interface (the daemon's own
// default) rather than loopback, and an image's environmentVariables
// overriding the emulator's AGENTD_LISTEN (the image's values must come
// before the emulator's). Identity repair is not probed the same way: a
// failure would repair this machine.
func TestAgentdGuestListensOnLoopbackOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := AgentdLauncher(agentdBin, nil)(ctx, GuestSpec{
		MicrovmID: "mv-listen", HookPort: 9000,
		Env: map[string]string{"AGENTD_LISTEN": "0.0.0.0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	addr := g.Ports[9000]
	_, port, _ := net.SplitHostPort(addr)
	// 127.0.0.2 is loopback too, but a socket bound to 127.0.0.1 does not
	// answer it; one bound to every interface does.
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", port), 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("the guest agentd answers on 127.0.0.2:%s: it is not bound to 127.0.0.1 alone", port)
	} else if !strings.Contains(err.Error(), "refused") {
		t.Skipf("127.0.0.2 is not usable here: %v", err)
	}
	resp, err := http.Get("http://" + addr + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		IdentityRepaired bool `json:"identity_repaired"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || h.IdentityRepaired {
		t.Fatalf("health: repaired %v, %v", h.IdentityRepaired, err)
	}
}
