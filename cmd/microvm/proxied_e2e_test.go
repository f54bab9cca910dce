package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// proxiedVM is a MicroVM of the emulator with the agentd VM backend: a real
// daemon behind the emulator's token-checking endpoint proxy.
type proxiedVM struct {
	emu        *emulator.Server
	cpURL      string
	cpc        *lambdamicrovms.Client
	id         string
	endpoint   string // bare host, as GetMicrovm returns it
	agentToken string
}

func launchProxied(t *testing.T) *proxiedVM {
	t.Helper()
	agentd := agentdBin(t)
	emu := emulator.New(emulator.Options{VMs: emulator.AgentdLauncher(agentd, nil)})
	url, stop, err := emu.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cpc, err := cplane.New(ctx, cplane.Options{Region: client.USEast1, Endpoint: url,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""), MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := cplane.ParseImageRef(emu.AddImage("cli-proxied"))
	if err != nil {
		t.Fatal(err)
	}
	const token = "proxied-e2e-agent-token"
	payload, err := cplane.NewRunHookPayload(token, nil)
	if err != nil {
		t.Fatal(err)
	}
	run, err := cpc.RunMicrovm(ctx, &lambdamicrovms.RunMicrovmInput{ImageIdentifier: aws.String(ref.String()), RunHookPayload: aws.String(payload.Payload())})
	if err != nil {
		t.Fatal(err)
	}
	got, err := sandbox.WaitMicrovm(ctx, cpc, aws.ToString(run.MicrovmId), types.MicrovmStateRunning, cplane.WaitOptions{Interval: 10 * time.Millisecond, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &proxiedVM{emu: emu, cpURL: url, cpc: cpc, id: aws.ToString(got.MicrovmId), endpoint: aws.ToString(got.Endpoint), agentToken: token}
}

// awsEnv is what a shell with static credentials exports; IMDS is off so a
// missing credential can never reach for the network.
func awsEnv() []string {
	return []string{"AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=secret", "AWS_EC2_METADATA_DISABLED=true"}
}

// authTokenBodies are the CreateMicrovmAuthToken bodies the emulator got.
func authTokenBodies(emu *emulator.Server, id string) []string {
	var out []string
	for _, r := range emu.Requests() {
		if r.Method == http.MethodPost && r.Path == "/2025-09-09/microvms/"+id+"/auth-token" {
			out = append(out, string(r.Body))
		}
	}
	return out
}

// Catches: a proxied attach that sends no proxy token (the proxy's 403), a
// token minted for the wrong MicroVM or port, a bare loopback endpoint given
// an https:// scheme (nothing there speaks TLS), SSE buffered by the proxy
// path, the control endpoint override or the env credential chain not
// reaching the minter, and the refusal this replaced coming back.
func TestProxiedAttachThroughTheEmulator(t *testing.T) {
	vm := launchProxied(t)
	if strings.Contains(vm.endpoint, "://") {
		t.Fatalf("endpoint %q is not a bare host", vm.endpoint)
	}
	attachArgs := []string{"--endpoint", vm.endpoint, "--agent-token", vm.agentToken, "--microvm-id", vm.id, "--control-endpoint", vm.cpURL}
	env := awsEnv()
	// The addressing flags go right after the command name: exec takes
	// every word after its command's first as the command's own.
	run := func(stdin string, args ...string) invocation {
		i := slices.IndexFunc(args, func(a string) bool { return !strings.HasPrefix(a, "-") })
		return cli(t, env, stdin, slices.Concat(args[:i+1], attachArgs, args[i+1:])...)
	}

	t.Run("health", func(t *testing.T) {
		before := len(authTokenBodies(vm.emu, vm.id))
		d := envelope(t, run("", "--json", "health"))["data"].(map[string]any)
		if d["bootstrapped"] != true {
			t.Fatalf("%v", d)
		}
		bodies := authTokenBodies(vm.emu, vm.id)
		if len(bodies) != before+1 {
			t.Fatalf("%d mints for one invocation, want 1", len(bodies)-before)
		}
		var req cp.CreateMicrovmAuthTokenRequest
		if err := json.Unmarshal([]byte(bodies[len(bodies)-1]), &req); err != nil {
			t.Fatal(err)
		}
		if len(req.AllowedPorts) != 1 || req.AllowedPorts[0].Port == nil || *req.AllowedPorts[0].Port != taxonomy.DefaultAgentPort {
			t.Fatalf("minted for %s, want exactly port %d", bodies[len(bodies)-1], taxonomy.DefaultAgentPort)
		}
	})
	t.Run("exec wait", func(t *testing.T) {
		d := envelope(t, run("", "--json", "exec", "echo through the proxy"))["data"].(map[string]any)
		if d["stdout"] != "through the proxy\n" || d["exitCode"] != float64(0) {
			t.Fatalf("%v", d)
		}
	})
	t.Run("13 a non-zero exit through the proxy keeps its output", func(t *testing.T) {
		m := wantExecFailed(t, run("", "--json", "exec", "echo out; exit 3"))
		if d := m["data"].(map[string]any); d["exitCode"] != float64(3) || d["stdout"] != "out\n" {
			t.Fatalf("%v", d)
		}
	})
	t.Run("5 the daemon's refusal through the proxy keeps data.kind", func(t *testing.T) {
		// The proxy forwards agentd's 404 as it is; a proxy that answered for
		// the daemon would lose the kind.
		m := wantFailure(t, run("", "--json", "ack", "no-such-exec"), taxonomy.KindProtocol, "")
		if k := m["data"].(map[string]any)["kind"]; k != taxonomy.WireNotFound.String() {
			t.Fatalf("data.kind %v", k)
		}
	})
	// Catches: a wrong --microvm-id classed transient (ERR_RETRYABLE, "the
	// identical request may succeed", which it never will) and a hint that
	// does not say where the live ids are.
	t.Run("12 a MicroVM the control plane does not know: not transient", func(t *testing.T) {
		inv := cli(t, env, "", "--json", "health", "--endpoint", vm.endpoint, "--agent-token", vm.agentToken,
			"--microvm-id", "mvm-nosuchvm0000000000000", "--control-endpoint", vm.cpURL)
		m := wantFailure(t, inv, taxonomy.KindPrecondition, "")
		if s := fmt.Sprint(m["suggestions"]); !strings.Contains(s, "microvm ls") || !strings.Contains(m["error"].(string), "ResourceNotFoundException") {
			t.Fatalf("%v\n%s", s, inv.stdout)
		}
	})
	t.Run("exec stream", func(t *testing.T) {
		inv := run("", "exec", "--stream", "echo a; echo b")
		if inv.code != 0 || inv.stdout != "a\nb\n" {
			t.Fatalf("%d %q %s", inv.code, inv.stdout, inv.stderr)
		}
	})
	t.Run("cp both ways", func(t *testing.T) {
		dir := t.TempDir()
		src, back := filepath.Join(dir, "in.txt"), filepath.Join(dir, "back.txt")
		if err := os.WriteFile(src, []byte("payload\x00bytes\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		remote := filepath.Join(dir, "guest")
		envelope(t, run("", "--json", "cp", "--parents", src, "vm:"+remote+"/f.txt"))
		envelope(t, run("", "--json", "cp", "vm:"+remote+"/f.txt", back))
		if b, err := os.ReadFile(back); err != nil || string(b) != "payload\x00bytes\n" {
			t.Fatalf("%q %v", b, err)
		}
	})
	t.Run("the SDK's endpoint variable reaches the minter", func(t *testing.T) {
		inv := cli(t, append(awsEnv(), "AWS_ENDPOINT_URL_LAMBDA_MICROVMS="+vm.cpURL), "", "--json", "health",
			"--endpoint", vm.endpoint, "--agent-token", vm.agentToken, "--microvm-id", vm.id)
		if d := envelope(t, inv)["data"].(map[string]any); d["bootstrapped"] != true {
			t.Fatalf("%v", d)
		}
	})
	t.Run("a token for another MicroVM is refused by the proxy", func(t *testing.T) {
		// A second VM's id: its token is real and unexpired, but not for
		// this endpoint.
		ctx := t.Context()
		ref, _ := cplane.ParseImageRef(vm.emu.AddImage("cli-proxied-other"))
		payload, _ := cplane.NewRunHookPayload("other", nil)
		other, err := vm.cpc.RunMicrovm(ctx, &lambdamicrovms.RunMicrovmInput{ImageIdentifier: aws.String(ref.String()), RunHookPayload: aws.String(payload.Payload())})
		if err != nil {
			t.Fatal(err)
		}
		inv := cli(t, env, "", "--json", "health", "--endpoint", vm.endpoint, "--agent-token", vm.agentToken,
			"--microvm-id", aws.ToString(other.MicrovmId), "--control-endpoint", vm.cpURL)
		wantFailure(t, inv, taxonomy.KindCredentials, taxonomy.FindingAllowedPortsUnion)
	})
	t.Run("a token minted for another port is refused", func(t *testing.T) {
		tok, err := vm.cpc.CreateMicrovmAuthToken(t.Context(), &lambdamicrovms.CreateMicrovmAuthTokenInput{MicrovmIdentifier: aws.String(vm.id),
			AllowedPorts: []types.PortSpecification{&types.PortSpecificationMemberPort{Value: 8080}}, ExpirationInMinutes: aws.Int32(5)})
		if err != nil {
			t.Fatal(err)
		}
		h := tok.AuthToken
		req, _ := http.NewRequestWithContext(t.Context(), "GET", cplane.EndpointURL(vm.endpoint)+"/v1/health", nil)
		req.Header.Set(taxonomy.ProxyAuthHeader, h[taxonomy.ProxyAuthHeader])
		req.Header.Set(taxonomy.ProxyPortHeader, "9000")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("a port-8080 token reached port 9000: %d", resp.StatusCode)
		}
	})
	// Catches: the proxy's 403 to a --direct session reported as
	// ERR_UNEXPECTED (a status agentd never sends) rather than as the
	// credentials it is, without the finding or the way out.
	t.Run("4 no agent traffic without the proxy token", func(t *testing.T) {
		// The same endpoint with --direct sends only the bearer: the proxy
		// refuses it, which is what made a proxied attach necessary.
		inv := cli(t, env, "", "--json", "health", "--direct", "--endpoint", vm.endpoint, "--agent-token", vm.agentToken)
		m := wantFailure(t, inv, taxonomy.KindCredentials, taxonomy.FindingEndpointAuth)
		if !strings.Contains(m["error"].(string), "HTTP 403") || !strings.Contains(m["error"].(string), "proxy token") {
			t.Fatalf("%v", m["error"])
		}
		if s := m["suggestions"].([]any); len(s) == 0 || !strings.Contains(s[0].(string), "drop --direct") {
			t.Fatalf("suggestions %v", s)
		}
		if _, ok := m["data"].(map[string]any)["kind"]; ok {
			t.Fatalf("data.kind %v: no daemon answered", m["data"])
		}
	})
	// Catches: AWS_REGION read by the parser as --region's env default,
	// which then conflicts with --unlisted-region (a parse failure before
	// the escape hatch is used), and the variables read instead of the flag.
	t.Run("AWS_REGION does not block --unlisted-region", func(t *testing.T) {
		// The emulator answers a region without MicroVMs as the service
		// does: eu-central-1 gets past the parser and is the region the mint
		// is signed for (AWS_REGION's us-east-1 would have minted), and the
		// mint meets the measured null-message AccessDeniedException.
		inv := cli(t, append(awsEnv(), "AWS_REGION=us-east-1"), "", append([]string{"--json", "health", "--unlisted-region", "eu-central-1"}, attachArgs...)...)
		// The reference classes it as a credential failure whose hint
		// names the region; retrying the identical mint cannot help.
		m := wantFailure(t, inv, taxonomy.KindCredentials, taxonomy.FindingUnsupportedRegion)
		if s := fmt.Sprint(m["suggestions"]); !strings.Contains(m["error"].(string), "AccessDeniedException") || !strings.Contains(s, "--region") {
			t.Fatalf("%v: %v", m["error"], s)
		}
		inv = cli(t, append(awsEnv(), "AWS_REGION=eu-central-1"), "", append([]string{"--json", "health", "--region", "us-west-2"}, attachArgs...)...)
		if d := envelope(t, inv)["data"].(map[string]any); inv.code != 0 || d["bootstrapped"] != true {
			t.Fatalf("--region under an off-table AWS_REGION: %d %v", inv.code, d)
		}
	})
	t.Run("2 an off-table AWS_REGION refuses a proxied attach before any mint", func(t *testing.T) {
		before := len(authTokenBodies(vm.emu, vm.id))
		inv := cli(t, append(awsEnv(), "AWS_REGION=eu-central-1"), "", append([]string{"--json", "health"}, attachArgs...)...)
		wantFailure(t, inv, taxonomy.KindInvalidArg, taxonomy.RegionFinding)
		if n := len(authTokenBodies(vm.emu, vm.id)) - before; n != 0 {
			t.Fatalf("%d mints sent for a refused region", n)
		}
	})
}
