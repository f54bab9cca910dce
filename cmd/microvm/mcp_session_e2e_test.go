package main_test

// microvm mcp across sessions: the per-session cap, ownership, the loopback
// rule of --http, and the non-local path against a control endpoint.

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/gen/mcpapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// toolErr calls a tool that must answer a tool error (not a protocol
// error) whose text names code.
func toolErr(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, code string) string {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: a protocol error %v, want a tool error", name, err)
	}
	if !res.IsError || !strings.Contains(text(res), code) {
		t.Fatalf("%s: want a tool error naming %s, got %v %q", name, code, res.IsError, text(res))
	}
	return text(res)
}

// TestMCPSessionCapAndOwnership runs two HTTP sessions on one server.
// Catches: the cap on live sandboxes not enforced, counted per server
// rather than per session, or not freed by a terminate; a session reaching
// another's sandbox; one session's end tearing down another's sandboxes;
// size_mib ignored in local mode, or accepted beside an image.
func TestMCPSessionCapAndOwnership(t *testing.T) {
	agentdBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, _, _, url := startMCP(t, true)
	a, _ := connectMCP(t, ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1})
	b, _ := connectMCP(t, ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1})

	var ids []string
	for i := range mcpapi.MaxLiveSandboxes {
		var c mcpapi.SandboxCreateResult
		args := map[string]any{}
		if i == 0 {
			args["size_mib"] = 1024 // a class other than the default: a local image is built for it
		}
		call(t, ctx, a, mcpapi.ToolSandboxCreate, args, &c)
		ids = append(ids, c.SandboxID)
		if c.LiveSandboxes != int64(i+1) {
			t.Fatalf("create %d: live_sandboxes %d", i+1, c.LiveSandboxes)
		}
	}
	// The 1024 MiB class shows in the guest's memory limit where the host
	// can set one; either way the image it came from is not the default.
	var listed mcpapi.SandboxListResult
	call(t, ctx, a, mcpapi.ToolSandboxList, nil, &listed)
	if len(listed.Sandboxes) != mcpapi.MaxLiveSandboxes {
		t.Fatalf("list: %+v", listed)
	}
	images := map[string]string{}
	for _, s := range listed.Sandboxes {
		images[s.SandboxID] = s.Image
	}
	if images[ids[0]] == images[ids[1]] || !strings.Contains(images[ids[0]], "arn:") {
		t.Fatalf("size_mib 1024 launched from %q, the default from %q", images[ids[0]], images[ids[1]])
	}
	toolErr(t, ctx, a, mcpapi.ToolSandboxCreate, nil, "ERR_PRECONDITION")
	toolErr(t, ctx, a, mcpapi.ToolSandboxCreate, map[string]any{"size_mib": 1024, "image": "x"}, "ERR_INVALID_ARG")

	// Session b has its own allowance and cannot see a's sandboxes.
	var theirs mcpapi.SandboxCreateResult
	call(t, ctx, b, mcpapi.ToolSandboxCreate, nil, &theirs)
	toolErr(t, ctx, b, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": ids[0], "command": "true"}, "ERR_INVALID_ARG")
	toolErr(t, ctx, b, mcpapi.ToolSandboxTerminate, map[string]any{"sandbox_id": ids[0]}, "ERR_INVALID_ARG")

	var term mcpapi.SandboxTerminateResult
	call(t, ctx, a, mcpapi.ToolSandboxTerminate, map[string]any{"sandbox_id": ids[3]}, &term)
	var again mcpapi.SandboxCreateResult
	call(t, ctx, a, mcpapi.ToolSandboxCreate, nil, &again)

	// Suspend and resume keep the sandbox and its files.
	var state mcpapi.SandboxSuspendResult
	call(t, ctx, b, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": theirs.SandboxID, "command": "echo kept > /tmp/k"}, &mcpapi.SandboxExecResult{})
	call(t, ctx, b, mcpapi.ToolSandboxSuspend, map[string]any{"sandbox_id": theirs.SandboxID}, &state)
	if state.State != "SUSPENDED" {
		t.Fatalf("suspend: %+v", state)
	}
	toolErr(t, ctx, b, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": theirs.SandboxID, "command": "true"}, "ERR_PRECONDITION")
	var resumed mcpapi.SandboxResumeResult
	call(t, ctx, b, mcpapi.ToolSandboxResume, map[string]any{"sandbox_id": theirs.SandboxID}, &resumed)
	var read mcpapi.SandboxReadFileResult
	call(t, ctx, b, mcpapi.ToolSandboxReadFile, map[string]any{"sandbox_id": theirs.SandboxID, "path": "/tmp/k"}, &read)
	if resumed.State != "RUNNING" || read.Content != "kept\n" {
		t.Fatalf("resume: %+v, file %q", resumed, read.Content)
	}

	_ = a.Close()
	waitLog(t, p, "the client closed the session): 4 sandboxes, 0 leaked")
	if strings.Contains(p.stderr.String(), theirs.SandboxID+" terminated") {
		t.Fatalf("session a's end terminated session b's %s:\n%s", theirs.SandboxID, p.stderr.String())
	}
	call(t, ctx, b, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": theirs.SandboxID, "command": "true"}, &mcpapi.SandboxExecResult{})
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	p.waitExit(t, time.Minute)
	if want := "the server was interrupted): 1 sandboxes, 0 leaked: " + theirs.SandboxID + " terminated"; !strings.Contains(p.stderr.String(), want) {
		t.Fatalf("the log lacks %q:\n%s", want, p.stderr.String())
	}
}

// Catches: --http listening beyond loopback without being told to, where
// anyone who reaches the port could run commands in the sandboxes.
func TestMCPHTTPIsLoopbackUnlessTold(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:80"} {
		wantFailure(t, cli(t, nil, "", "--json", "mcp", "--local", "--http", addr), taxonomy.KindInvalidArg, "")
	}
}

// TestMCPAgainstAControlEndpoint runs the server without --local, the way
// it drives AWS: a control plane reached through the usual environment
// (here a `microvm emulator`) and a default image by name (MICROVM_IMAGE).
// Catches: the default image not resolved, the AWS path launching nothing
// or leaving its MicroVM up after the session, size_mib accepted where the
// image fixes the class.
func TestMCPAgainstAControlEndpoint(t *testing.T) {
	env, _ := lifecycleEnv(t)
	emu := startEmulator(t, env)
	env = append(env, "AWS_ENDPOINT_URL_LAMBDA_MICROVMS="+emu.url)
	inv := cli(t, env, "", "--json", "build", "--reuse", "--name", "mcp")
	if inv.code != 0 {
		t.Fatalf("build: %s %s", inv.stdout, inv.stderr)
	}
	name := data(envelope(t, inv))["imageName"].(string)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, stdin, stdout, _ := startMCPWith(t, false, append(env, "MICROVM_IMAGE="+name), "mcp")
	cs, _ := connectMCP(t, ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin})
	toolErr(t, ctx, cs, mcpapi.ToolSandboxCreate, map[string]any{"size_mib": 1024}, "ERR_INVALID_ARG")
	var created mcpapi.SandboxCreateResult
	call(t, ctx, cs, mcpapi.ToolSandboxCreate, nil, &created)
	if !strings.Contains(created.Image, ":microvm-image:"+name) {
		t.Fatalf("launched from %q, want the image named %s", created.Image, name)
	}
	var ex mcpapi.SandboxExecResult
	call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": created.SandboxID, "command": "echo via-endpoint"}, &ex)
	if ex.Stdout != "via-endpoint\n" {
		t.Fatalf("exec: %+v", ex)
	}
	guests := guestInits(t, emu.cmd.Process.Pid)
	if len(guests) == 0 {
		t.Fatal("no guest init under the emulator")
	}
	_ = cs.Close()
	p.waitExit(t, time.Minute)
	if want := created.SandboxID + " terminated"; !strings.Contains(p.stderr.String(), want) {
		t.Fatalf("the log lacks %q:\n%s", want, p.stderr.String())
	}
	// The emulator outlives the server: the MicroVM's guest must be gone
	// because the session's teardown terminated it.
	for i := 0; len(stillGuests(guests)) > 0; i++ {
		if i == 200 {
			t.Fatalf("guest inits %v still run under the emulator after the session ended", stillGuests(guests))
		}
		time.Sleep(25 * time.Millisecond)
	}
}
