package workflow

import (
	"context"

	"github.com/microvms/microvms/client/checkpoint"
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
