package engine

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// sandbox is the engine's sandbox, or the refusal that names the missing step.
func (e *engine) sandbox() (*sandbox.Sandbox, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sb == nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: no sandbox yet; send create or attach first")
	}
	return e.sb, nil
}

// claim refuses a second create or attach: an engine holds one sandbox, so
// its teardown on exit is never ambiguous.
func (e *engine) claim() error {
	if e.sb != nil || e.bound {
		return client.Errorf(taxonomy.KindInvalidArg, "", "engine: this engine already holds a sandbox; start another engine for another")
	}
	return nil
}

// regionFor is the named region (held to the measured set, as --region
// is), else the environment's.
func (e *engine) regionFor(name string) (client.Region, error) {
	if name != "" {
		return client.ParseRegion(name)
	}
	return e.hooks.ControlRegion(e.a.Env)
}

func waitFor(local bool, timeoutSec float64) cplane.WaitOptions {
	timeout := time.Duration(timeoutSec * float64(time.Second))
	if local {
		return embedded.WaitOptions(timeout)
	}
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	return cplane.WaitOptions{Interval: 5 * time.Second, Timeout: timeout}
}

func (e *engine) create(ctx context.Context, args engineapi.CreateArgs) (string, any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.claim(); err != nil {
		return "", nil, err
	}
	if args.Local && (args.ControlEndpoint != "" || args.Image != "") {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: local mode runs its own emulator and its default image; controlEndpoint and image are for AWS or a running emulator")
	}
	region, err := e.regionFor(args.Region)
	if err != nil {
		return "", nil, err
	}
	// The emulator and the sandbox outlive this request: they live until
	// the engine's stdin ends.
	life := context.WithoutCancel(ctx)
	var sb *sandbox.Sandbox
	if args.Local {
		emu, err := embedded.Start(life, embedded.Options{Agentd: args.Agentd, Region: region, Getenv: e.a.Env})
		if err != nil {
			return "", nil, err
		}
		e.emu, e.bound, e.controlEndpoint = emu, true, emu.URL
		sb, err = emu.Launch(ctx, sandbox.Options{AgentToken: args.AgentToken, Wait: waitFor(true, args.TimeoutSec)})
		if sb != nil {
			e.sb, e.launched = sb, true
		}
		if err != nil {
			return "", nil, err
		}
	} else {
		if args.Image == "" {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: an AWS sandbox needs an image (its ARN or name; `microvm build` makes one), or local mode")
		}
		pf, err := platform.Open(life, platform.Options{Region: region, Endpoint: cplane.ConfiguredEndpoint(args.ControlEndpoint, e.a.Env),
			Emulator: e.hooks.EmulatorSide(), Getenv: e.a.Env})
		if err != nil {
			return "", nil, err
		}
		arn, name, err := e.hooks.ResolveImage(ctx, pf, args.Image)
		if err != nil {
			return "", nil, err
		}
		e.bound, e.controlEndpoint, e.imageARN = true, pf.Endpoint(), arn
		sb, err = sandbox.Launch(ctx, pf.Control(), sandbox.Options{Image: arn, Version: args.ImageVersion, ImageName: name,
			ExecutionRoleARN: args.ExecutionRoleARN, AgentToken: args.AgentToken, Wait: waitFor(pf.Local(), args.TimeoutSec)})
		if sb != nil {
			e.sb, e.launched = sb, true
		}
		if err != nil {
			return "", nil, err
		}
	}
	e.region = region
	return engineapi.TypeSandbox, e.infoLocked(), nil
}

