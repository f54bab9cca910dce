package emulator

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/internal/testvm"
)

// privateAgentd copies the daemon under a name only this test's guests
// have, so /proc names exactly them.
func privateAgentd(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	raw, err := os.ReadFile(agentdBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// runIdle launches a MicroVM of a fresh image with an idle policy and, when
// maxDur is not zero, a maximum duration.
func runIdle(t *testing.T, s *Server, base string, p cp.IdlePolicy, maxDur int) cp.RunMicrovmResponse {
	t.Helper()
	arn := s.AddImage(fmt.Sprintf("img-%d", time.Now().UnixNano()))
	pl := testvm.Payload()
	req := cp.RunMicrovmRequest{ImageIdentifier: arn, RunHookPayload: &pl, IdlePolicy: &p}
	if maxDur != 0 {
		req.MaximumDurationInSeconds = &maxDur
	}
	body, _ := json.Marshal(req)
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

// wantState reads GetMicrovm once and fails unless it reports want with a
// reason containing reason ("" wants no reason).
func wantState(t *testing.T, base, id string, want cp.MicrovmState, reason string) cp.GetMicrovmResponse {
	t.Helper()
	g := get(t, base, id)
	if g.State != want {
		t.Fatalf("MicroVM %s is %s (%s), want %s", id, g.State, deref(g.StateReason), want)
	}
	if reason == "" && g.StateReason != nil {
		t.Fatalf("MicroVM %s %s has reason %q, want none", id, want, *g.StateReason)
	}
	if reason != "" && !strings.Contains(deref(g.StateReason), reason) {
		t.Fatalf("MicroVM %s %s has reason %q, want one naming %s", id, want, deref(g.StateReason), reason)
	}
	return g
}

// Catches: an idle policy that never fires (the emulator before issue 49),
// one that counts a control-plane read as traffic or ignores an endpoint
// request, an idle suspend that leaves the guest running, an auto-resume
// that refuses the request that woke it or leaves the guest frozen, a
// suspended window measured from when the suspend was noticed instead of
// when it happened, and a missing stateReason on any of these.
func TestIdlePolicySuspendsAutoResumesAndEnds(t *testing.T) {
	bin := privateAgentd(t, "agentd-idle")
	clk := &clock{t: time.Date(2026, 8, 15, 12, 0, 0, 0, time.UTC)}
	s, base := serve(t, Options{Now: clk.Now, VMs: AgentdLauncher(bin, nil)})
	vm := runIdle(t, s, base, cp.IdlePolicy{MaxIdleDurationSeconds: 60, SuspendedDurationSeconds: 120, AutoResumeEnabled: true}, 0)
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	pids := agentdPids(t, bin)
	if len(pids) != 1 {
		t.Fatalf("agentd processes %v, want one", pids)
	}
	pid := pids[0]
	tok := mintToken(t, base, vm.MicrovmId, 60, `[{"port":9000}]`)

	// Control-plane reads are not inbound traffic; an endpoint request is.
	clk.Advance(50 * time.Second)
	wantState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING, "")
	if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 200 {
		t.Fatalf("health at 50s: %d", status)
	}
	clk.Advance(59 * time.Second)
	wantState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING, "")
	clk.Advance(time.Second)
	wantState(t, base, vm.MicrovmId, cp.MicrovmStateSUSPENDED, "maxIdleDurationSeconds (60)")
	waitProc(t, pid, "frozen by the idle policy", func(s string) bool { return s == "T" })

	// The next inbound request resumes it and is answered.
	if status, body := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 200 || !strings.Contains(body, `"bootstrapped":true`) {
		t.Fatalf("the request that should auto-resume: %d %s", status, body)
	}
	wantState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING, "")
	waitProc(t, pid, "thawed by the auto-resume", func(s string) bool { return s != "T" })

	// Idle again; nobody looks until long after the window closed: the
	// window ran from the suspend, not from the look.
	clk.Advance(10 * time.Minute)
	g := wantState(t, base, vm.MicrovmId, cp.MicrovmStateTERMINATED, "suspendedDurationSeconds (120)")
	if want := float64(clk.Now().Add(-10*time.Minute+180*time.Second).UnixMilli()) / 1000; g.TerminatedAt == nil || *g.TerminatedAt != want {
		t.Fatalf("terminatedAt %v, want %v (suspend at 60 s idle, then the 120 s window)", g.TerminatedAt, want)
	}
	waitProc(t, pid, "stopped at the window's end", func(s string) bool { return s == "gone" })
	if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 502 {
		t.Fatalf("a request to the terminated VM: %d, want 502", status)
	}
}

// Catches: a VM without autoResumeEnabled that a request wakes (the
// platform needs ResumeMicrovm then), and a refused request that resets the
// idle clock or changes the state.
func TestIdleSuspendWithoutAutoResumeRefusesTraffic(t *testing.T) {
	clk := &clock{t: time.Date(2026, 8, 15, 12, 0, 0, 0, time.UTC)}
	s, base := serve(t, Options{Now: clk.Now, VMs: AgentdLauncher(agentdBin, nil)})
	vm := runIdle(t, s, base, cp.IdlePolicy{MaxIdleDurationSeconds: 60, SuspendedDurationSeconds: 600}, 0)
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	tok := mintToken(t, base, vm.MicrovmId, 60, `[{"port":9000}]`)
	clk.Advance(61 * time.Second)
	for i := 0; i < 3; i++ {
		if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 502 {
			t.Fatalf("request %d to an idle-suspended VM without auto-resume: %d, want 502", i, status)
		}
		wantState(t, base, vm.MicrovmId, cp.MicrovmStateSUSPENDED, "maxIdleDurationSeconds (60)")
	}
	// ResumeMicrovm still works, and clears the reason.
	if status, _, out := do(t, base, "POST", "/2025-09-09/microvms/"+vm.MicrovmId+"/resume", "", auth); status != 200 {
		t.Fatalf("resume: %d %s", status, out)
	}
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	wantState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING, "")
	if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 200 {
		t.Fatalf("after ResumeMicrovm: %d", status)
	}
}

// Catches: a maximum duration that traffic postpones, one that is never
// applied, or one applied without a reason or with the guest left running.
func TestMaximumDurationTerminatesWhateverTheTraffic(t *testing.T) {
	bin := privateAgentd(t, "agentd-maxdur")
	clk := &clock{t: time.Date(2026, 8, 15, 12, 0, 0, 0, time.UTC)}
	s, base := serve(t, Options{Now: clk.Now, VMs: AgentdLauncher(bin, nil)})
	vm := runIdle(t, s, base, cp.IdlePolicy{MaxIdleDurationSeconds: 60, SuspendedDurationSeconds: 600, AutoResumeEnabled: true}, 300)
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	pid := agentdPids(t, bin)[0]
	tok := mintToken(t, base, vm.MicrovmId, 60, `[{"port":9000}]`)
	for i := 0; i < 5; i++ { // 250 s, each 50 s with a request: never idle
		clk.Advance(50 * time.Second)
		if status, _ := viaEndpoint(t, vm.Endpoint, "/v1/health", tok, "9000"); status != 200 {
			t.Fatalf("health at %ds: %d", 50*(i+1), status)
		}
		wantState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING, "")
	}
	clk.Advance(50 * time.Second)
	wantState(t, base, vm.MicrovmId, cp.MicrovmStateTERMINATED, "maximumDurationInSeconds (300)")
	waitProc(t, pid, "stopped at the maximum duration", func(s string) bool { return s == "gone" })
}
