package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/gen/mcpapi"
)

// Catches, through `microvm mcp --local` over stdio (one emulator for the
// server's life, so a volume outlives its sandbox): a sandbox_create that
// ignores volumes, a second live holder let through or refused without the
// holder's id, a sandbox_volume_sync that saves nothing, and a
// sandbox_terminate that releases the volume without its last generation.
func TestMCPVolumes(t *testing.T) {
	ctx, cs := stdioMCP(t, 3*time.Minute)
	vol := map[string]any{"volumes": []string{"mcpvol:/data"}}
	var first mcpapi.SandboxCreateResult
	call(t, ctx, cs, mcpapi.ToolSandboxCreate, vol, &first)
	var ex mcpapi.SandboxExecResult
	call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": first.SandboxID, "command": "echo kept > /data/f.txt"}, &ex)

	refused, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpapi.ToolSandboxCreate, Arguments: vol})
	if err != nil || !refused.IsError || !strings.Contains(text(refused), "ERR_CHECKPOINT_REFUSED") || !strings.Contains(text(refused), first.SandboxID) {
		t.Fatalf("a second holder was not refused naming %s: %v %s", first.SandboxID, err, text(refused))
	}
	var synced mcpapi.SandboxVolumeSyncResult
	call(t, ctx, cs, mcpapi.ToolSandboxVolumeSync, map[string]any{"sandbox_id": first.SandboxID}, &synced)
	if len(synced.Saved) != 1 || synced.Saved[0].Volume != "mcpvol" || !strings.HasPrefix(synced.Saved[0].Digest, "sha256:") {
		t.Fatalf("volume sync: %+v", synced)
	}
	call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": first.SandboxID, "command": "echo later >> /data/f.txt"}, &ex)
	var gone mcpapi.SandboxTerminateResult
	call(t, ctx, cs, mcpapi.ToolSandboxTerminate, map[string]any{"sandbox_id": first.SandboxID}, &gone)

	var second mcpapi.SandboxCreateResult
	call(t, ctx, cs, mcpapi.ToolSandboxCreate, vol, &second)
	call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": second.SandboxID, "command": "cat /data/f.txt"}, &ex)
	if ex.Stdout != "kept\nlater\n" {
		t.Fatalf("the volume after terminate and relaunch: %q", ex.Stdout)
	}
}
