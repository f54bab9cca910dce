package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/mcpapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// checkpoint is sandbox_checkpoint: client/workflow's CheckpointSandbox into
// the bucket MICROVM_BUCKET names, or the local emulator's S3 slice.
func (s *mcpServer) checkpoint(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxCheckpointArgs) (mcpapi.SandboxCheckpointResult, string, error) {
	b, err := st.box(in.SandboxID)
	if err != nil {
		return mcpapi.SandboxCheckpointResult{}, "", err
	}
	m, _, err := workflow.CheckpointSandbox(ctx, s.p.Platform, s.bucket(), b.sb, checkpoint.Options{Paths: in.Paths, Name: in.Name})
	if err != nil {
		return mcpapi.SandboxCheckpointResult{}, "", err
	}
	out := mcpapi.SandboxCheckpointResult{Name: m.Name, Digest: m.Digest, Paths: m.Paths, Files: m.Files, SizeBytes: m.Size}
	return out, fmt.Sprintf("checkpoint %s of %s: %d entries, %d bytes stored", m.Digest, strings.Join(m.Paths, ", "), m.Files, m.Size), nil
}

// checkpointImage is checkpoint_image: client/checkpoint's BakeImage on
// the session's platform, which refuses (and removes) an emulator's image
// built without the files.
func (s *mcpServer) checkpointImage(ctx context.Context, _ *mcp.CallToolRequest, _ *mcpSession, in mcpapi.CheckpointImageArgs) (mcpapi.CheckpointImageResult, string, error) {
	b, err := s.p.Platform.BakeImage(ctx, s.bucket(), in.Checkpoint, in.Name)
	if err != nil {
		return mcpapi.CheckpointImageResult{}, "", err
	}
	out := mcpapi.CheckpointImageResult{Image: b.Name, ImageARN: b.ImageARN, Version: b.Version, Checkpoint: b.Checkpoint.Digest}
	return out, fmt.Sprintf("image %s version %s starts with checkpoint %s's files", b.Name, b.Version, b.Checkpoint.Digest), nil
}

// fork is sandbox_fork: checkpoint then workflow.FleetFrom, each copy torn
// down after its command.
func (s *mcpServer) fork(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxForkArgs) (mcpapi.SandboxForkResult, string, error) {
	b, err := st.box(in.SandboxID)
	if err != nil {
		return mcpapi.SandboxForkResult{}, "", err
	}
	parallel, err := workflow.CheckFleet(int(in.Count), 0)
	if err != nil {
		return mcpapi.SandboxForkResult{}, "", err
	}
	timeout := workflow.DefaultTimeout
	if in.TimeoutSec > 0 {
		timeout = time.Duration(in.TimeoutSec * float64(time.Second))
	}
	// Each copy is launched as sandbox_create would launch it with these
	// arguments, not with the forked sandbox's own.
	net, err := s.launchNetwork(in.NetworkAllow, in.NetworkDenyAll, in.SecretsFromEnv)
	if err != nil {
		return mcpapi.SandboxForkResult{}, "", err
	}
	res, m, err := workflow.Fork(ctx, b.sb, checkpoint.Options{Paths: in.Paths}, workflow.FromOptions{Bucket: s.bucket(), Fleet: workflow.FleetOptions{
		Platform: s.p.Platform, Command: in.Command, Timeout: timeout, Count: int(in.Count), Parallel: parallel,
		Launch: workflow.Launch{ExecutionRoleARN: s.role, Env: in.Env, Egress: in.Egress, Network: net, MaxIdle: workflow.DefaultMaxIdle,
			SuspendedFor: workflow.DefaultSuspendedFor, MaxDuration: workflow.DefaultMaxDuration, Port: taxonomy.DefaultAgentPort},
	}})
	if err != nil && m.Digest == "" {
		return mcpapi.SandboxForkResult{}, "", err
	}
	d := render.FleetData(res, int(in.Count), parallel)
	out := mcpapi.SandboxForkResult{Checkpoint: m.Digest, Runs: []mcpapi.ForkRun{}, Leaked: d.Leaked}
	var text strings.Builder
	fmt.Fprintf(&text, "forked checkpoint %s into %d\n", m.Digest, in.Count)
	for _, r := range d.Runs {
		fr := mcpapi.ForkRun{Index: r.Index, SandboxID: r.MicrovmID, ExitCode: r.ExitCode, Stdout: clipped(r.Stdout), Stderr: clipped(r.Stderr), Error: r.Error}
		out.Runs = append(out.Runs, fr)
		exit := "none"
		if r.ExitCode != nil {
			exit = fmt.Sprint(*r.ExitCode)
		}
		fmt.Fprintf(&text, "[%d] %s exit %s %s\n%s", r.Index, r.MicrovmID, exit, r.Error, fr.Stdout)
	}
	if err != nil && len(out.Runs) == 0 {
		return mcpapi.SandboxForkResult{}, "", err
	}
	return out, text.String(), nil
}

// clipped keeps the first MaxOutputBytes of a copy's output.
func clipped(s string) string {
	if len(s) > mcpapi.MaxOutputBytes {
		return s[:mcpapi.MaxOutputBytes]
	}
	return s
}

// bucket is where the server keeps checkpoints: MICROVM_BUCKET, else (on
// an emulator) its S3 slice's default.
func (s *mcpServer) bucket() string {
	if s.p.Getenv == nil {
		return ""
	}
	return s.p.Getenv("MICROVM_BUCKET")
}
