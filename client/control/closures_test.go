package control

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a ceiling of 4095 or 4097, counting runes instead of bytes, or
// checking the token alone before the env is folded in.
func TestRunHookPayloadCeilingIsInclusiveOnTheWholeString(t *testing.T) {
	bare, _ := NewRunHookPayload("tok", map[string]string{"PAD": ""})
	pad := taxonomy.MaxRunHookPayloadBytes - bare.Len()
	at, err := NewRunHookPayload("tok", map[string]string{"PAD": strings.Repeat("x", pad)})
	if err != nil || at.Len() != taxonomy.MaxRunHookPayloadBytes {
		t.Fatalf("exactly %d bytes must pass: len %d, %v", taxonomy.MaxRunHookPayloadBytes, at.Len(), err)
	}
	_, err = NewRunHookPayload("tok", map[string]string{"PAD": strings.Repeat("x", pad+1)})
	ce := requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingRunHookPayloadCeiling)
	for _, want := range []string{"4097 bytes", "4096-byte ceiling", "launch env accounts for"} {
		if !strings.Contains(ce.Message(), want) {
			t.Errorf("refusal %q lacks %q", ce.Message(), want)
		}
	}
	// Multi-byte runes: 2-byte 'é' pushes a rune count under 4096 over in bytes.
	_, err = NewRunHookPayload("tok", map[string]string{"PAD": strings.Repeat("é", pad/2+1)})
	requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingRunHookPayloadCeiling)
	var decoded struct {
		AgentToken string            `json:"agent_token"`
		Env        map[string]string `json:"env"`
	}
	if err := json.Unmarshal([]byte(at.s), &decoded); err != nil || decoded.AgentToken != "tok" {
		t.Fatalf("payload does not carry agentd's fields: %s", at.s)
	}
	if strings.Contains(at.String(), "tok") {
		t.Fatal("String must not print the token")
	}
}

// Catches: a closure that fires after the request is sent. Every launch
// refusal must leave the emulator untouched.
func TestLaunchRefusalsSendNothing(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	arn := mustRef(t, "arn:aws:lambda:us-east-1:123456789012:microvm-image:x")
	cases := []struct {
		name    string
		spec    LaunchSpec
		finding taxonomy.FindingID
	}{
		{"duration over 8h", LaunchSpec{Image: arn, MaxDuration: (taxonomy.MaxDurationSec + 1) * time.Second}, taxonomy.FindingMaxDuration},
		{"fractional duration", LaunchSpec{Image: arn, MaxDuration: 1500 * time.Millisecond}, taxonomy.FindingMaxDuration},
		{"name not ARN", LaunchSpec{Image: mustRef(t, "x")}, taxonomy.FindingImageARNColon},
		{"zero image", LaunchSpec{}, taxonomy.FindingImageARNColon},
		{"version with space", LaunchSpec{Image: arn, Version: "1 .0"}, taxonomy.FindingImageVersionForm},
		{"idle under 60s", LaunchSpec{Image: arn, Idle: &IdlePolicy{MaxIdle: 59 * time.Second}}, taxonomy.FindingIdlePolicy},
	}
	for _, tc := range cases {
		_, err := h.c.Launch(ctxT(t), tc.spec)
		requireKind(t, err, taxonomy.KindInvalidArg, tc.finding)
	}
	if _, err := h.c.launchRequest(LaunchSpec{Image: arn, MaxDuration: taxonomy.MaxDurationSec * time.Second}); err != nil {
		t.Fatalf("exactly 8h must pass: %v", err)
	}
	if n := len(h.emu.Requests()); n != 0 {
		t.Fatalf("%d requests sent by refused launches", n)
	}
}

// Catches: rendering connectors as bare names, in another region, or
// adding egress the caller did not ask for.
func TestConnectorsRenderAsRegionalARNs(t *testing.T) {
	h := newHarness(t, emulator.Options{}, func(o *Options) { o.Region = client.EUWest1 })
	req, err := h.c.launchRequest(LaunchSpec{Image: mustRef(t, "arn:aws:lambda:eu-west-1:123456789012:microvm-image:x"), Connectors: Connectors{Ingress: true}})
	if err != nil {
		t.Fatal(err)
	}
	if req.IngressNetworkConnectors == nil || (*req.IngressNetworkConnectors)[0] != "arn:aws:lambda:eu-west-1:aws:network-connector:aws-network-connector:ALL_INGRESS" {
		t.Fatalf("ingress %v", req.IngressNetworkConnectors)
	}
	if req.EgressNetworkConnectors != nil {
		t.Fatalf("egress %v was not asked for", *req.EgressNetworkConnectors)
	}
	req, _ = h.c.launchRequest(LaunchSpec{Image: mustRef(t, "arn:aws:lambda:eu-west-1:123456789012:microvm-image:x"), Connectors: Connectors{InternetEgress: true}})
	if req.EgressNetworkConnectors == nil || !strings.HasSuffix((*req.EgressNetworkConnectors)[0], ":eu-west-1:aws:network-connector:aws-network-connector:INTERNET_EGRESS") {
		t.Fatalf("egress %v", req.EgressNetworkConnectors)
	}
}

