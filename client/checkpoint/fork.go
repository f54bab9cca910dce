package checkpoint

import (
	"context"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ForkOptions describe a fork: the checkpoint taken of the source and the
// fleet its copies run as.
type ForkOptions struct {
	// Checkpoint is the checkpoint of the source sandbox.
	Checkpoint Options
	// Fleet is the fleet of copies: Parallel, Launch, Options (Image and
	// Version default to the checkpoint's), PerSandbox, Teardown,
	// MaxBackoff. Count is the fork's n.
	Fleet sandbox.FleetOptions
	// AllowOtherVersion, as for Restore.
	AllowOtherVersion bool
}

// Fork checkpoints sb and runs task in n new sandboxes, each launched from
// the checkpoint's image and version with its files laid before task
// starts. It is sandbox.RunMany underneath: at most Fleet.Parallel alive,
// each torn down after its task, a throttled RunMicrovm launched again
// after a backoff, and the report's Cost prices the fleet as one. The
// source keeps running; its commands are paused only while the checkpoint
// reads (unless Checkpoint.NoPause). The checkpoint stays in store.
func Fork(ctx context.Context, sb *sandbox.Sandbox, store *Store, n int, o ForkOptions, task sandbox.Task) (Manifest, sandbox.FleetReport, error) {
	if n < 1 || n > taxonomy.MaxFleetCount {
		return Manifest{}, sandbox.FleetReport{}, client.Errorf(taxonomy.KindInvalidArg, "", "a fork into %d sandboxes is outside 1..%d", n, taxonomy.MaxFleetCount)
	}
	if task == nil || o.Fleet.Launch == nil {
		return Manifest{}, sandbox.FleetReport{}, client.Errorf(taxonomy.KindInvalidArg, "", "a fork needs a Task and a Launcher")
	}
	m, err := Checkpoint(ctx, sb, store, o.Checkpoint)
	if err != nil {
		return Manifest{}, sandbox.FleetReport{}, err
	}
	ro := RestoreOptions{Options: o.Fleet.Options, AllowOtherVersion: o.AllowOtherVersion}
	if err := checkVersion(m, &ro); err != nil {
		return m, sandbox.FleetReport{}, err
	}
	v, err := store.fetch(ctx, m)
	if err != nil {
		return m, sandbox.FleetReport{}, err
	}
	defer v.close()
	p := &Prepared{v: v}
	fleet := o.Fleet
	fleet.Count = n
	fleet.Options = ro.Options
	launch := o.Fleet.Launch
	// Laying the files is part of the launch, so RunMany's teardown covers
	// a sandbox whose files failed to land, and the task never sees one
	// without them.
	fleet.Launch = func(ctx context.Context, so sandbox.Options) (*sandbox.Sandbox, error) {
		s, err := launch(ctx, so)
		if err != nil {
			return s, err
		}
		return s, Lay(ctx, s, p)
	}
	rep, err := sandbox.RunMany(ctx, fleet, task)
	return m, rep, err
}
