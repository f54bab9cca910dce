package engine

import (
	"context"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/setup"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// resolveImage is workflow.ResolveImage, saying on stderr when a name was
// looked up, as the commands do.
func (e *engine) resolveImage(ctx context.Context, pf *platform.Platform, image string) (string, string, error) {
	arn, name, err := workflow.ResolveImage(ctx, pf, image)
	if err == nil && !strings.HasPrefix(image, "arn:") {
		e.a.Progress("resolved image name %s to %s", image, arn)
	}
	return arn, name, err
}

// buildImage builds an image on pf (the engine's emulator's, in local mode)
// from dockerfile, or the default stanza when empty, at a size class, as
// `microvm build` does: the role and bucket from the environment, else the
// setup.env written for pf.
func (e *engine) buildImage(ctx context.Context, pf *platform.Platform, dockerfile, agentd string, memoryMiB int, rec *ledger.Record) (*build.Result, error) {
	infra := setup.Infra{}.Filled("", e.a.Env, pf.Endpoint(), pf.Region().String())
	return e.buildWith(ctx, pf, dockerfile, agentd, memoryMiB, infra, rec)
}

func (e *engine) buildWith(ctx context.Context, pf *platform.Platform, dockerfile, agentd string, memoryMiB int, infra setup.Infra, rec *ledger.Record) (*build.Result, error) {
	daemon, err := planes.Daemon(pf, e.emu, "", agentd, e.a.Env)
	if err != nil {
		return nil, err
	}
	size, err := client.SizeClassFromBaseline(memoryMiB)
	if err != nil {
		return nil, err
	}
	if dockerfile != "" && pf.Local() {
		defer func() {
			for _, w := range planes.UnperformedWarnings(e.emu != nil, dockerfile) {
				e.a.Warn("%s", w)
			}
		}()
	}
	return workflow.Build(ctx, pf, workflow.BuildOptions{
		Daemon: daemon, Dockerfile: dockerfile, Size: size, Port: taxonomy.DefaultAgentPort,
		Bucket: infra.Bucket, BuildRoleARN: infra.BuildRoleARN,
		ArtifactDir: func() (string, error) { return workflow.ArtifactDir(e.a.Env) },
		Machine:     planes.GuestMachine(pf), Ledger: rec,
	}, func(name string) { e.a.Progress("building image %s (%s)", name, size) })
}

// runMany answers run_many with client/workflow's Fleet, as `run --count`
// does: the same defaults, refusals and envelope; the environment stands in
// for the flags' variables.
func (e *engine) runMany(ctx context.Context, args engineapi.RunManyArgs) (string, any, error) {
	if args.Count < 1 {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: run_many needs count 1..%d, got %d", taxonomy.MaxFleetCount, args.Count)
	}
	count := int(args.Count)
	parallel, err := workflow.CheckFleet(count, int(args.Parallel))
	if err != nil {
		return "", nil, err
	}
	timeout := args.TimeoutSec
	if timeout == 0 {
		timeout = workflow.DefaultTimeout.Seconds()
	}
	if timeout < 0 {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "--timeout must be positive seconds, got %v", timeout)
	}
	// Checked before any emulator starts or image builds.
	launch, err := fleetLaunch(engineapi.CreateArgs{Egress: args.Egress, LaunchEnv: args.LaunchEnv, MaxIdleSec: args.MaxIdleSec,
		SuspendedSec: args.SuspendedSec, MaxDurationSec: args.MaxDurationSec, NetworkAllow: args.NetworkAllow,
		NetworkDenyAll: args.NetworkDenyAll, Secrets: args.Secrets})
	if err != nil {
		return "", nil, err
	}
	if args.Command != "" && timeout > launch.MaxDuration.Seconds() {
		e.a.Warn("--timeout %vs is longer than --max-duration-sec %d: the platform ends the VM at its maximum duration, before the command's timeout (finding max-duration)", timeout, int(launch.MaxDuration.Seconds()))
	}
	size, err := client.SizeClassFromBaseline(taxonomy.DefaultBaselineMiB)
	if err != nil {
		return "", nil, err
	}
	env := func(v, name string) string {
		if v == "" {
			v = e.a.Env(name)
		}
		return v
	}
	dir := e.a.Env("MICROVM_STATE_DIR")
	if dir == "" {
		if dir, err = ledger.DefaultDir(); err != nil {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "%v; pass --state-dir", err)
		}
	}
	region, err := e.regionFor(args.Region)
	if err != nil {
		return "", nil, err
	}
	var pf *platform.Platform
	var emu *embedded.Emulator
	if args.Local {
		// The fleet's own emulator, gone when the fleet is.
		emu, err = embedded.Start(ctx, embedded.Options{Agentd: args.Agentd, Region: region, Getenv: e.a.Env,
			Warn: func(msg string) { e.a.Warn("%s", msg) }})
		if err != nil {
			return "", nil, err
		}
		defer emu.Close()
		e.a.Progress("local emulator serving %s (guests run %s)", emu.URL, emu.Agentd)
		if pf, err = planes.Local(ctx, emu, region, e.a.Env); err != nil {
			return "", nil, err
		}
	} else {
		pf, err = platform.Open(ctx, platform.Options{Region: region, Endpoint: cplane.ConfiguredEndpoint(env(args.ControlEndpoint, "MICROVM_CONTROL_ENDPOINT"), e.a.Env),
			Emulator: planes.EmulatorSide(nil), Getenv: e.a.Env})
		if err != nil {
			return "", nil, err
		}
		if err := pf.CheckCredentials(ctx); err != nil {
			return "", nil, err
		}
	}
	var daemon string
	if args.Image == "" {
		// Resolved before the ledger begins: a fleet that cannot build
		// makes no record.
		if daemon, err = planes.Daemon(pf, emu, "", args.Agentd, e.a.Env); err != nil {
			return "", nil, err
		}
	}
	led, err := ledger.Open(dir, nil)
	if err != nil {
		return "", nil, client.Errorf(taxonomy.KindPrecondition, "", "%v; pass --state-dir", err)
	}
	rec, err := led.Begin(pf.Region().String())
	if err != nil {
		return "", nil, client.Errorf(taxonomy.KindPrecondition, "", "%v; pass --state-dir", err)
	}
	infra := setup.Infra{Bucket: e.a.Env("MICROVM_BUCKET"), BuildRoleARN: e.a.Env("MICROVM_BUILD_ROLE_ARN"),
		ExecutionRoleARN: env(args.ExecutionRoleARN, "MICROVM_EXECUTION_ROLE_ARN")}.Filled(dir, e.a.Env, pf.Endpoint(), pf.Region().String())
	launch.ExecutionRoleARN = infra.ExecutionRoleARN
	res, err := workflow.Fleet(ctx, workflow.FleetOptions{
		Platform: pf,
		Image: workflow.Image{Identifier: args.Image, Build: func(ctx context.Context, rec *ledger.Record) (*build.Result, error) {
			return workflow.Build(ctx, pf, workflow.BuildOptions{
				Daemon: daemon, Size: size, Port: taxonomy.DefaultAgentPort, Bucket: infra.Bucket, BuildRoleARN: infra.BuildRoleARN,
				ArtifactDir: func() (string, error) { return workflow.ArtifactDir(e.a.Env) },
				Machine:     planes.GuestMachine(pf), Ledger: rec,
			}, func(name string) { e.a.Progress("building image %s (%s)", name, size) })
		}},
		Launch:  launch,
		Command: args.Command, Timeout: time.Duration(timeout * float64(time.Second)),
		Count: count, Parallel: parallel, Size: size, Ledger: led, Record: rec,
		Warn: func(msg string) { e.a.Warn("%s", msg) },
	})
	out := render.FleetData(res, count, parallel)
	switch worst := res.Worst(); {
	case ctx.Err() != nil:
		return "", nil, &render.Failure{Err: client.Errorf(taxonomy.KindInterrupted, taxonomy.FindingBuildLogGroupSurvives,
			"interrupted; every MicroVM of the fleet was torn down, and anything that could not be deleted is named in data.leaked (%s)", workflow.LeakedText(out.Leaked)), Data: out}
	case err != nil:
		return "", nil, &render.Failure{Err: render.AsClientError(err), Data: out}
	case worst != nil:
		return "", nil, &render.Failure{Err: render.FleetFailure(worst, len(res.Report.Failed()), count), Data: out}
	}
	return cliapi.TypeRunFleet, out, nil
}
