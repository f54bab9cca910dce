package engine

// The build op: an image built by the command's own build step (the one
// `microvm build` and the MCP server's sized create run), then launched as
// create launches, with a local build's progress as event frames.

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// buildLine is one event of a local build: a step's start or end (text is
// its instruction) or a line of its output.
type buildLine struct {
	Event       string `json:"event"`
	Step        int    `json:"step"`
	Steps       int    `json:"steps"`
	Instruction string `json:"instruction"`
	Text        string `json:"text"`
	Done        bool   `json:"done"`
	Cached      bool   `json:"cached"`
}

// progress forwards the emulator's build events to the build request that
// is running, if any: the emulator's callback is fixed when it starts.
func (e *engine) progress(_ string, ev emulator.BuildEvent) {
	e.reqMu.Lock()
	send := e.buildEvents
	e.reqMu.Unlock()
	if send == nil {
		return
	}
	text := ""
	if len(ev.Output) > 0 {
		text = strings.ToValidUTF8(string(ev.Output), "\uFFFD")
		if !utf8.ValidString(text) {
			text = ""
		}
	}
	send(buildLine{Event: "build", Step: ev.Step, Steps: ev.Steps, Instruction: ev.Instruction, Text: text, Done: ev.Done, Cached: ev.Cached})
}

func (e *engine) build(ctx context.Context, id int64, args engineapi.BuildArgs) (string, any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.claim(); err != nil {
		return "", nil, err
	}
	if !args.Local && args.BaseImage != "" {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: baseImage stands in for FROM in a local build only; an AWS build's FROM is the managed base")
	}
	if args.Local && args.ControlEndpoint != "" {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: local mode runs its own emulator; controlEndpoint is for AWS or a running emulator")
	}
	if args.MemoryMib != 0 {
		if _, err := client.SizeClassFromBaseline(int(args.MemoryMib)); err != nil {
			return "", nil, err
		}
	}
	memory := args.MemoryMib
	if memory == 0 {
		memory = taxonomy.DefaultBaselineMiB
	}
	region, err := e.regionFor(args.Region)
	if err != nil {
		return "", nil, err
	}
	launch, err := launchOptions(engineapi.CreateArgs{Egress: args.Egress, LaunchEnv: args.LaunchEnv, MaxIdleSec: args.MaxIdleSec,
		SuspendedSec: args.SuspendedSec, MaxDurationSec: args.MaxDurationSec})
	if err != nil {
		return "", nil, err
	}
	life := context.WithoutCancel(ctx)
	var pf *platform.Platform
	if args.Local {
		emu, err := embedded.Start(life, embedded.Options{Agentd: args.Agentd, Region: region, Getenv: e.a.Env,
			BaseImage: args.BaseImage, BuildProgress: e.progress})
		if err != nil {
			return "", nil, err
		}
		e.emu, e.bound, e.controlEndpoint = emu, true, emu.URL
		if pf, err = planes.Local(life, emu, region, e.a.Env); err != nil {
			return "", nil, err
		}
	} else {
		if pf, err = platform.Open(life, platform.Options{Region: region, Endpoint: cplane.ConfiguredEndpoint(args.ControlEndpoint, e.a.Env),
			Emulator: planes.EmulatorSide(nil), Getenv: e.a.Env}); err != nil {
			return "", nil, err
		}
		e.bound, e.controlEndpoint = true, pf.Endpoint()
	}
	e.reqMu.Lock()
	e.buildEvents = func(v any) { e.send(engineapi.Reply{ID: id, Event: v}) }
	e.reqMu.Unlock()
	res, err := e.buildImage(ctx, pf, args.Dockerfile, args.Agentd, int(memory), nil)
	e.reqMu.Lock()
	e.buildEvents = nil
	e.reqMu.Unlock()
	if err != nil {
		return "", nil, err
	}
	e.imageARN = res.ImageARN
	launch.Image, launch.Version, launch.ImageName, launch.LogGroup = res.ImageARN, res.Version, res.Name, res.LogGroup
	launch.ImageOwned = !res.Reused
	launch.ExecutionRoleARN, launch.AgentToken = args.ExecutionRoleARN, args.AgentToken
	launch.Wait = waitFor(pf.Local(), args.TimeoutSec)
	sb, err := sandbox.Launch(ctx, pf.Control(), launch)
	if sb != nil {
		e.sb, e.launched = sb, true
	}
	if err != nil {
		return "", nil, err
	}
	e.region = region
	return engineapi.TypeSandbox, e.infoLocked(), nil
}
