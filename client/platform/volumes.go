package platform

import (
	"context"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Volumes is the volumes in bucket (client/checkpoint), with the default
// generations kept and lease TTL, and a lapsed lease kept by a holder the
// control plane still has up.
func (p *Platform) Volumes(ctx context.Context, bucket string) (*checkpoint.Volumes, error) {
	st, err := p.CheckpointStore(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return &checkpoint.Volumes{Store: st, HolderAlive: checkpoint.HolderAliveOn(p.cp)}, nil
}

// BakeImage makes image name (empty: named after the source image and the
// checkpoint's digest) from checkpoint ref in bucket: checkpoint.BakeImage
// with this platform's control plane, waiting as Wait(0) does.
func (p *Platform) BakeImage(ctx context.Context, bucket, ref, name string) (checkpoint.Baked, error) {
	st, err := p.CheckpointStore(ctx, bucket)
	if err != nil {
		return checkpoint.Baked{}, err
	}
	return checkpoint.BakeImage(ctx, st, ref, checkpoint.BakeOptions{Control: p.cp, Name: name, Wait: p.Wait(0)})
}

// SaveVolumes saves a generation of every volume MicroVM id holds on v,
// reaching it by the agent token its launch installed; with release it
// lets go of their leases too (what a terminate of a kept MicroVM does).
// A MicroVM holding none saves nothing.
func (p *Platform) SaveVolumes(ctx context.Context, v *checkpoint.Volumes, id, agentToken string, port int, release bool) ([]checkpoint.Manifest, error) {
	held, err := v.Held(ctx, id)
	if err != nil || len(held) == 0 {
		return nil, err
	}
	if agentToken == "" {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "MicroVM %s holds volumes, but its agent token is unknown here (not kept by this user with run --keep)", id)
	}
	sb, err := sandbox.Attach(ctx, p.cp, id, agentToken, sandbox.Options{Port: port, Wait: p.Wait(time.Minute)})
	if err != nil {
		return nil, err
	}
	var out []checkpoint.Manifest
	for _, l := range held {
		at, err := v.Resume(ctx, sb, checkpoint.Mount{Name: l.Volume, Path: l.Path})
		if err != nil {
			return out, err
		}
		var m checkpoint.Manifest
		if release {
			var saved *checkpoint.Manifest
			if saved, err = at.Detach(ctx, true); saved != nil {
				m = *saved
			}
		} else {
			m, err = at.Sync(ctx)
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, nil
}
