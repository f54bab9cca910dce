package workflow

import (
	"context"

	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
)

// FromOptions are a fleet launched from a checkpoint (`run --from`): every
// MicroVM starts from the checkpoint's image and version with its files
// laid before its command runs.
type FromOptions struct {
	Fleet FleetOptions
	// Bucket is the checkpoint store's (Platform.CheckpointStore).
	Bucket string
	// Ref is the checkpoint's name or digest.
	Ref string
	// AllowOtherVersion lays the files into another image version than
	// the checkpoint was taken on (Fleet.Image names it).
	AllowOtherVersion bool
}

// FleetFrom verifies the checkpoint on this host once, before anything is
// launched (a truncated, corrupted, foreign or other-version checkpoint is
// refused with ERR_CHECKPOINT_REFUSED and nothing runs), then runs Fleet:
// Count MicroVMs from the checkpoint's image, each restored before its
// command, with the fleet's outcomes, teardown and one cost report. An
// image the caller names replaces the checkpoint's only with
// AllowOtherVersion.
func FleetFrom(ctx context.Context, o FromOptions) (FleetResult, checkpoint.Manifest, error) {
	store, err := o.Fleet.Platform.CheckpointStore(ctx, o.Bucket)
	if err != nil {
		return FleetResult{Leaked: []string{}}, checkpoint.Manifest{}, err
	}
	prep, err := store.Prepare(ctx, o.Ref)
	if err != nil {
		return FleetResult{Leaked: []string{}}, checkpoint.Manifest{}, err
	}
	defer prep.Close()
	m := prep.Manifest()
	fo := o.Fleet
	if fo.Image.Identifier == "" {
		fo.Image.Identifier, fo.Image.Version = m.ImageARN, m.ImageVersion
	}
	base := sandbox.LaunchOn(fo.Platform.Control())
	fo.Launcher = func(ctx context.Context, so sandbox.Options) (*sandbox.Sandbox, error) {
		return checkpoint.RestorePrepared(ctx, prep, checkpoint.RestoreOptions{Launch: base, Options: so, AllowOtherVersion: o.AllowOtherVersion})
	}
	res, err := Fleet(ctx, fo)
	return res, m, err
}

// Restore launches one MicroVM from the checkpoint ref with its files laid
// (checkpoint.Restore, verified first); so names the launch (its Image and
// Version default to the checkpoint's). The caller owns the sandbox.
func Restore(ctx context.Context, p *platform.Platform, bucket, ref string, so sandbox.Options, allowOtherVersion bool) (*sandbox.Sandbox, checkpoint.Manifest, error) {
	store, err := p.CheckpointStore(ctx, bucket)
	if err != nil {
		return nil, checkpoint.Manifest{}, err
	}
	prep, err := store.Prepare(ctx, ref)
	if err != nil {
		return nil, checkpoint.Manifest{}, err
	}
	defer prep.Close()
	sb, err := checkpoint.RestorePrepared(ctx, prep, checkpoint.RestoreOptions{Launch: sandbox.LaunchOn(p.Control()), Options: so, AllowOtherVersion: allowOtherVersion})
	return sb, normal(prep.Manifest()), err
}

// Fork checkpoints sb into the platform's store and runs o.Fleet from it
// (FleetFrom): sb keeps running and the checkpoint stays stored.
func Fork(ctx context.Context, sb *sandbox.Sandbox, save checkpoint.Options, o FromOptions) (FleetResult, checkpoint.Manifest, error) {
	store, err := o.Fleet.Platform.CheckpointStore(ctx, o.Bucket)
	if err != nil {
		return FleetResult{Leaked: []string{}}, checkpoint.Manifest{}, err
	}
	m, err := checkpoint.Checkpoint(ctx, sb, store, save)
	if err != nil {
		return FleetResult{Leaked: []string{}}, m, err
	}
	o.Ref = m.Digest
	if m.Name != "" {
		o.Ref = m.Name
	}
	res, _, err := FleetFrom(ctx, o)
	return res, normal(m), err
}