func (e *engine) attach(ctx context.Context, args engineapi.AttachArgs) (string, any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.claim(); err != nil {
		return "", nil, err
	}
	if args.MicrovmID == "" || args.AgentToken == "" {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: attach needs the MicroVM id and the agent token its launch installed (the token is the credential; an id alone does not reconnect)")
	}
	region, err := e.regionFor(args.Region)
	if err != nil {
		return "", nil, err
	}
	endpoint := cplane.ConfiguredEndpoint(args.ControlEndpoint, e.a.Env)
	pf, err := platform.Open(context.WithoutCancel(ctx), platform.Options{Region: region, Endpoint: endpoint, Emulator: e.hooks.EmulatorSide(), Getenv: e.a.Env})
	if err != nil {
		return "", nil, err
	}
	sb, err := pf.Handle(args.MicrovmID).Attach(ctx, args.AgentToken, sandbox.Options{Wait: waitFor(pf.Local(), 0)})
	if err != nil {
		return "", nil, err
	}
	e.sb, e.bound, e.region, e.controlEndpoint = sb, true, region, endpoint
	return engineapi.TypeSandbox, e.infoLocked(), nil
}

func (e *engine) info() engineapi.SandboxData {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.infoLocked()
}

func (e *engine) infoLocked() engineapi.SandboxData {
	d := engineapi.SandboxData{MicrovmID: e.sb.ID(), AgentToken: e.sb.AgentToken(), Endpoint: render.Present(e.sb.Endpoint()),
		State: string(e.sb.Lifecycle()), Region: e.region.String(), Local: e.emu != nil, ControlEndpoint: render.Present(e.controlEndpoint)}
	if e.imageARN != "" {
		d.ImageIdentifier = render.Present(e.imageARN)
	}
	return d
}

func stateData(sb *sandbox.Sandbox) cliapi.StateData {
	return cliapi.StateData{MicrovmID: sb.ID(), State: string(sb.Lifecycle()), Endpoint: render.Present(sb.Endpoint())}
}

// startOptions turns an exec's arguments into the library's.
func startOptions(args engineapi.RunArgs) (client.StartOptions, error) {
	o := client.StartOptions{ExecID: args.ExecID, Shell: args.Shell, Cwd: args.Cwd,
		DaemonTimeout: time.Duration(args.TimeoutSec * float64(time.Second))}
	if len(args.Command) == 0 {
		return o, client.Errorf(taxonomy.KindInvalidArg, "", "engine: an empty command")
	}
	if args.MemoryLimitBytes < 0 || args.CPUMillicores < 0 || args.PidsLimit < 0 {
		return o, client.Errorf(taxonomy.KindInvalidArg, "", "engine: a limit cannot be negative")
	}
	if args.MemoryLimitBytes > 0 || args.CPUMillicores > 0 || args.PidsLimit > 0 {
		// Zero is no limit; the guest refuses what it cannot apply.
		o.Limits = &protocol.ExecLimits{}
		if args.MemoryLimitBytes > 0 {
			v := uint64(args.MemoryLimitBytes)
			o.Limits.MemoryBytes = &v
		}
		if args.CPUMillicores > 0 {
			v := uint32(min(args.CPUMillicores, 1<<20))
			o.Limits.CPUMillicores = &v
		}
		if args.PidsLimit > 0 {
			v := uint32(min(args.PidsLimit, 4194304))
			o.Limits.Pids = &v
		}
	}
	for _, kv := range args.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return o, client.Errorf(taxonomy.KindInvalidArg, "", "engine: env entry %q is not NAME=value", kv)
		}
		if o.Env == nil {
			o.Env = map[string]string{}
		}
		o.Env[k] = v
	}
	return o, nil
}

func (e *engine) runCommand(ctx context.Context, sb *sandbox.Sandbox, args engineapi.RunArgs) (string, any, error) {
	o, err := startOptions(args)
	if err != nil {
		return "", nil, err
	}
	res, err := sb.Run(ctx, args.Command, client.RunOptions{StartOptions: o})
	if err != nil {
		return "", nil, err
	}
	// A non-zero exit is the command's answer, not the engine's failure: it
	// is a success envelope whose exitCode says so.
	return cliapi.TypeExec, render.ExecData(res), nil
}

