package engine

import (
	"context"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// platformOf opens the platform the engine's sandbox lives on, for its
// checkpoint store: the engine's own emulator in local mode, else the
// control plane create or attach chose.
func (e *engine) platformOf(ctx context.Context) (*platform.Platform, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.platformLocked(ctx)
}

// platformLocked is platformOf for a caller holding e.mu.
func (e *engine) platformLocked(ctx context.Context) (*platform.Platform, error) {
	emu, region, endpoint := e.emu, e.region, e.controlEndpoint
	if emu != nil {
		return planes.Local(ctx, emu, region, e.a.Env)
	}
	return platform.Open(ctx, platform.Options{Region: region, Endpoint: endpoint, Emulator: planes.EmulatorSide(nil), Getenv: e.a.Env})
}

func saveOptions(paths []string, name string, labels []string, noPause bool) (checkpoint.Options, error) {
	o := checkpoint.Options{Paths: paths, Name: name, NoPause: noPause, Labels: map[string]string{}}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return o, client.Errorf(taxonomy.KindInvalidArg, "", "engine: label %q is not KEY=VALUE", l)
		}
		o.Labels[k] = v
	}
	return o, nil
}

func checkpointData(action, bucket string) cliapi.CheckpointData {
	return cliapi.CheckpointData{Action: action, Bucket: bucket, Checkpoints: []cliapi.CheckpointManifest{}, Removed: []string{}}
}

func (e *engine) checkpoint(ctx context.Context, sb *sandbox.Sandbox, args engineapi.CheckpointArgs) (string, any, error) {
	save, err := saveOptions(args.Paths, args.Name, args.Labels, args.NoPause)
	if err != nil {
		return "", nil, err
	}
	pf, err := e.platformOf(ctx)
	if err != nil {
		return "", nil, err
	}
	m, bucket, err := workflow.CheckpointSandbox(ctx, pf, e.a.Env("MICROVM_BUCKET"), sb, save)
	if err != nil {
		return "", nil, err
	}
	d := checkpointData("save", bucket)
	d.Checkpoint = &m
	return cliapi.TypeCheckpoint, d, nil
}

func (e *engine) checkpointLs(ctx context.Context, args engineapi.CheckpointLsArgs) (string, any, error) {
	pf, err := e.platformOf(ctx)
	if err != nil {
		return "", nil, err
	}
	list, bucket, err := workflow.Checkpoints(ctx, pf, e.a.Env("MICROVM_BUCKET"), args.Name)
	if err != nil {
		return "", nil, err
	}
	d := checkpointData("ls", bucket)
	if list != nil {
		d.Checkpoints = list
	}
	return cliapi.TypeCheckpoint, d, nil
}

func (e *engine) checkpointRm(ctx context.Context, args engineapi.CheckpointRmArgs) (string, any, error) {
	pf, err := e.platformOf(ctx)
	if err != nil {
		return "", nil, err
	}
	m, keys, bucket, err := workflow.RemoveCheckpoint(ctx, pf, e.a.Env("MICROVM_BUCKET"), args.Ref)
	if err != nil {
		return "", nil, err
	}
	d := checkpointData("rm", bucket)
	d.Checkpoint, d.Removed = &m, keys
	return cliapi.TypeCheckpoint, d, nil
}

// checkpointImage bakes a stored checkpoint into a new image (the CLI's
// checkpoint image): client/checkpoint verifies it first, and refuses an
// emulator's image built without its files.
func (e *engine) checkpointImage(ctx context.Context, args engineapi.CheckpointImageArgs) (string, any, error) {
	pf, err := e.platformOf(ctx)
	if err != nil {
		return "", nil, err
	}
	bucket := e.a.Env("MICROVM_BUCKET")
	b, err := pf.BakeImage(ctx, bucket, args.Ref, args.Name)
	if err != nil {
		return "", nil, err
	}
	d := checkpointData("image", bucket)
	d.Checkpoint = &b.Checkpoint
	d.Image = &cliapi.BakedImage{Name: b.Name, ImageARN: b.ImageARN, Version: b.Version, ArtifactURI: b.ArtifactURI}
	return cliapi.TypeCheckpoint, d, nil
}

