package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/mcpapi"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The network tools (issue 48) through `microvm mcp` against an emulator
// whose allowed connections reach a stand-in model on loopback: a sandbox
// created with network_allow and secrets_from_env reaches its allowed host
// with the real key put in outside the guest, is refused a host the policy
// does not list, and sandbox_network_set then cuts the allowed host too.
//
// Catches: tools that drop the policy on create (the denied host would be
// looked up and the refusal never counted), a secret value passed through
// or echoed to the model (it is in no tool answer), a network_set that
// does not reach the guest's policy, a network_show with the wrong state.
func TestMCPNetworkTools(t *testing.T) {
	const host = "api.model.test"
	const value = "mcp-model-key-8d1f3b6a2e"
	model := newModelStandIn(t, host)
	_, url := testEmulator(t, emulator.Options{Network: emulator.NetworkOptions{Resolver: model, Dial: model.dial, RootCAs: model.roots}})
	env, _ := lifecycleEnv(t)
	env = append(env, "AWS_ENDPOINT_URL="+url, "AWS_REGION=us-east-1")
	inv := cli(t, env, "", "--json", "build", "--reuse", "--name", "mcpnet")
	if inv.code != 0 {
		t.Fatalf("build: %s %s", inv.stdout, inv.stderr)
	}
	name := data(envelope(t, inv))["imageName"].(string)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, stdin, stdout, _ := startMCPWith(t, false, append(env, "MICROVM_IMAGE="+name, "MODEL_KEY="+value), "mcp")
	t.Cleanup(func() { t.Logf("server log:\n%s", p.stderr.String()) })
	cs, _ := connectMCP(t, ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin})
	checkToolList(t, ctx, cs)
	answers := &strings.Builder{}
	note := func(res *mcp.CallToolResult) {
		b, _ := json.Marshal(res)
		answers.Write(b)
	}

	// A refused secret names the variable, not a value.
	toolErr(t, ctx, cs, mcpapi.ToolSandboxCreate, map[string]any{"network_allow": []string{host}, "secrets_from_env": []string{"NOT_SET_ANYWHERE@" + host}}, "ERR_INVALID_ARG")

	var created mcpapi.SandboxCreateResult
	note(call(t, ctx, cs, mcpapi.ToolSandboxCreate, map[string]any{"network_allow": []string{host}, "secrets_from_env": []string{"MODEL_KEY@" + host}}, &created))
	id := created.SandboxID
	exec := func(cmd string) mcpapi.SandboxExecResult {
		t.Helper()
		var ex mcpapi.SandboxExecResult
		note(call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": id, "command": cmd}, &ex))
		return ex
	}
	allowed := `curl -sS -f --max-time 20 -H "Authorization: Bearer $MODEL_KEY" https://` + host + `/v1/messages`
	if ex := exec(allowed); ex.ExitCode == nil || *ex.ExitCode != 0 || !strings.Contains(ex.Stdout, "fixed by the model stand-in") {
		t.Fatalf("the allowed host: %+v", ex)
	}
	if got := model.got(); len(got) != 1 || got[0] != host+" Bearer "+value {
		t.Fatalf("the stand-in got %q, want the real key", got)
	}
	if ex := exec(`case "$MODEL_KEY" in mvp_*) echo placeholder;; *) echo other;; esac; curl -sS --max-time 10 https://denied.model.test/ || echo refused`); !strings.Contains(ex.Stdout, "placeholder") || !strings.Contains(ex.Stdout, "refused") {
		t.Fatalf("the guest's key or the denied host: %+v", ex)
	}

	var shown mcpapi.SandboxNetworkShowResult
	note(call(t, ctx, cs, mcpapi.ToolSandboxNetworkShow, map[string]any{"sandbox_id": id}, &shown))
	if !shown.Network.Enforced || shown.Network.Where != "emulator" || shown.Network.DeniedCount < 1 || len(shown.Network.Secrets) != 1 ||
		shown.Network.Secrets[0].Name != "MODEL_KEY" || !strings.HasPrefix(shown.Network.Secrets[0].Placeholder, "mvp_") {
		t.Fatalf("network show: %+v", shown.Network)
	}
	if b, _ := json.Marshal(shown.Network.Denied); !strings.Contains(string(b), "denied.model.test") {
		t.Fatalf("the refusal is not listed: %s", b)
	}

	toolErr(t, ctx, cs, mcpapi.ToolSandboxNetworkSet, map[string]any{"sandbox_id": id}, "ERR_INVALID_ARG")
	var set mcpapi.SandboxNetworkSetResult
	note(call(t, ctx, cs, mcpapi.ToolSandboxNetworkSet, map[string]any{"sandbox_id": id, "deny_all": true}, &set))
	if set.Network.Policy == nil || len(set.Network.Policy.Allow) != 0 {
		t.Fatalf("network set deny_all: %+v", set.Network)
	}
	if ex := exec(allowed); ex.ExitCode == nil || *ex.ExitCode == 0 {
		t.Fatalf("the host the new policy removed is still reached: %+v", ex)
	}
	if got := model.got(); len(got) != 1 {
		t.Fatalf("the stand-in got %d requests, want 1", len(got))
	}
	if strings.Contains(answers.String(), value) {
		t.Fatalf("a tool answer carries the secret's value")
	}
	var term mcpapi.SandboxTerminateResult
	call(t, ctx, cs, mcpapi.ToolSandboxTerminate, map[string]any{"sandbox_id": id}, &term)
}