// stream sends the exec's output as event frames while it runs. The
// library's Stream reconnects at its byte cursor when a connection drops.
func (e *engine) stream(ctx context.Context, sb *sandbox.Sandbox, id int64, args engineapi.RunArgs) (string, any, error) {
	o, err := startOptions(args)
	if err != nil {
		return "", nil, err
	}
	sess := sb.Session()
	if sess == nil {
		return "", nil, client.Errorf(taxonomy.KindPrecondition, "", "engine: %s is %s, not RUNNING; resume it first", sb.ID(), sb.Lifecycle())
	}
	// One exchange where the daemon offers the run route.
	ex, st, err := sess.StartStream(ctx, args.Command, o)
	if err != nil {
		return "", nil, err
	}
	defer st.Close()
	sum := cliapi.ExecStreamData{ExecID: ex.ID()}
	event := func(v any) {
		sum.Events++
		e.send(engineapi.Reply{ID: id, Event: v})
	}
	sawExit := false
	for {
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			sum.NextOffset = int64(st.Cursor())
			return "", nil, &render.Failure{Err: render.AsClientError(err), Data: sum}
		}
		switch ev.Kind {
		case client.EventOutput:
			sum.Bytes += int64(len(ev.Data))
			event(cliapi.StreamOutputLine{Event: cliapi.EventOutput, Stream: string(ev.Stream), Offset: int64(ev.Offset),
				Bytes: int64(len(ev.Data)), Text: strings.ToValidUTF8(string(ev.Data), "\uFFFD"), Lossy: !utf8.Valid(ev.Data)})
		case client.EventGap:
			sum.Gaps++
			event(cliapi.StreamGapLine{Event: cliapi.EventGap, From: int64(ev.Gap.From), To: int64(ev.Gap.To)})
		case client.EventExit:
			sawExit = true
			t := ev.Exit.Truncated
			sum.Truncated = &t
			exit := render.ExitLine(ev.Exit)
			sum.ExitCode = exit.ExitCode
			event(exit)
		}
	}
	sum.NextOffset = int64(st.Cursor())
	if !sawExit {
		sum.ExitCode, sum.Truncated = nil, nil
		return "", nil, &render.Failure{Err: client.Errorf(taxonomy.KindExecFailed, "", "the stream of %s ended without an exit event at offset %d; its outcome is unknown", ex.ID(), sum.NextOffset), Data: sum}
	}
	// Every byte was delivered: release the output on the daemon.
	if !st.Released() {
		if err := ex.Release(ctx); err != nil && !errors.Is(err, client.WireKindError(taxonomy.WireConflict)) {
			return "", nil, &render.Failure{Err: render.AsClientError(err), Data: sum}
		}
	}
	return cliapi.TypeExecStream, sum, nil
}

// treeBytes is the size of the regular files under dir, what a directory
// copy moved; an unreadable entry counts nothing rather than failing a copy
// that succeeded.
func treeBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, ierr := d.Info(); ierr == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// engineURL answers the engine's url op for its sandbox.
func engineURL(ctx context.Context, sb *sandbox.Sandbox, args engineapi.URLArgs) (string, any, error) {
	if args.Port < 1 || args.Port > 65535 {
		return "", nil, render.InvalidArg(taxonomy.FindingAllowedPortsUnion, "engine: port %d is outside 1..65535, the ports a proxy token can name", args.Port)
	}
	if args.ExpiresMinutes < 0 || args.ExpiresMinutes > taxonomy.MaxAuthTokenMinutes {
		return "", nil, render.InvalidArg(taxonomy.FindingEndpointAuth, "engine: expiresMinutes %d is not in 1..%d (zero is %d)", args.ExpiresMinutes, taxonomy.MaxAuthTokenMinutes, taxonomy.MaxAuthTokenMinutes)
	}
	u, err := sb.URL(ctx, int(args.Port), sandbox.URLOptions{Expires: time.Duration(args.ExpiresMinutes) * time.Minute})
	if err != nil {
		return "", nil, err
	}
	return cliapi.TypeURL, render.URLData(u), nil
}
