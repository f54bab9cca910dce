package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches, in the one minter closure client/sandbox and cmd/microvm share:
// a mint scoped to one port instead of every port the session asks for (a
// ConnectHeaders port would be refused 403 by the proxy), the expiry not
// taken from the request's minutes, a mint for no port sent at all, and the
// X-aws-proxy-port header left in the token (it would override the port the
// session names per request, so agentd's requests would go to the other
// port).
func TestProxyMinterMintsTheSessionsScope(t *testing.T) {
	f := newFixture(t, emulator.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := f.cp
	run, err := api.RunMicrovm(ctx, &lambdamicrovms.RunMicrovmInput{ImageIdentifier: aws.String(f.emu.AddImage("minter"))})
	if err != nil {
		t.Fatal(err)
	}
	m := ProxyMinter(api, aws.ToString(run.MicrovmId))

	tok, err := m.MintProxyToken(ctx, client.MintRequest{Ports: []int{8080, 9000}, Minutes: 45})
	if err != nil {
		t.Fatal(err)
	}
	reqs := f.emu.Requests()
	last := reqs[len(reqs)-1]
	var body, want any
	_ = json.Unmarshal(last.Body, &body)
	_ = json.Unmarshal([]byte(`{"allowedPorts":[{"port":8080},{"port":9000}],"expirationInMinutes":45}`), &want)
	if !reflect.DeepEqual(body, want) {
		t.Fatalf("mint body %s, want %v", last.Body, want)
	}
	if s := tok.String(); !strings.Contains(s, taxonomy.ProxyAuthHeader) || strings.Contains(s, taxonomy.ProxyPortHeader) {
		t.Fatalf("token headers %s: want %s and no %s", s, taxonomy.ProxyAuthHeader, taxonomy.ProxyPortHeader)
	}
	for _, bad := range []client.MintRequest{{Minutes: 45}, {Ports: []int{0}, Minutes: 45}, {Ports: []int{9000}, Minutes: 61}, {Ports: []int{9000}}} {
		if _, err := m.MintProxyToken(ctx, bad); client.KindOf(err) != taxonomy.KindInvalidArg {
			t.Fatalf("mint %+v: %v, want a local InvalidArg refusal", bad, err)
		}
	}
	if n := len(f.emu.Requests()); n != len(reqs) {
		t.Fatalf("%d refused mints reached the service", n-len(reqs))
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

// Catches a header map without X-aws-proxy-auth taken as a token (every
// proxied request would then be a 403 with nothing naming why).
func TestProxyTokenNeedsTheAuthEntry(t *testing.T) {
	_, err := proxyToken(map[string]string{"Authorization": "x"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Finding() != taxonomy.FindingAuthTokenHeaderMap {
		t.Fatalf("got %v, want a refusal naming %s", err, taxonomy.FindingAuthTokenHeaderMap)
	}
}

// Catches the launch request losing a conversion the old client made:
// durations that are not whole seconds sent truncated (refused here, naming
// their findings), connectors sent as bare names or in another region's
// ARN, or the idle policy's auto-resume dropped.
func TestRunInput(t *testing.T) {
	payload, err := cplane.NewRunHookPayload("tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Version: "2", MaxDuration: time.Hour, ExecutionRoleARN: role,
		Idle:       &cplane.IdlePolicy{MaxIdle: 2 * time.Minute, SuspendedFor: time.Hour, AutoResume: true},
		Connectors: cplane.Connectors{Ingress: true, InternetEgress: true}}
	in, err := runInput("eu-west-1", "arn:aws:lambda:eu-west-1:123456789012:microvm-image:x", o, payload)
	if err != nil {
		t.Fatal(err)
	}
	if *in.MaximumDurationInSeconds != 3600 || *in.IdlePolicy.MaxIdleDurationSeconds != 120 || *in.IdlePolicy.SuspendedDurationSeconds != 3600 ||
		!*in.IdlePolicy.AutoResumeEnabled || *in.ImageVersion != "2" || *in.RunHookPayload != payload.Payload() || *in.ExecutionRoleArn != role {
		t.Fatalf("run input %+v", in)
	}
	if in.IngressNetworkConnectors[0] != "arn:aws:lambda:eu-west-1:aws:network-connector:aws-network-connector:ALL_INGRESS" ||
		in.EgressNetworkConnectors[0] != "arn:aws:lambda:eu-west-1:aws:network-connector:aws-network-connector:INTERNET_EGRESS" {
		t.Fatalf("connectors %v %v", in.IngressNetworkConnectors, in.EgressNetworkConnectors)
	}
	for finding, bad := range map[taxonomy.FindingID]Options{
		taxonomy.FindingMaxDuration: {MaxDuration: 1500 * time.Millisecond},
		taxonomy.FindingIdlePolicy:  {Idle: &cplane.IdlePolicy{MaxIdle: 90500 * time.Millisecond}},
	} {
		_, err := runInput("us-east-1", "arn:aws:lambda:us-east-1:123456789012:microvm-image:x", bad, payload)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Finding() != finding {
			t.Fatalf("%+v: got %v, want a refusal naming %s", bad, err, finding)
		}
	}
}

// The mint's local bounds are inclusive: ports 1 and 65535 and an expiry of
// exactly MaxAuthTokenMinutes are sent; 0, 65536 and one minute more are
// not. Catches each bound made strict the wrong way (`p < 1` as `p <= 1`,
// `p > 65535` as `>=`, `Minutes > Max` as `>=`), which would refuse a port
// or expiry the service takes.
func TestTokenInputBoundsAreInclusive(t *testing.T) {
	in, err := tokenInput("vm", client.MintRequest{Ports: []int{1, 65535}, Minutes: taxonomy.MaxAuthTokenMinutes})
	if err != nil || len(in.AllowedPorts) != 2 || aws.ToInt32(in.ExpirationInMinutes) != taxonomy.MaxAuthTokenMinutes {
		t.Fatalf("edges refused: %+v %v", in, err)
	}
	if in, err := tokenInput("vm", client.MintRequest{Ports: []int{9000}, Minutes: 1}); err != nil || aws.ToInt32(in.ExpirationInMinutes) != 1 {
		t.Fatalf("one minute refused: %v", err)
	}
	for _, bad := range []client.MintRequest{
		{Ports: []int{0}, Minutes: 1},
		{Ports: []int{65536}, Minutes: 1},
		{Ports: []int{9000}, Minutes: taxonomy.MaxAuthTokenMinutes + 1},
		{Ports: []int{9000}, Minutes: 0},
	} {
		if _, err := tokenInput("vm", bad); client.KindOf(err) != taxonomy.KindInvalidArg {
			t.Fatalf("%+v: %v, want a local refusal", bad, err)
		}
	}
}
