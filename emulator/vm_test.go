//go:build unix

package emulator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/localvm"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testvm"
)

// agentdBin is the real daemon every guest of these tests runs.
var agentdBin string

func TestMain(m *testing.M) {
	localvm.Init() // this test binary is also every local guest's init
	testvm.Main(m, &agentdBin)
}

// clock is the emulator's injected clock; tokens expire by it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func serve(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	s := New(o)
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s, base
}

// run launches a MicroVM of a fresh image with payload as its runHookPayload.
func run(t *testing.T, s *Server, base, payload string) cp.RunMicrovmResponse {
	t.Helper()
	arn := s.AddImage(fmt.Sprintf("img-%d", time.Now().UnixNano()))
	body, _ := json.Marshal(cp.RunMicrovmRequest{ImageIdentifier: arn, RunHookPayload: &payload})
	status, _, out := do(t, base, "POST", "/2025-09-09/microvms", string(body), auth)
	if status != 200 {
		t.Fatalf("RunMicrovm: %d %s", status, out)
	}
	var r cp.RunMicrovmResponse
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func get(t *testing.T, base, id string) cp.GetMicrovmResponse {
	t.Helper()
	status, _, out := do(t, base, "GET", "/2025-09-09/microvms/"+id, "", auth)
	if status != 200 {
		t.Fatalf("GetMicrovm: %d %s", status, out)
	}
	var g cp.GetMicrovmResponse
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// waitState polls GetMicrovm until it reports want or a terminal state.
func waitState(t *testing.T, base, id string, want cp.MicrovmState) cp.GetMicrovmResponse {
	t.Helper()
	for i := 0; i < 2000; i++ { // bounded: about twenty seconds
		g := get(t, base, id)
		if g.State == want {
			return g
		}
		if g.State == cp.MicrovmStateTERMINATED {
			t.Fatalf("MicroVM %s is TERMINATED (%v), want %s", id, deref(g.StateReason), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("MicroVM %s never reached %s", id, want)
	return cp.GetMicrovmResponse{}
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func mintToken(t *testing.T, base, id string, minutes int, ports string) string {
	t.Helper()
	status, _, out := do(t, base, "POST", "/2025-09-09/microvms/"+id+"/auth-token", fmt.Sprintf(`{"expirationInMinutes":%d,"allowedPorts":%s}`, minutes, ports), auth)
	if status != 200 {
		t.Fatalf("CreateMicrovmAuthToken: %d %s", status, out)
	}
	var r cp.CreateMicrovmAuthTokenResponse
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r.AuthToken[taxonomy.ProxyAuthHeader]
}

// viaEndpoint sends GET path to a MicroVM's bare-host endpoint with the
// proxy headers (omitted when empty) and returns status and body.
func viaEndpoint(t *testing.T, endpoint, path, token, port string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", "http://"+endpoint+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(taxonomy.ProxyAuthHeader, token)
	}
	if port != "" {
		req.Header.Set(taxonomy.ProxyPortHeader, port)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Catches: a proxy that forwards without a token, accepts any token, ignores
// the port scope or one of the union's three forms, ignores expiry, or
// accepts another MicroVM's token; and a run hook that is not delivered (the
// daemon would answer health with bootstrapped false).
func TestEndpointProxyEnforcesTokenScopeAndExpiry(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	s, base := serve(t, Options{Now: clk.Now, VMs: AgentdLauncher(agentdBin, nil)})
	vm := run(t, s, base, testvm.Payload())
	other := run(t, s, base, testvm.Payload())
	if strings.Contains(vm.Endpoint, "://") || !strings.HasPrefix(vm.Endpoint, "127.0.0.1:") {
		t.Fatalf("endpoint %q: want a bare loopback host (finding endpoint-bare-host)", vm.Endpoint)
	}
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	waitState(t, base, other.MicrovmId, cp.MicrovmStateRUNNING)

	tok9000 := mintToken(t, base, vm.MicrovmId, 5, `[{"port":9000}]`)
	tok8080 := mintToken(t, base, vm.MicrovmId, 5, `[{"port":8080}]`)
	tokRange := mintToken(t, base, vm.MicrovmId, 5, `[{"range":{"startPort":8000,"endPort":9100}}]`)
	tokAll := mintToken(t, base, vm.MicrovmId, 5, `[{"allPorts":{}}]`)
	tokPair := mintToken(t, base, vm.MicrovmId, 5, `[{"port":8080},{"port":9000}]`)
	tokRangeEnd := mintToken(t, base, vm.MicrovmId, 5, `[{"range":{"startPort":8000,"endPort":9000}}]`)
	tokRangeStart := mintToken(t, base, vm.MicrovmId, 5, `[{"range":{"startPort":9000,"endPort":9100}}]`)
	tokRangeBelow := mintToken(t, base, vm.MicrovmId, 5, `[{"range":{"startPort":8000,"endPort":8999}}]`)
	tokOther := mintToken(t, base, other.MicrovmId, 5, `[{"allPorts":{}}]`)

	cases := []struct {
		name, token, port string
		status            int
	}{
		{"no token", "", "9000", 403},
		{"made-up token", "emulator-token-forged", "9000", 403},
		{"another MicroVM's token", tokOther, "9000", 403},
		{"no port header", tok9000, "", 403},
		{"port outside a single-port token", tok8080, "9000", 403},
		{"port header outside the token's scope", tok9000, "9001", 403},
		{"single port", tok9000, "9000", 200},
		{"two ports", tokPair, "9000", 200},
		{"range", tokRange, "9000", 200},
		{"range ending at the port", tokRangeEnd, "9000", 200},
		{"range starting at the port", tokRangeStart, "9000", 200},
		{"range ending below the port", tokRangeBelow, "9000", 403},
		{"allPorts", tokAll, "9000", 200},
		// Authorized, nothing listening: 502, not 403.
		{"allPorts, no listener", tokAll, "9001", 502},
	}
	for _, tc := range cases {
		status, body := viaEndpoint(t, vm.Endpoint, "/v1/health", tc.token, tc.port)
		if status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.status)
		}
		if status == 200 && !strings.Contains(body, `"bootstrapped":true`) {
			t.Errorf("%s: the run hook was not delivered before traffic: %s", tc.name, body)
		}
	}
	if status, body := viaEndpoint(t, vm.Endpoint, "/v1/health", tok8080, "9000"); !strings.Contains(body, "Access to port denied") {
		t.Errorf("the measured refusal text is missing: %d %s", status, body)
	}

	// A 5-minute token is dead after five minutes of the emulator's clock,
	// and one minted afterwards works.
	clk.Advance(5*time.Minute - time.Second)
	if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok9000, "9000"); status != 200 {
		t.Fatalf("a token inside its life: %d", status)
	}
	clk.Advance(time.Second)
	if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok9000, "9000"); status != 403 {
		t.Fatalf("an expired token: %d, want 403", status)
	}
	fresh := mintToken(t, base, vm.MicrovmId, 60, `[{"port":9000}]`)
	if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", fresh, "9000"); status != 200 {
		t.Fatalf("a fresh token: %d", status)
	}
}

// guestServer is a guest that records what reaches it; its run hook answers
// hookStatus once release is closed.
type guestServer struct {
	hookStatus int
	release    chan struct{}
	hookHit    chan struct{}

	mu       sync.Mutex
	hookBody string
	headers  []http.Header
	stopped  bool
}

func (g *guestServer) launcher(t *testing.T) Launcher {
	return func(ctx context.Context, spec GuestSpec) (*Guest, error) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == taxonomy.HookPrefix+"/run" {
				b, _ := io.ReadAll(r.Body)
				g.mu.Lock()
				g.hookBody = string(b)
				g.mu.Unlock()
				close(g.hookHit)
				<-g.release
				w.WriteHeader(g.hookStatus)
				return
			}
			g.mu.Lock()
			g.headers = append(g.headers, r.Header.Clone())
			g.mu.Unlock()
			io.WriteString(w, "guest")
		}))
		t.Cleanup(srv.Close)
		// Registered after srv.Close, so it runs first: a failing test must
		// not leave the hook handler blocked, or Close waits for it forever.
		t.Cleanup(func() {
			select {
			case <-g.release:
			default:
				close(g.release)
			}
		})
		return &Guest{
			Ports: map[int]string{spec.HookPort: strings.TrimPrefix(srv.URL, "http://")},
			Stop:  func() { g.mu.Lock(); g.stopped = true; g.mu.Unlock(); srv.Close() },
		}, nil
	}
}

