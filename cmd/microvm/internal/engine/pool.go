package engine

// The pool ops: an engine that holds a sandbox.Pool instead of a sandbox.
// A member it hands out is reached by attach from another engine (the
// member's id, token and the pool's control endpoint), so every sandbox op
// works on it unchanged; release and close go back through this engine.

import (
	"context"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

func (e *engine) poolOpen(ctx context.Context, args engineapi.PoolOpenArgs) (string, any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.claim(); err != nil {
		return "", nil, err
	}
	if args.Local && (args.ControlEndpoint != "" || args.Image != "") {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: a local pool runs its own emulator and its default image; controlEndpoint and image are for AWS or a running emulator")
	}
	region, err := e.regionFor(args.Region)
	if err != nil {
		return "", nil, err
	}
	o, err := launchOptions(engineapi.CreateArgs{Egress: args.Egress, LaunchEnv: args.LaunchEnv, MaxIdleSec: args.MaxIdleSec,
		SuspendedSec: args.SuspendedSec, MaxDurationSec: args.MaxDurationSec})
	if err != nil {
		return "", nil, err
	}
	life := context.WithoutCancel(ctx)
	var launch sandbox.Launcher
	if args.Local {
		emu, err := embedded.Start(life, embedded.Options{Agentd: args.Agentd, Region: region, Getenv: e.a.Env})
		if err != nil {
			return "", nil, err
		}
		e.emu, e.bound, e.controlEndpoint = emu, true, emu.URL
		o.Wait = waitFor(true, 0)
		launch = emu.Launch
	} else {
		if args.Image == "" {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: an AWS pool needs an image (its ARN or name), or local mode")
		}
		pf, err := platform.Open(life, platform.Options{Region: region, Endpoint: cplane.ConfiguredEndpoint(args.ControlEndpoint, e.a.Env),
			Emulator: planes.EmulatorSide(nil), Getenv: e.a.Env})
		if err != nil {
			return "", nil, err
		}
		arn, name, err := e.resolveImage(ctx, pf, args.Image)
		if err != nil {
			return "", nil, err
		}
		e.bound, e.controlEndpoint = true, pf.Endpoint()
		o.Image, o.Version, o.ImageName, o.ExecutionRoleARN = arn, args.ImageVersion, name, args.ExecutionRoleARN
		o.Wait = waitFor(pf.Local(), 0)
		launch = sandbox.LaunchOn(pf.Control())
	}
	p, err := sandbox.NewPool(life, sandbox.PoolOptions{Size: int(args.Size), Refill: int(args.Refill), Launch: launch, Options: o})
	if err != nil {
		return "", nil, err
	}
	e.pool, e.poolSize, e.region, e.members = p, args.Size, region, map[string]*sandbox.Sandbox{}
	return engineapi.TypePool, e.poolDataLocked(), nil
}

func (e *engine) poolDataLocked() engineapi.PoolData {
	return engineapi.PoolData{Size: e.poolSize, Ready: int64(e.pool.Ready()), Served: e.served, Closed: e.poolClosed,
		Leaked: []string{}, Local: e.emu != nil, Region: e.region.String(), ControlEndpoint: render.Present(e.controlEndpoint)}
}

// heldPool is the engine's pool, or the refusal naming the missing step.
func (e *engine) heldPool() (*sandbox.Pool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pool == nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: no pool; send pool_open first")
	}
	return e.pool, nil
}

func (e *engine) poolWaitReady(ctx context.Context, args engineapi.PoolWaitReadyArgs) (string, any, error) {
	p, err := e.heldPool()
	if err != nil {
		return "", nil, err
	}
	if args.TimeoutSec < 0 {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: timeoutSec %v is negative", args.TimeoutSec)
	}
	wctx := ctx
	if args.TimeoutSec > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, time.Duration(args.TimeoutSec*float64(time.Second)))
		defer cancel()
	}
	// A timeout is the pool as it stands: ready says how full it got.
	if err := p.WaitReady(wctx); err != nil && wctx.Err() == nil {
		return "", nil, err
	}
	if ctx.Err() != nil {
		return "", nil, render.AsClientError(ctx.Err())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return engineapi.TypePool, e.poolDataLocked(), nil
}

func (e *engine) poolAcquire(ctx context.Context) (string, any, error) {
	p, err := e.heldPool()
	if err != nil {
		return "", nil, err
	}
	sb, err := p.Acquire(ctx)
	if err != nil {
		return "", nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.members[sb.ID()] = sb
	e.served++
	return engineapi.TypeSandbox, engineapi.SandboxData{MicrovmID: sb.ID(), AgentToken: sb.AgentToken(), Endpoint: render.Present(sb.Endpoint()),
		State: string(sb.Lifecycle()), Region: e.region.String(), Local: e.emu != nil, ControlEndpoint: render.Present(e.controlEndpoint)}, nil
}

func (e *engine) poolRelease(ctx context.Context, args engineapi.PoolReleaseArgs) (string, any, error) {
	p, err := e.heldPool()
	if err != nil {
		return "", nil, err
	}
	e.mu.Lock()
	sb := e.members[args.MicrovmID]
	delete(e.members, args.MicrovmID)
	e.mu.Unlock()
	if sb == nil {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: %q is not a member this pool handed out (or it was released already)", args.MicrovmID)
	}
	rep := p.Release(context.WithoutCancel(ctx), sb)
	return cliapi.TypeTeardown, teardownData(sb, rep), nil
}

func (e *engine) poolCost(ctx context.Context) (string, any, error) {
	p, err := e.heldPool()
	if err != nil {
		return "", nil, err
	}
	rep, err := p.Cost(ctx, cost.Pinned(e.region))
	if err != nil {
		return "", nil, err
	}
	return cliapi.TypeCost, cliapi.CostData{Report: render.CostReport(rep)}, nil
}

func (e *engine) poolClose(ctx context.Context) (string, any, error) {
	p, err := e.heldPool()
	if err != nil {
		return "", nil, err
	}
	rep := p.Close(context.WithoutCancel(ctx))
	e.mu.Lock()
	defer e.mu.Unlock()
	e.poolClosed = true
	d := e.poolDataLocked()
	for _, l := range rep.Leaked() {
		d.Leaked = append(d.Leaked, l.Kind+" "+l.ID)
	}
	return engineapi.TypePool, d, nil
}

// teardownData renders a member's (or the sandbox's) teardown report.
func teardownData(sb *sandbox.Sandbox, rep sandbox.TeardownReport) cliapi.TeardownData {
	d := cliapi.TeardownData{MicrovmID: sb.ID(), Leaked: []string{}, UndeletedLogGroups: []string{}}
	for _, l := range rep.Leaked {
		if l.Kind == "log_group" {
			d.UndeletedLogGroups = append(d.UndeletedLogGroups, l.ID)
			continue
		}
		d.Leaked = append(d.Leaked, l.Kind+" "+l.ID)
	}
	d.State = render.Present(string(sb.Lifecycle()))
	return d
}
