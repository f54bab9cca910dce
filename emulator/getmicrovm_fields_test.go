package emulator

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	cp "github.com/microvms/microvms/gen/controlplane"
)

// Catches: a RunMicrovm without executionRoleArn refused (the service
// launches it: finding launch-without-execution-role), and a GetMicrovm
// answer for a healthy VM that carries anything but the measured fields: a
// stateReason before any failure, the runHookPayload echoed back (a launch
// secret must not be readable from the control plane), or a member dropped
// (finding get-microvm-fields).
func TestGetMicrovmOfAHealthyVMLaunchedWithoutARole(t *testing.T) {
	s, base := serve(t, Options{})
	arn := s.AddImage("fields")
	idle := cp.IdlePolicy{AutoResumeEnabled: false, MaxIdleDurationSeconds: 1800, SuspendedDurationSeconds: 600}
	ingress := []string{"arn:aws:lambda:us-east-1:aws:network-connector:aws-network-connector:ALL_INGRESS"}
	egress := []string{"arn:aws:lambda:us-east-1:aws:network-connector:aws-network-connector:INTERNET_EGRESS"}
	secret := `{"agent_token":"do-not-echo"}`
	body, _ := json.Marshal(cp.RunMicrovmRequest{ImageIdentifier: arn, RunHookPayload: &secret, IdlePolicy: &idle,
		IngressNetworkConnectors: &ingress, EgressNetworkConnectors: &egress})
	status, _, out := do(t, base, "POST", "/2025-09-09/microvms", string(body), auth)
	if status != 200 {
		t.Fatalf("RunMicrovm without executionRoleArn: %d %s", status, out)
	}
	var r cp.RunMicrovmResponse
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	waitState(t, base, r.MicrovmId, cp.MicrovmStateRUNNING)
	_, _, got := do(t, base, "GET", "/2025-09-09/microvms/"+r.MicrovmId, "", auth)
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// The measured eleven, less executionRoleArn, which this launch left out.
	want := []string{"egressNetworkConnectors", "endpoint", "idlePolicy", "imageArn", "imageVersion", "ingressNetworkConnectors",
		"maximumDurationInSeconds", "microvmId", "startedAt", "state"}
	if !slices.Equal(keys, want) || strings.Contains(got, "do-not-echo") {
		t.Fatalf("GetMicrovm of a healthy VM: %v, want %v (and no payload): %s", keys, want, got)
	}
	if !strings.Contains(string(m["idlePolicy"]), `"autoResumeEnabled":false`) {
		t.Errorf("idlePolicy without all three members: %s", m["idlePolicy"])
	}
}