// Catches: RUNNING reported before the run hook answered (the first-writer
// race the platform closes), traffic forwarded before it, the payload sent
// bare instead of wrapped, and the proxy headers leaking to the guest.
func TestRunHookPrecedesRunningAndTraffic(t *testing.T) {
	g := &guestServer{hookStatus: 200, release: make(chan struct{}), hookHit: make(chan struct{})}
	s, base := serve(t, Options{VMs: g.launcher(t)})
	vm := run(t, s, base, `{"agent_token":"x"}`)
	<-g.hookHit
	tok := mintToken(t, base, vm.MicrovmId, 5, `[{"port":9000}]`)
	// The hook is held: however often the VM is observed, it is PENDING and
	// its endpoint forwards nothing.
	for i := 0; i < 5; i++ {
		if st := get(t, base, vm.MicrovmId).State; st != cp.MicrovmStatePENDING {
			t.Fatalf("observation %d during the run hook: %s, want PENDING", i, st)
		}
	}
	if status, _ := viaEndpoint(t, vm.Endpoint, "/x", tok, "9000"); status != 502 {
		t.Fatalf("traffic before the run hook answered: %d, want 502", status)
	}
	close(g.release)
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	g.mu.Lock()
	hook := g.hookBody
	g.mu.Unlock()
	if hook != `{"runHookPayload":"{\"agent_token\":\"x\"}"}` {
		t.Fatalf("run hook body %s: want the payload wrapped as a string", hook)
	}
	if status, body := viaEndpoint(t, vm.Endpoint, "/x", tok, "9000"); status != 200 || body != "guest" {
		t.Fatalf("after RUNNING: %d %q", status, body)
	}
	g.mu.Lock()
	h := g.headers[len(g.headers)-1]
	g.mu.Unlock()
	if h.Get(taxonomy.ProxyAuthHeader) != "" || h.Get(taxonomy.ProxyPortHeader) != "" {
		t.Fatalf("the guest saw the proxy headers: %v", h)
	}
}

