package workflow

import (
	"context"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// attachVolumes attaches o.Mounts to sb in order, appending each to
// *attached; a refusal detaches the ones before it without saving (the
// run failed before its command, so nothing of theirs changed).
func attachVolumes(ctx context.Context, o Options, sb *sandbox.Sandbox, attached *[]*checkpoint.Attachment) error {
	if len(o.Mounts) == 0 {
		return nil
	}
	if o.Volumes == nil {
		return client.Errorf(taxonomy.KindInvalidArg, "", "volumes to attach but no volume store")
	}
	for _, m := range o.Mounts {
		a, err := o.Volumes.Attach(ctx, sb, m)
		if err != nil {
			for _, done := range *attached {
				_, _ = done.Detach(context.WithoutCancel(ctx), false)
			}
			*attached = nil
			return err
		}
		a.KeepLeased(ctx, nil)
		*attached = append(*attached, a)
	}
	return nil
}

// detachVolumes saves a generation of each attached volume and releases
// its lease; a save that fails is warned of, its volume left at its
// previous generation.
func detachVolumes(ctx context.Context, o Options, attached []*checkpoint.Attachment) []checkpoint.Manifest {
	var saved []checkpoint.Manifest
	for _, a := range attached {
		m, err := a.Detach(context.WithoutCancel(ctx), true)
		if m != nil {
			saved = append(saved, *m)
		}
		if err != nil {
			o.warn("volume %s was not saved: %v", a.Mount().Name, err)
		}
	}
	return saved
}