// Catches: additionalOsCapabilities sent without the repair intent, or a
// size class not reaching the wire.
func TestCapabilitiesOnlyThroughRepairIdentity(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	plain, err := h.c.buildSpec(testSpec("p"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.AdditionalOsCapabilities != nil || plain.Resources != nil {
		t.Fatalf("capabilities %v / resources %v without being asked", plain.AdditionalOsCapabilities, plain.Resources)
	}
	s := testSpec("r")
	s.RepairIdentity = true
	s.Size, _ = client.SizeClassFromBaseline(512)
	rep, _ := h.c.buildSpec(s)
	if rep.AdditionalOsCapabilities == nil || len(*rep.AdditionalOsCapabilities) != 1 || (*rep.AdditionalOsCapabilities)[0] != "ALL" {
		t.Fatalf("repair identity should send [ALL], got %v", rep.AdditionalOsCapabilities)
	}
	if rep.Resources == nil || (*rep.Resources)[0].MinimumMemoryInMiB != 512 {
		t.Fatalf("size class not sent: %v", rep.Resources)
	}
}

// Catches: a token request over 60 minutes, in fractions of a minute, with
// no ports, or with a malformed range reaching the service.
func TestTokenRequestClosures(t *testing.T) {
	cases := []struct {
		req     TokenRequest
		finding taxonomy.FindingID
	}{
		{TokenRequest{Ports: []PortScope{Port(9000)}, Expiry: 61 * time.Minute}, taxonomy.FindingEndpointAuth},
		{TokenRequest{Ports: []PortScope{Port(9000)}, Expiry: 90 * time.Second}, taxonomy.FindingEndpointAuth},
		{TokenRequest{Expiry: time.Minute}, taxonomy.FindingAllowedPortsUnion},
		{TokenRequest{Ports: []PortScope{PortRange(9000, 8000)}, Expiry: time.Minute}, taxonomy.FindingAllowedPortsUnion},
		{TokenRequest{Ports: []PortScope{Port(0)}, Expiry: time.Minute}, taxonomy.FindingAllowedPortsUnion},
		{TokenRequest{Ports: []PortScope{{}}, Expiry: time.Minute}, taxonomy.FindingAllowedPortsUnion},
	}
	for _, tc := range cases {
		_, err := tc.req.wire()
		requireKind(t, err, taxonomy.KindInvalidArg, tc.finding)
	}
	w, err := TokenRequest{Ports: []PortScope{AllPorts()}, Expiry: time.Hour}.wire()
	if err != nil || w.ExpirationInMinutes != 60 {
		t.Fatalf("60 minutes must pass: %v %v", w, err)
	}
	b, _ := json.Marshal(w.AllowedPorts)
	if string(b) != `[{"allPorts":{}}]` {
		t.Fatalf("allPorts wire form %s", b)
	}
	if _, err := newAuthToken(map[string]string{"Authorization": "x"}, TokenRequest{}, fixedNow); err == nil {
		t.Fatal("a header map without X-aws-proxy-auth must be refused")
	}
}

// Catches: loosening the version rule, or comparing base versions as strings.
func TestImageVersionRules(t *testing.T) {
	for _, bad := range []string{"", "1 0", "1.0\n", strings.Repeat("9", taxonomy.MaxImageVersionLen+1)} {
		requireKind(t, CheckImageVersion(bad), taxonomy.KindInvalidArg, taxonomy.FindingImageVersionForm)
	}
	for _, ok := range []string{"1", "1.0", strings.Repeat("9", taxonomy.MaxImageVersionLen)} {
		if err := CheckImageVersion(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	if !SameBaseVersion("1", "1.0") || SameBaseVersion("1", "0") || SameBaseVersion("1", "10") {
		t.Fatal("SameBaseVersion must treat 1 and 1.0 as one version, and nothing else")
	}
}

// Catches: a Client built with no region.
func TestZeroRegionIsRefused(t *testing.T) {
	_, err := New(context.Background(), Options{Endpoint: "http://127.0.0.1:1"})
	requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingUnsupportedRegion)
}

// Catches: anyone adding a call to CreateMicrovmShellAuthToken or a
// SHELL_INGRESS connector to this package's non-test code.
func TestNeverCallsTheShellOperation(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				if strings.Contains(x.Sel.Name, "Shell") {
					t.Errorf("%s: %s refers to %s", f, fset.Position(x.Pos()), x.Sel.Name)
				}
			case *ast.BasicLit:
				if strings.Contains(x.Value, "SHELL_INGRESS") {
					t.Errorf("%s: %s requests SHELL_INGRESS", f, fset.Position(x.Pos()))
				}
			}
			return true
		})
	}
}