func (e *engine) fork(ctx context.Context, sb *sandbox.Sandbox, args engineapi.ForkArgs) (string, any, error) {
	count := int(args.Count)
	parallel, err := workflow.CheckFleet(count, int(args.Parallel))
	if err != nil {
		return "", nil, err
	}
	save, err := saveOptions(args.Paths, args.Name, args.Labels, args.NoPause)
	if err != nil {
		return "", nil, err
	}
	timeout := args.TimeoutSec
	if timeout <= 0 {
		timeout = workflow.DefaultTimeout.Seconds()
	}
	launch, err := fleetLaunch(engineapi.CreateArgs{Egress: args.Egress, LaunchEnv: args.LaunchEnv, MaxIdleSec: args.MaxIdleSec,
		SuspendedSec: args.SuspendedSec, MaxDurationSec: args.MaxDurationSec, NetworkAllow: args.NetworkAllow,
		NetworkDenyAll: args.NetworkDenyAll, Secrets: args.Secrets})
	if err != nil {
		return "", nil, err
	}
	pf, err := e.platformOf(ctx)
	if err != nil {
		return "", nil, err
	}
	res, _, err := workflow.Fork(ctx, sb, save, workflow.FromOptions{Bucket: e.a.Env("MICROVM_BUCKET"), Fleet: workflow.FleetOptions{
		Platform: pf, Command: args.Command, Timeout: time.Duration(timeout * float64(time.Second)), Count: count, Parallel: parallel,
		Launch: launch,
		Warn:   func(msg string) { e.a.Warn("%s", msg) },
	}})
	out := render.FleetData(res, count, parallel)
	switch worst := res.Worst(); {
	case err != nil:
		return "", nil, &render.Failure{Err: render.AsClientError(err), Data: out}
	case worst != nil:
		return "", nil, &render.Failure{Err: render.FleetFailure(worst, len(res.Report.Failed()), count), Data: out}
	}
	return cliapi.TypeRunFleet, out, nil
}

// restore launches the engine's sandbox from a checkpoint, as create
// launches one from an image.
func (e *engine) restore(ctx context.Context, args engineapi.RestoreArgs) (string, any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.claim(); err != nil {
		return "", nil, err
	}
	if args.Local {
		// A new emulator's S3 slice is empty: nothing could be restored.
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: restore reads a stored checkpoint, and a local engine's emulator starts with none; restore through a running `microvm emulator` (controlEndpoint) or AWS, or fork a local sandbox")
	}
	region, err := e.regionFor(args.Region)
	if err != nil {
		return "", nil, err
	}
	life := context.WithoutCancel(ctx)
	pf, err := platform.Open(life, platform.Options{Region: region, Endpoint: cplane.ConfiguredEndpoint(args.ControlEndpoint, e.a.Env),
		Emulator: planes.EmulatorSide(nil), Getenv: e.a.Env})
	if err != nil {
		return "", nil, err
	}
	launch, err := launchOptions(engineapi.CreateArgs{Egress: args.Egress, LaunchEnv: args.LaunchEnv, MaxIdleSec: args.MaxIdleSec,
		SuspendedSec: args.SuspendedSec, MaxDurationSec: args.MaxDurationSec, NetworkAllow: args.NetworkAllow,
		NetworkDenyAll: args.NetworkDenyAll, Secrets: args.Secrets})
	if err != nil {
		return "", nil, err
	}
	launch.Version, launch.Wait, launch.ExecutionRoleARN = args.ImageVersion, waitFor(pf.Local(), 0), args.ExecutionRoleARN
	sb, m, err := workflow.Restore(ctx, pf, e.a.Env("MICROVM_BUCKET"), args.Ref, launch, args.AllowOtherVersion)
	if sb != nil {
		e.sb, e.launched = sb, true
	}
	if err != nil {
		return "", nil, err
	}
	e.bound, e.region, e.controlEndpoint, e.imageARN = true, region, pf.Endpoint(), m.ImageARN
	return engineapi.TypeSandbox, e.infoLocked(), nil
}

// checkpointOp decodes and answers the checkpoint ops of the bound sandbox.
func (e *engine) checkpointOp(ctx context.Context, sb *sandbox.Sandbox, req engineapi.Request) (string, any, error) {
	switch req.Op {
	case engineapi.OpCheckpoint:
		var args engineapi.CheckpointArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.checkpoint(ctx, sb, args)
	case engineapi.OpCheckpointLs:
		var args engineapi.CheckpointLsArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.checkpointLs(ctx, args)
	case engineapi.OpCheckpointRm:
		var args engineapi.CheckpointRmArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.checkpointRm(ctx, args)
	case engineapi.OpCheckpointImage:
		var args engineapi.CheckpointImageArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.checkpointImage(ctx, args)
	}
	var args engineapi.ForkArgs
	if err := decodeArgs(req.Args, &args); err != nil {
		return "", nil, err
	}
	return e.fork(ctx, sb, args)
}
