//go:build unix

package localvm

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// Catches: a guest agentd listening on every interface of this machine (the
// daemon's own default) rather than loopback, from the unconfined launcher
// (a confined guest listens in a network namespace of its own, egress or
// not, which the host cannot dial at all); and an image's environmentVariables overriding the emulator's
// AGENTD_LISTEN (the image's values must come before the emulator's).
// Identity repair is not probed the same way: a failure would repair this
// machine.
func TestAgentdGuestListensOnLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		launch Launcher
		spec   GuestSpec
	}{
		{"unisolated", UnsafeUnisolatedAgentdLauncher(agentdBin, nil), GuestSpec{MicrovmID: "mv-listen-u"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tc.spec.HookPort = 9000
			tc.spec.Env = map[string]string{"AGENTD_LISTEN": "0.0.0.0"}
			g, err := tc.launch(ctx, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Stop()
			_, port, _ := net.SplitHostPort(g.Ports[9000])
			// 127.0.0.2 is loopback too, but a socket bound to 127.0.0.1 does
			// not answer it; one bound to every interface does.
			c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", port), 2*time.Second)
			if err == nil {
				c.Close()
				t.Fatalf("the guest agentd answers on 127.0.0.2:%s: it is not bound to 127.0.0.1 alone", port)
			}
			if !strings.Contains(err.Error(), "refused") {
				t.Skipf("127.0.0.2 is not usable here: %v", err)
			}
			c, err = net.DialTimeout("tcp", g.Ports[9000], 2*time.Second)
			if err != nil {
				t.Fatalf("the guest agentd does not answer on %s: %v", g.Ports[9000], err)
			}
			c.Close()
		})
	}
}