// Catches: a failing run hook that still lets the VM run, a stateReason that
// hides the hook's status, and a dead guest left running.
func TestFailingRunHookIsADeadLaunch(t *testing.T) {
	g := &guestServer{hookStatus: 400, release: make(chan struct{}), hookHit: make(chan struct{})}
	close(g.release)
	s, base := serve(t, Options{VMs: g.launcher(t)})
	vm := run(t, s, base, `{"agent_token":"x"}`)
	var got cp.GetMicrovmResponse
	for i := 0; i < 2000 && got.State != cp.MicrovmStateTERMINATED; i++ { // bounded
		if got = get(t, base, vm.MicrovmId); got.State == cp.MicrovmStateRUNNING {
			t.Fatal("a VM whose run hook answered 400 reported RUNNING")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got.State != cp.MicrovmStateTERMINATED || !strings.Contains(deref(got.StateReason), "Run lifecycle hook returned HTTP status 400") {
		t.Fatalf("%s %s", got.State, deref(got.StateReason))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stopped {
		t.Fatal("the dead launch's guest was not stopped")
	}
}

// Catches the same with the real daemon: a payload it refuses (here not
// JSON) must kill the launch, as on the platform.
func TestAgentdRefusingThePayloadIsADeadLaunch(t *testing.T) {
	s, base := serve(t, Options{VMs: AgentdLauncher(agentdBin, nil)})
	vm := run(t, s, base, "not json")
	var got cp.GetMicrovmResponse
	for i := 0; i < 2000 && got.State != cp.MicrovmStateTERMINATED; i++ { // bounded
		if got = get(t, base, vm.MicrovmId); got.State == cp.MicrovmStateRUNNING {
			t.Fatal("RUNNING after agentd refused the payload")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(deref(got.StateReason), "HTTP status 400") {
		t.Fatalf("%s %s", got.State, deref(got.StateReason))
	}
}

// agentdPids lists the live processes running bin, by /proc.
func agentdPids(t *testing.T, bin string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A confined guest's daemon runs from a sealed copy named after it,
		// and so does its init when the daemon is of this build
		// (localvm/guestinit), told apart by its argv[0].
		if cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); strings.HasPrefix(string(cmdline), localvm.GuestInitArg0) {
			continue
		}
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && (exe == bin || exe == "/memfd:"+filepath.Base(bin)+" (deleted)") {
			out = append(out, pid)
		}
	}
	return out
}

func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "gone"
	}
	i := strings.LastIndexByte(string(b), ')')
	return strings.Fields(string(b[i+1:]))[0]
}

// waitProc polls until pid's state satisfies ok.
func waitProc(t *testing.T, pid int, what string, ok func(string) bool) {
	t.Helper()
	for i := 0; i < 1000; i++ { // bounded
		if ok(procState(pid)) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("agentd %d never %s (state %s)", pid, what, procState(pid))
}

// Catches: a suspend that leaves the guest running (or kills it), a resume
// that does not continue it, traffic forwarded to a suspended VM, and a
// terminate that leaves the process behind.
func TestSuspendFreezesResumeThawsTerminateKills(t *testing.T) {
	// A private copy of the binary, so /proc names exactly this test's guest.
	bin := filepath.Join(t.TempDir(), "agentd-lifecycle")
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
	pids := agentdPids(t, bin)
	if len(pids) != 1 {
		t.Fatalf("agentd processes %v, want one", pids)
	}
	pid := pids[0]
	tok := mintToken(t, base, vm.MicrovmId, 60, `[{"port":9000}]`)

	if status, _, out := do(t, base, "POST", "/2025-09-09/microvms/"+vm.MicrovmId+"/suspend", "", auth); status != 200 {
		t.Fatalf("suspend: %d %s", status, out)
	}
	waitProc(t, pid, "stopped", func(s string) bool { return s == "T" })
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateSUSPENDED)
	if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 502 {
		t.Fatalf("traffic to a suspended VM: %d, want 502", status)
	}

	if status, _, out := do(t, base, "POST", "/2025-09-09/microvms/"+vm.MicrovmId+"/resume", "", auth); status != 200 {
		t.Fatalf("resume: %d %s", status, out)
	}
	waitProc(t, pid, "continued", func(s string) bool { return s != "T" })
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	// The freeze kept the daemon's memory: still bootstrapped, no new hook.
	if status, body := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 200 || !strings.Contains(body, `"bootstrapped":true`) {
		t.Fatalf("after resume: %d %s", status, body)
	}

	if status, _, out := do(t, base, "DELETE", "/2025-09-09/microvms/"+vm.MicrovmId, "", auth); status != 200 {
		t.Fatalf("terminate: %d %s", status, out)
	}
	waitProc(t, pid, "exited", func(s string) bool { return s == "gone" })
	if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 502 {
		t.Fatalf("traffic to a terminated VM: %d, want 502", status)
	}
}
