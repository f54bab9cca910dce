package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/mcpapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// parseVolumes reads sandbox_create's volumes before anything launches.
func parseVolumes(specs []string) ([]checkpoint.Mount, error) {
	var out []checkpoint.Mount
	seen := map[string]bool{}
	for _, spec := range specs {
		m, err := checkpoint.ParseMount(spec)
		if err != nil {
			return nil, err
		}
		if seen[m.Name] {
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "volume %s is named twice", m.Name)
		}
		seen[m.Name] = true
		out = append(out, m)
	}
	return out, nil
}

// attachVolumes lays mounts into b's sandbox, each under a lease renewed
// while the session lives. A refusal releases the leases taken before it,
// unsaved, and terminates the sandbox (as checkpoint.Volumes.Launch does):
// the caller drops the box.
func (s *mcpServer) attachVolumes(ctx context.Context, st *mcpSession, v *checkpoint.Volumes, b *mcpBox, mounts []checkpoint.Mount) error {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	for _, m := range mounts {
		a, err := v.Attach(ctx, b.sb, m)
		if err != nil {
			for _, done := range b.attached {
				_, _ = done.Detach(context.WithoutCancel(ctx), false)
			}
			b.attached = nil
			b.sb.Terminate(context.WithoutCancel(ctx), sandbox.TeardownOptions{})
			return err
		}
		name, id := m.Name, b.sb.ID()
		a.KeepLeased(st.life, func(err error) { s.logf("%s: renewing the lease of volume %s held by %s: %v", st.name, name, id, err) })
		b.attached = append(b.attached, a)
	}
	return nil
}

// detachVolumes saves a last generation of each volume b holds and
// releases its lease, before a terminate; a failed save is logged, its
// volume left at its previous generation.
func (s *mcpServer) detachVolumes(ctx context.Context, b *mcpBox) {
	b.vmu.Lock()
	defer b.vmu.Unlock()
	for _, a := range b.attached {
		if _, err := a.Detach(context.WithoutCancel(ctx), true); err != nil {
			s.logf("volume %s of %s was not saved: %v", a.Mount().Name, b.sb.ID(), err)
		}
	}
	b.attached = nil
}

// volumeSync is sandbox_volume_sync: a new generation of each volume the
// sandbox holds.
func (s *mcpServer) volumeSync(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxVolumeSyncArgs) (mcpapi.SandboxVolumeSyncResult, string, error) {
	out := mcpapi.SandboxVolumeSyncResult{Saved: []mcpapi.SavedVolume{}}
	b, err := st.box(in.SandboxID)
	if err != nil {
		return out, "", err
	}
	b.vmu.Lock()
	attached := append([]*checkpoint.Attachment(nil), b.attached...)
	b.vmu.Unlock()
	if len(attached) == 0 {
		return out, "", client.Errorf(taxonomy.KindInvalidArg, "", "sandbox %s holds no volume (sandbox_create attaches them with volumes)", in.SandboxID)
	}
	var text strings.Builder
	for _, a := range attached {
		m, err := a.Sync(ctx)
		if err != nil {
			return out, "", err
		}
		out.Saved = append(out.Saved, mcpapi.SavedVolume{Volume: a.Mount().Name, Generation: m.Name, Digest: m.Digest, Files: m.Files})
		fmt.Fprintf(&text, "volume %s: saved generation %s (%d entries)\n", a.Mount().Name, m.Name, m.Files)
	}
	return out, text.String(), nil
}
