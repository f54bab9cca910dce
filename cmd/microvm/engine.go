package main

import (
	"context"
	"strconv"

	"github.com/alecthomas/kong"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/cmd/microvm/internal/engine"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// EngineCmd serves api/engine.yaml on stdin and stdout until stdin ends.
type EngineCmd struct{}

// run serves the engine (cmd/microvm/internal/engine) with the steps of
// this command's it calls: the fleet, the region, image names, the
// emulator's side of a platform.
func (c *EngineCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	err := engine.Serve(ctx, &a.IO, engine.Hooks{
		RunMany: func(ctx context.Context, args engineapi.RunManyArgs) (string, any, error) {
			return runMany(ctx, a, args)
		},
		ControlRegion: func(getenv func(string) string) (client.Region, error) {
			var f RegionFlags
			return f.controlRegion(getenv)
		},
		ResolveImage: func(ctx context.Context, pf *platform.Platform, image string) (string, string, error) {
			p := &plane{Platform: pf, a: a}
			return p.resolveImage(ctx, image)
		},
		EmulatorSide: func() *platform.Emulator { return emulatorSide(nil) },
		LocalPlatform: func(ctx context.Context, emu *embedded.Emulator, region client.Region) (*platform.Platform, error) {
			cpc, err := emu.Control(ctx)
			if err != nil {
				return nil, err
			}
			return platform.Open(ctx, platform.Options{Region: region, Endpoint: emu.URL, Control: cpc,
				Emulator: emulatorSide(emu.Server.CreateBucket), Getenv: a.Env})
		},
		BuildImage: func(ctx context.Context, pf *platform.Platform, emu *embedded.Emulator, dockerfile, agentd string, memoryMiB int) (*build.Result, error) {
			// The plane `microvm build` runs on; the progress of a local
			// build reaches the engine through the emulator's callback.
			p := &plane{Platform: pf, a: a, emu: emu}
			return p.buildImage(ctx, ImageFlags{Dockerfile: dockerfile, Memory: memoryMiB, Port: taxonomy.DefaultAgentPort}, InfraFlags{}, "", agentd, "", false, nil)
		},
	})
	if err != nil {
		return nil, err
	}
	return &render.Result{Written: true}, nil
}

// runMany answers the engine's run_many op with `run --count` itself: the
// op's arguments become that command's flags, parsed by the same parser
// (defaults, enums and bounds included), and its fleet code runs. A Python
// or TypeScript fleet is the CLI's fleet, not a second implementation.
func runMany(ctx context.Context, a *app, args engineapi.RunManyArgs) (string, any, error) {
	if args.Count < 1 {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: run_many needs count 1..%d, got %d", taxonomy.MaxFleetCount, args.Count)
	}
	argv := []string{"run", "--count", strconv.FormatInt(args.Count, 10), "--parallel", strconv.FormatInt(args.Parallel, 10)}
	flag := func(name, v string) {
		if v != "" {
			argv = append(argv, "--"+name+"="+v)
		}
	}
	flag("exec", args.Command)
	flag("image", args.Image)
	flag("region", args.Region)
	flag("control-endpoint", args.ControlEndpoint)
	flag("execution-role-arn", args.ExecutionRoleARN)
	flag("agentd", args.Agentd)
	if args.TimeoutSec != 0 {
		flag("timeout", strconv.FormatFloat(args.TimeoutSec, 'g', -1, 64))
	}
	if args.Local {
		argv = append(argv, "--local")
	}
	var cli struct {
		Run RunCmd `cmd:""`
	}
	parser, err := kong.New(&cli, kong.Name("microvm"), kong.Vars(vars(version)),
		kong.Exit(func(int) {}), kong.Writers(a.Stderr, a.Stderr))
	if err != nil {
		return "", nil, client.Errorf(taxonomy.KindUnexpected, "", "engine: building the parser: %v", err)
	}
	if _, err := parser.Parse(argv); err != nil {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: run_many: %v", err)
	}
	res, err := cli.Run.runFleet(ctx, a)
	if err != nil {
		return "", nil, err
	}
	return res.Type, res.Data, nil
}
