package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/gen/mcpapi"
)

// Catches, through `microvm mcp --local` over stdio: sandbox_exec's limit
// arguments accepted and dropped (the command would run unlimited). This
// guest has no delegated cgroup, so limits that reach it are refused as a
// tool error naming them, and an exec without limits still runs.
func TestMCPExecLimits(t *testing.T) {
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
}
