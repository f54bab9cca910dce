package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/gen/mcpapi"
)

// Catches, through `microvm mcp --local` over stdio: sandbox_exec's limit
// (and user and group) arguments accepted and dropped (the command would run unlimited). This
// guest has no delegated cgroup, so limits that reach it are refused as a
// tool error naming them, and an exec without limits still runs.
func TestMCPExecLimitsUserGroup(t *testing.T) {
	ctx, cs := stdioMCP(t, 2*time.Minute)
	var made mcpapi.SandboxCreateResult
	call(t, ctx, cs, mcpapi.ToolSandboxCreate, map[string]any{}, &made)
	for _, arg := range []string{"memory_limit_bytes", "cpu_millicores", "pids_limit"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpapi.ToolSandboxExec, Arguments: map[string]any{"sandbox_id": made.SandboxID, "command": "true", arg: 64 << 20}})
		if err != nil || !res.IsError || !strings.Contains(text(res), "limit") {
			t.Fatalf("%s: an exec with a limit this guest cannot apply was not refused: %v %s", arg, err, text(res))
		}
	}
	var ex mcpapi.SandboxExecResult
	call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": made.SandboxID, "command": "echo unlimited"}, &ex)
	if ex.Stdout != "unlimited\n" {
		t.Fatalf("an exec without limits: %+v", ex)
	}
	// user and group reach the guest. Catches: the arguments accepted and
	// dropped (the command would run as the daemon's root).
	call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": made.SandboxID, "command": "id -u; id -g", "user": 65534, "group": 65534}, &ex)
	if ex.Stdout != "65534\n65534\n" {
		t.Fatalf("an exec as 65534:65534 ran as %q", ex.Stdout)
	}
}
