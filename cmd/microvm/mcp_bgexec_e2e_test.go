package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/gen/mcpapi"
)

// toolError calls name and wants a tool error whose text holds want.
func toolError(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, want string) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err == nil && !res.IsError {
		t.Fatalf("%s %v was not refused", name, args)
	}
	if got := errText(res, err); !strings.Contains(got, want) {
		t.Fatalf("%s %v: refused as %q, want it to name %q", name, args, got, want)
	}
}

func errText(res *mcp.CallToolResult, err error) string {
	if err != nil {
		return err.Error()
	}
	return text(res)
}

// A background command through `microvm mcp --local` over stdio: started,
// read from offset 0 and then from next_offset (nothing repeated, nothing
// skipped, stdout and stderr on one count), read in two calls when it
// passes the per-call cap, stopped, and its end read back. Catches: the
// offset ignored (a second read repeats the first), next_offset counting
// one stream only, the cap dropping bytes instead of leaving them for the
// next call, sandbox_exec_kill accepted and dropped (the command would run
// on), and the exit lost.
func TestMCPBackgroundExec(t *testing.T) {
	ctx, cs := stdioMCP(t, 3*time.Minute)
	var made mcpapi.SandboxCreateResult
	call(t, ctx, cs, mcpapi.ToolSandboxCreate, map[string]any{}, &made)
	id := made.SandboxID

	var started mcpapi.SandboxExecStartResult
	call(t, ctx, cs, mcpapi.ToolSandboxExecStart, map[string]any{"sandbox_id": id,
		"command": "echo one; echo err >&2; echo two; exec sleep 120"}, &started)
	if started.ExecID == "" || started.SandboxID != id {
		t.Fatalf("started %+v", started)
	}
	// Read until all 12 bytes arrived (the command prints them at once; a
	// loaded machine may take a moment), then once more from there.
	var got mcpapi.SandboxExecOutputResult
	var stdout, stderr string
	offset := int64(0)
	for i := 0; i < 20 && offset < 12; i++ {
		call(t, ctx, cs, mcpapi.ToolSandboxExecOutput, map[string]any{"sandbox_id": id, "exec_id": started.ExecID, "offset": offset, "wait_sec": 1}, &got)
		stdout, stderr, offset = stdout+got.Stdout, stderr+got.Stderr, got.NextOffset
	}
	if stdout != "one\ntwo\n" || stderr != "err\n" || offset != 12 || !got.Running || got.LostBytes != 0 {
		t.Fatalf("read %q / %q to offset %d (last %+v), want one two / err to 12, running", stdout, stderr, offset, got)
	}
	call(t, ctx, cs, mcpapi.ToolSandboxExecOutput, map[string]any{"sandbox_id": id, "exec_id": started.ExecID, "offset": offset}, &got)
	if got.Stdout != "" || got.Stderr != "" || got.NextOffset != 12 || !got.Running {
		t.Fatalf("a read from next_offset of a quiet command: %+v", got)
	}

	var killed mcpapi.SandboxExecKillResult
	call(t, ctx, cs, mcpapi.ToolSandboxExecKill, map[string]any{"sandbox_id": id, "exec_id": started.ExecID}, &killed)
	if !killed.Delivered {
		t.Fatalf("kill of a running command: %+v", killed)
	}
	call(t, ctx, cs, mcpapi.ToolSandboxExecOutput, map[string]any{"sandbox_id": id, "exec_id": started.ExecID, "offset": offset, "wait_sec": 30}, &got)
	if got.Running || got.Signal == nil || *got.Signal != 15 || got.ExitCode != nil {
		t.Fatalf("after sandbox_exec_kill: %+v, want ended by signal 15", got)
	}

	// Past the cap: 100,000 bytes come in two reads, every byte once.
	const n = 100000
	call(t, ctx, cs, mcpapi.ToolSandboxExecStart, map[string]any{"sandbox_id": id,
		"command": "head -c 100000 /dev/zero | tr '\\0' a; exec sleep 120"}, &started)
	var all strings.Builder
	offset = 0
	capped := false
	for i := 0; i < 40 && offset < n; i++ {
		call(t, ctx, cs, mcpapi.ToolSandboxExecOutput, map[string]any{"sandbox_id": id, "exec_id": started.ExecID, "offset": offset, "wait_sec": 1}, &got)
		if len(got.Stdout) > mcpapi.MaxOutputBytes {
			t.Fatalf("one read returned %d bytes, past the %d cap", len(got.Stdout), mcpapi.MaxOutputBytes)
		}
		capped = capped || got.More
		all.WriteString(got.Stdout)
		offset = got.NextOffset
	}
	if all.String() != strings.Repeat("a", n) || offset != n || !capped {
		t.Fatalf("read %d bytes to offset %d (a cap reported: %v), want %d once each", all.Len(), offset, capped, n)
	}
	// One signal, sent once: TERM by name.
	call(t, ctx, cs, mcpapi.ToolSandboxExecKill, map[string]any{"sandbox_id": id, "exec_id": started.ExecID, "signal": "TERM"}, &killed)
	call(t, ctx, cs, mcpapi.ToolSandboxExecOutput, map[string]any{"sandbox_id": id, "exec_id": started.ExecID, "offset": offset, "wait_sec": 30}, &got)
	if !killed.Delivered || got.Running || got.Signal == nil || *got.Signal != 15 {
		t.Fatalf("after TERM: %+v, %+v", killed, got)
	}

	// Bad input is refused, naming what is wrong.
	toolError(t, ctx, cs, mcpapi.ToolSandboxExecOutput, map[string]any{"sandbox_id": id, "exec_id": started.ExecID, "wait_sec": mcpapi.MaxWaitSec + 1}, "wait_sec")
	toolError(t, ctx, cs, mcpapi.ToolSandboxExecOutput, map[string]any{"sandbox_id": id, "exec_id": ""}, "exec_id")
	toolError(t, ctx, cs, mcpapi.ToolSandboxExecKill, map[string]any{"sandbox_id": id, "exec_id": started.ExecID, "signal": "STOP"}, "signal")
	toolError(t, ctx, cs, mcpapi.ToolSandboxExecStart, map[string]any{"sandbox_id": "nope", "command": "true"}, "nope")
}
