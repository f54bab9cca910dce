package engine

import (
	"context"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// parseMounts reads create's volumes before anything launches, refusing a
// malformed entry or a volume named twice.
func parseMounts(specs []string) ([]checkpoint.Mount, error) {
	var out []checkpoint.Mount
	seen := map[string]bool{}
	for _, s := range specs {
		m, err := checkpoint.ParseMount(s)
		if err != nil {
			return nil, err
		}
		if seen[m.Name] {
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: volume %s is named twice", m.Name)
		}
		seen[m.Name] = true
		out = append(out, m)
	}
	return out, nil
}

// volumesLocked is the volume store of the engine's platform (MICROVM_BUCKET,
// else an emulator's microvm-checkpoints), opened once. The caller holds e.mu.
func (e *engine) volumesLocked(ctx context.Context) (*checkpoint.Volumes, error) {
	if e.vols != nil {
		return e.vols, nil
	}
	pf, err := e.platformLocked(ctx)
	if err != nil {
		return nil, err
	}
	v, err := pf.Volumes(ctx, e.a.Env("MICROVM_BUCKET"))
	if err != nil {
		return nil, err
	}
	e.vols = v
	return v, nil
}

// attachVolumesLocked lays mounts into the just-launched sb, each under a
// lease renewed for the engine's life. A refusal releases the leases taken
// before it, unsaved, and terminates sb, so a refused create leaves nothing
// running or leased (as checkpoint.Volumes.Launch does).
func (e *engine) attachVolumesLocked(ctx context.Context, v *checkpoint.Volumes, sb *sandbox.Sandbox, mounts []checkpoint.Mount) error {
	life := context.WithoutCancel(ctx)
	for _, m := range mounts {
		a, err := v.Attach(ctx, sb, m)
		if err != nil {
			for _, done := range e.attached {
				_, _ = done.Detach(life, false)
			}
			e.attached = nil
			sb.Terminate(life, sandbox.TeardownOptions{})
			return err
		}
		name := m.Name
		a.KeepLeased(life, func(err error) { e.a.Warn("engine: renewing the lease of volume %s: %v", name, err) })
		e.attached = append(e.attached, a)
	}
	return nil
}

// detachVolumesLocked saves a last generation of each held volume and
// releases its lease, before a terminate: a failed save is warned of, its
// volume left at its previous generation (the teardown goes on).
func (e *engine) detachVolumesLocked(ctx context.Context) []checkpoint.Manifest {
	var saved []checkpoint.Manifest
	for _, a := range e.attached {
		m, err := a.Detach(context.WithoutCancel(ctx), true)
		if m != nil {
			saved = append(saved, *m)
		}
		if err != nil {
			e.a.Warn("engine: volume %s was not saved: %v", a.Mount().Name, err)
		}
	}
	e.attached = nil
	return saved
}

func volumeData(action string) cliapi.VolumeData {
	return cliapi.VolumeData{Action: action, Volumes: []cliapi.VolumeInfo{}, Removed: []string{}, Saved: []cliapi.CheckpointManifest{}}
}

// manifestOut is m with every array present, as the envelope's keys are.
func manifestOut(m checkpoint.Manifest) cliapi.CheckpointManifest {
	if m.Paths == nil {
		m.Paths = []string{}
	}
	if m.Labels == nil {
		m.Labels = []cliapi.CheckpointLabel{}
	}
	if m.ChangedUnderneath == nil {
		m.ChangedUnderneath = []string{}
	}
	return m
}

// volumeOp answers volume_sync, volume_ls and volume_rm.
func (e *engine) volumeOp(ctx context.Context, req engineapi.Request) (string, any, error) {
	// The lock covers the engine's state, not the transfers: a long sync
	// must not hold up info or a run.
	e.mu.Lock()
	attached := append([]*checkpoint.Attachment(nil), e.attached...)
	var v *checkpoint.Volumes
	var verr error
	if req.Op != engineapi.OpVolumeSync {
		v, verr = e.volumesLocked(ctx)
	}
	e.mu.Unlock()
	switch req.Op {
	case engineapi.OpVolumeSync:
		if err := decodeArgs(req.Args, &engineapi.VolumeSyncArgs{}); err != nil {
			return "", nil, err
		}
		if len(attached) == 0 {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: this sandbox holds no volume (create attaches them with volumes)")
		}
		d := volumeData("sync")
		for _, a := range attached {
			m, err := a.Sync(ctx)
			if err != nil {
				return "", nil, err
			}
			d.Saved = append(d.Saved, manifestOut(m))
		}
		return cliapi.TypeVolume, d, nil
	case engineapi.OpVolumeLs:
		if err := decodeArgs(req.Args, &engineapi.VolumeLsArgs{}); err != nil {
			return "", nil, err
		}
		if verr != nil {
			return "", nil, verr
		}
		infos, err := v.List(ctx)
		if err != nil {
			return "", nil, err
		}
		d := volumeData("ls")
		for _, i := range infos {
			vi := cliapi.VolumeInfo{Name: i.Name, Generations: []cliapi.CheckpointManifest{}, LeaseExpired: i.Expired}
			for _, g := range i.Generations {
				vi.Generations = append(vi.Generations, manifestOut(g))
			}
			if i.Lease != nil {
				holder, exp := i.Lease.Holder, i.Lease.Expires.UTC().Format(time.RFC3339)
				vi.Holder, vi.LeaseExpires = &holder, &exp
			}
			d.Volumes = append(d.Volumes, vi)
		}
		return cliapi.TypeVolume, d, nil
	}
	var args engineapi.VolumeRmArgs
	if err := decodeArgs(req.Args, &args); err != nil {
		return "", nil, err
	}
	if verr != nil {
		return "", nil, verr
	}
	d := volumeData("rm")
	removed, err := v.Remove(ctx, args.Name)
	d.Removed = append(d.Removed, removed...)
	if err != nil {
		return "", nil, err
	}
	return cliapi.TypeVolume, d, nil
}
