package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/gen/mcpapi"
)

// Catches, through `microvm mcp --local` over stdio: a sandbox_checkpoint
// that saves nothing or other paths, a sandbox_fork whose copies miss the
// files or share one copy (each writes a marker the other must not see),
// a copy's non-zero exit turned into a tool error, and a default of "/"
// saved instead of refused naming the paths to pass, and a checkpoint_image
// that hands back an image without the files.
func TestMCPCheckpointAndFork(t *testing.T) {
	ctx, cs := stdioMCP(t, 3*time.Minute)
	var made mcpapi.SandboxCreateResult
	call(t, ctx, cs, mcpapi.ToolSandboxCreate, map[string]any{}, &made)
	id := made.SandboxID
	dir := "/tmp/ckpt-mcp"
	var ex mcpapi.SandboxExecResult
	call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": id, "command": "mkdir -p " + dir + "/src && echo one > " + dir + "/src/a.txt"}, &ex)

	refused, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpapi.ToolSandboxCheckpoint, Arguments: map[string]any{"sandbox_id": id}})
	if err != nil || !refused.IsError || !strings.Contains(text(refused), "ERR_INVALID_ARG") || !strings.Contains(text(refused), "paths") {
		t.Fatalf("a checkpoint of the default / was not refused naming paths: %v %s", err, text(refused))
	}
	var cp mcpapi.SandboxCheckpointResult
	call(t, ctx, cs, mcpapi.ToolSandboxCheckpoint, map[string]any{"sandbox_id": id, "paths": []string{dir}, "name": "mcp-base"}, &cp)
	if cp.Name != "mcp-base" || len(cp.Paths) != 1 || cp.Paths[0] != dir || cp.Files < 3 || !strings.HasPrefix(cp.Digest, "sha256:") {
		t.Fatalf("checkpoint: %+v", cp)
	}
	var fk mcpapi.SandboxForkResult
	// env reaches each copy (sandbox_create's launch arguments): the wrong
	// edit is a fork that launches its copies with none.
	call(t, ctx, cs, mcpapi.ToolSandboxFork, map[string]any{"sandbox_id": id, "count": 2, "paths": []string{dir}, "env": map[string]string{"WHO": "a copy"},
		"command": "cat " + dir + "/src/a.txt; ls " + dir + "; echo \"$WHO\"; touch " + dir + "/mine; exit 3"}, &fk)
	if len(fk.Runs) != 2 || len(fk.Leaked) != 0 || fk.Checkpoint == "" {
		t.Fatalf("fork: %+v", fk)
	}
	for _, r := range fk.Runs {
		if r.ExitCode == nil || *r.ExitCode != 3 || r.Stdout != "one\nsrc\na copy\n" || r.SandboxID == id {
			t.Fatalf("a copy: %+v", r)
		}
	}
	// Refused as sandbox_create refuses it, before any copy launches.
	bad, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpapi.ToolSandboxFork, Arguments: map[string]any{"sandbox_id": id, "count": 1,
		"command": "true", "paths": []string{dir}, "network_allow": []string{"example.com"}, "network_deny_all": true}})
	if err != nil || !bad.IsError || !strings.Contains(text(bad), "ERR_INVALID_ARG") {
		t.Fatalf("a fork with an allow list and deny-all was not refused: %v %s", err, text(bad))
	}
	call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": id, "command": "ls " + dir}, &ex)
	if ex.Stdout != "src\n" {
		t.Fatalf("the original changed under its forks: %q", ex.Stdout)
	}
	// checkpoint_image reaches the library's bake, whose refusal here (this
	// local emulator has no base image for FROM, nor an artifact for its
	// default image) is a tool error, not an image without the files.
	baked, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpapi.ToolCheckpointImage, Arguments: map[string]any{"checkpoint": "mcp-base"}})
	if err != nil || !baked.IsError || !strings.Contains(text(baked), "ERR_PRECONDITION") {
		t.Fatalf("checkpoint_image on an emulator without a base was not refused: %v %s", err, text(baked))
	}
}
