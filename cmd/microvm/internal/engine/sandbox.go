package engine

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// sandbox is the engine's sandbox, or the refusal that names the missing step.
func (e *engine) sandbox() (*sandbox.Sandbox, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sb == nil && e.pool != nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: this engine holds a pool; attach another engine to a member pool_acquire handed out")
	}
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
	return planes.EnvRegion(e.a.Env)
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
	launch, err := launchOptions(args)
	if err != nil {
		return "", nil, err
	}
	mounts, err := parseMounts(args.Volumes)
	if err != nil {
		return "", nil, err
	}
	// withVolumes lays the volumes once sb runs; their store is opened
	// before the launch, so a missing bucket is refused with nothing up.
	var vols *checkpoint.Volumes
	openVolumes := func() error {
		if len(mounts) == 0 {
			return nil
		}
		e.region = region
		vols, err = e.volumesLocked(life)
		return err
	}
	withVolumes := func(sb *sandbox.Sandbox) error {
		if len(mounts) == 0 {
			return nil
		}
		return e.attachVolumesLocked(ctx, vols, sb, mounts)
	}
	var sb *sandbox.Sandbox
	if args.Local {
		emu, err := embedded.Start(life, embedded.Options{Agentd: args.Agentd, Region: region, Getenv: e.a.Env})
		if err != nil {
			return "", nil, err
		}
		e.emu, e.bound, e.controlEndpoint = emu, true, emu.URL
		if err := openVolumes(); err != nil {
			return "", nil, err
		}
		launch.AgentToken, launch.Wait, launch.NoKeepAwake = args.AgentToken, waitFor(true, args.TimeoutSec), args.NoKeepAwake
		sb, err = emu.Launch(ctx, launch)
		if sb != nil {
			e.sb, e.launched = sb, true
		}
		if err != nil {
			return "", nil, err
		}
		if err := withVolumes(sb); err != nil {
			return "", nil, err
		}
	} else {
		if args.Image == "" {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: an AWS sandbox needs an image (its ARN or name; `microvm build` makes one), or local mode")
		}
		pf, err := e.s.platform(region, cplane.ConfiguredEndpoint(args.ControlEndpoint, e.a.Env))
		if err != nil {
			return "", nil, err
		}
		arn, name, err := e.resolveImage(ctx, pf, args.Image)
		if err != nil {
			return "", nil, err
		}
		e.bound, e.controlEndpoint, e.imageARN = true, pf.Endpoint(), arn
		if err := openVolumes(); err != nil {
			return "", nil, err
		}
		launch.Image, launch.Version, launch.ImageName = arn, args.ImageVersion, name
		launch.ExecutionRoleARN, launch.AgentToken, launch.Wait = args.ExecutionRoleARN, args.AgentToken, waitFor(pf.Local(), args.TimeoutSec)
		launch.NoKeepAwake = args.NoKeepAwake
		sb, err = sandbox.Launch(ctx, pf.Control(), launch)
		if sb != nil {
			e.sb, e.launched = sb, true
		}
		if err != nil {
			return "", nil, err
		}
		if err := withVolumes(sb); err != nil {
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
	pf, err := e.s.platform(region, endpoint)
	if err != nil {
		return "", nil, err
	}
	sb, err := pf.Handle(args.MicrovmID).Attach(ctx, args.AgentToken, sandbox.Options{Wait: waitFor(pf.Local(), 0), NoKeepAwake: args.NoKeepAwake})
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
	d.MaxIdleSeconds = int64(e.sb.MaxIdle() / time.Second)
	if end := e.sb.Deadline(); !end.IsZero() {
		d.EndsAt = render.Present(end.UTC().Format(time.RFC3339))
	}
	return d
}

func stateData(sb *sandbox.Sandbox) cliapi.StateData {
	return cliapi.StateData{MicrovmID: sb.ID(), State: string(sb.Lifecycle()), Endpoint: render.Present(sb.Endpoint())}
}

// Launch defaults are run's (cmd/microvm/run.go), so a package's sandbox
// lives by the same policy as `microvm run --keep`'s.
const (
	defaultMaxIdleSec     = 600
	defaultSuspendedSec   = 600
	defaultMaxDurationSec = 3600
)

// launchOptions turns create's launch policy into the library's, refusing
// before any call what a finding says the service refuses.
func launchOptions(args engineapi.CreateArgs) (sandbox.Options, error) {
	idle, suspended, dur := args.MaxIdleSec, args.SuspendedSec, args.MaxDurationSec
	if idle == 0 {
		idle = defaultMaxIdleSec
	}
	if suspended == 0 {
		suspended = defaultSuspendedSec
	}
	if dur == 0 {
		dur = defaultMaxDurationSec
	}
	if dur < taxonomy.MinDurationSec || dur > taxonomy.MaxDurationSec {
		return sandbox.Options{}, render.InvalidArg(taxonomy.FindingMaxDuration, "engine: maxDurationSec %d is outside %d..%d", dur, taxonomy.MinDurationSec, taxonomy.MaxDurationSec)
	}
	if idle < taxonomy.MinIdleDurationSec {
		return sandbox.Options{}, render.InvalidArg(taxonomy.FindingIdlePolicy, "engine: maxIdleSec %d is under the idle policy's minimum of %d", idle, taxonomy.MinIdleDurationSec)
	}
	if suspended < 0 {
		return sandbox.Options{}, render.InvalidArg(taxonomy.FindingIdlePolicy, "engine: suspendedSec %d is negative", suspended)
	}
	o := sandbox.Options{
		Idle:        &cplane.IdlePolicy{MaxIdle: time.Duration(idle) * time.Second, SuspendedFor: time.Duration(suspended) * time.Second},
		MaxDuration: time.Duration(dur) * time.Second,
		Connectors:  cplane.Connectors{InternetEgress: args.Egress},
	}
	for _, kv := range args.LaunchEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return o, client.Errorf(taxonomy.KindInvalidArg, "", "engine: launchEnv entry %q is not NAME=value", kv)
		}
		if o.Env == nil {
			o.Env = map[string]string{}
		}
		o.Env[k] = v
	}
	net, err := launchNetwork(args.NetworkAllow, args.NetworkDenyAll, args.Secrets)
	if err != nil {
		return o, err
	}
	o.Network = net
	return o, nil
}

