//go:build unix

package emulator

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testvm"
)

// viaEndpointPost sends POST rawPath to a MicroVM's endpoint with a proxy
// token and port, over a raw connection so the request line carries the path
// exactly as written, and returns the status.
func viaEndpointPost(t *testing.T, endpoint, rawPath, token, port string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", endpoint, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n%s: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
		rawPath, endpoint, taxonomy.ProxyAuthHeader, token, taxonomy.ProxyPortHeader, port)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("POST %s: %v", rawPath, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The endpoint proxy refuses the hook prefix from outside, in every spelling
// that reaches the daemon's route; and when a guest's daemon exits for any
// reason the control plane reports the MicroVM TERMINATED within seconds.
// Before: POST .../runtime/v1/terminate through the proxy with only a proxy
// token killed the guest, and GetMicrovm went on reporting RUNNING. Catches:
// a proxy that forwards the prefix (the guest dies), one that compares the
// raw path only (a ./ or // spelling slips through), and an emulator that
// never notices a dead guest (RUNNING forever).
func TestRoundTwoProxyRefusesHooksAndADeadGuestIsTerminated(t *testing.T) {
	// A private copy of the binary, so /proc names exactly this test's guest.
	bin := filepath.Join(t.TempDir(), "agentd-roundtwo")
	raw, err := os.ReadFile(agentdBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	s, base := serve(t, Options{VMs: AgentdLauncher(bin, nil)})
	vm := run(t, s, base, testvm.Payload())
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	tok := mintToken(t, base, vm.MicrovmId, 60, `[{"allPorts":{}}]`)
	for _, p := range []string{
		taxonomy.HookPrefix + "/terminate",
		taxonomy.HookPrefix + "/run",
		taxonomy.HookPrefix + "/./terminate",
		"/" + taxonomy.HookPrefix + "/terminate",
		taxonomy.HookPrefix + "/x/../terminate",
		strings.Replace(taxonomy.HookPrefix, "runtime", "%72untime", 1) + "/terminate",
		strings.ToUpper(taxonomy.HookPrefix) + "/terminate",
	} {
		if status := viaEndpointPost(t, vm.Endpoint, p, tok, "9000"); status != http.StatusForbidden {
			t.Errorf("POST %s through the endpoint: %d, want 403", p, status)
		}
	}
	time.Sleep(time.Second) // time for a forwarded terminate to have taken effect
	if status, body := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 200 || !strings.Contains(body, `"bootstrapped":true`) {
		t.Fatalf("the guest after the refused hooks: %d %s", status, body)
	}
	if g := get(t, base, vm.MicrovmId); g.State != cp.MicrovmStateRUNNING {
		t.Fatalf("after the refused hooks: %s %s", g.State, deref(g.StateReason))
	}

	// The daemon exits for a reason of its own: the control plane follows.
	pids := agentdPids(t, bin)
	if len(pids) != 1 {
		t.Fatalf("agentd processes %v, want one", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for {
		g := get(t, base, vm.MicrovmId)
		if g.State == cp.MicrovmStateTERMINATED {
			if g.StateReason == nil || g.TerminatedAt == nil {
				t.Fatalf("TERMINATED without a stateReason or terminatedAt: %+v", g)
			}
			t.Logf("GetMicrovm reported TERMINATED %v after the guest's daemon died: %s", time.Since(began).Round(time.Millisecond), *g.StateReason)
			break
		}
		if time.Since(began) > 10*time.Second {
			t.Fatalf("the guest's daemon died %v ago and GetMicrovm still reports %s", time.Since(began), g.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != http.StatusBadGateway {
		t.Fatalf("traffic to the dead guest: %d, want 502", status)
	}
}