// fleetLaunch is create's launch arguments as each copy of a fleet gets
// them (run_many, fork): the same checks and defaults as create's, in the
// workflow's form.
func fleetLaunch(args engineapi.CreateArgs) (workflow.Launch, error) {
	o, err := launchOptions(args)
	if err != nil {
		return workflow.Launch{}, err
	}
	return workflow.Launch{ExecutionRoleARN: args.ExecutionRoleARN, Env: o.Env, MaxIdle: o.Idle.MaxIdle, SuspendedFor: o.Idle.SuspendedFor,
		MaxDuration: o.MaxDuration, Egress: o.Connectors.InternetEgress, Port: taxonomy.DefaultAgentPort, Network: o.Network}, nil
}

// launchNetwork turns create's network arguments into the library's: nil
// when none is given. A secret's refusal never quotes its value (the
// library's parser says which part is wrong, not what it held).
func launchNetwork(allow []string, denyAll bool, secrets []string) (*sandbox.Network, error) {
	if len(allow) == 0 && !denyAll && len(secrets) == 0 {
		return nil, nil
	}
	if denyAll && len(allow) > 0 {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: networkDenyAll with networkAllow: a policy either allows these or nothing")
	}
	rules, err := sandbox.ParseNetworkRules(allow)
	if err != nil {
		return nil, err
	}
	n := &sandbox.Network{Policy: cliapi.NetworkPolicy{Allow: rules}}
	for _, spec := range secrets {
		sec, err := sandbox.ParseSecret(spec)
		if err != nil {
			return nil, err
		}
		n.Secrets = append(n.Secrets, sec)
	}
	return n, nil
}

// startOptions turns an exec's arguments into the library's.
func startOptions(args engineapi.RunArgs) (client.StartOptions, error) {
	o := client.StartOptions{ExecID: args.ExecID, Shell: args.Shell, Cwd: args.Cwd,
		DaemonTimeout: time.Duration(args.TimeoutSec * float64(time.Second))}
	if len(args.Command) == 0 {
		return o, client.Errorf(taxonomy.KindInvalidArg, "", "engine: an empty command")
	}
	if args.TimeoutSec < 0 {
		return o, client.Errorf(taxonomy.KindInvalidArg, "", "engine: timeoutSec %v is negative", args.TimeoutSec)
	}
	var err error
	if o.User, err = numericID("user", args.User); err != nil {
		return o, err
	}
	if o.Group, err = numericID("group", args.Group); err != nil {
		return o, err
	}
	if o.Limits, err = client.NewExecLimits(args.MemoryLimitBytes, args.CPUMillicores, args.PidsLimit); err != nil {
		return o, err
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
	began := time.Now()
	res, err := sb.Run(ctx, args.Command, client.RunOptions{StartOptions: o})
	if err != nil {
		return "", nil, err
	}
	// A non-zero exit is the command's answer, not the engine's failure: it
	// is a success envelope whose exitCode says so.
	return engineapi.TypeExecResult, execResult(res, args.TimeoutSec, time.Since(began)), nil
}

// stream sends the exec's output as event frames while it runs. The
// library's Stream reconnects at its byte cursor when a connection drops.
func (e *engine) stream(ctx context.Context, sb *sandbox.Sandbox, id int64, args engineapi.StreamArgs) (string, any, error) {
	o, err := startOptions(engineapi.RunArgs{Command: args.Command, Shell: args.Shell, Cwd: args.Cwd, Env: args.Env, TimeoutSec: args.TimeoutSec,
		ExecID: args.ExecID, User: args.User, Group: args.Group, MemoryLimitBytes: args.MemoryLimitBytes, CPUMillicores: args.CPUMillicores, PidsLimit: args.PidsLimit})
	if err != nil {
		return "", nil, err
	}
	sess := sb.Session()
	if sess == nil {
		return "", nil, client.Errorf(taxonomy.KindPrecondition, "", "engine: %s is %s, not RUNNING; resume it first", sb.ID(), sb.Lifecycle())
	}
	// Opened before the command starts: a sink nobody reads refuses the
	// request with nothing started.
	sink, err := openSink(args.Sink)
	if err != nil {
		return "", nil, err
	}
	defer sink.close()
	// One exchange where the daemon offers the run route.
	ex, st, err := sess.StartStream(ctx, args.Command, o)
	if err != nil {
		return "", nil, err
	}
	defer st.Close()
	sum, sawExit, err := e.pump(id, st, ex.ID(), sink)
	if err != nil {
		return "", nil, err
	}
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
