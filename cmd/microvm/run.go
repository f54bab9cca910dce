package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/kept"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// RunCmd builds (or names) an image, launches a MicroVM, runs one command,
// reports the cost and tears everything down.
type RunCmd struct {
	Binary         string        `arg:"" optional:"" help:"The agentd binary baked into the image as its CMD: aarch64 for AWS, the host's for an emulator (found as --agentd is when omitted). Ignored with --image." type:"path"`
	Image          string        `help:"Launch this existing image instead of building one: its ARN, or its name, resolved through every page of the account's image listing. It runs (and is priced) at the size class it was built with; --memory beside it is refused." placeholder:"IDENTIFIER"`
	ImageVersion   string        `name:"image-version" help:"Launch this image version instead of the latest active one." placeholder:"VERSION"`
	Exec           string        `help:"A shell command to run in the VM; omitted, the run only launches and tears down, which checks that the image boots." placeholder:"COMMAND"`
	Egress         bool          `help:"Give the VM outbound network."`
	LaunchEnv      []string      `name:"launch-env" help:"KEY=VALUE for every exec in the VM, repeatable; delivered once in the runHookPayload (4096 bytes with the token)." placeholder:"KEY=VALUE" sep:"none"`
	Keep           bool          `help:"Leave the VM (and a built image) running, remember it (endpoint and agent token, in the state directory, this user only) so later commands need only --microvm-id, and print its id; both keep billing until terminated."`
	Keepalive      bool          `help:"With --keep: hold the kept VM awake in the foreground until Ctrl-C, as microvm keepalive does, for work nothing else waits on (the idle policy counts only inbound requests)."`
	KeepaliveEvery time.Duration `name:"keepalive-every" help:"With --keepalive: the interval between pings; unset, a quarter of --max-idle-sec." placeholder:"DURATION"`
	Reuse          bool          `help:"As build --reuse: name the image <name>-<hash12> after its inputs and build settings (size class, base version, port, hooks) and launch an image already under that name instead of building. Ignored with --image."`
	Timeout        float64       `help:"Seconds to wait for the exec." default:"300"`
	MaxIdleSec     int           `name:"max-idle-sec" help:"Suspend the VM after this many seconds without inbound traffic." default:"600"`
	SuspendedSec   int           `name:"suspended-sec" help:"Terminate the VM after this many seconds suspended; a resume after that fails." default:"600"`
	MaxDurationSec int           `name:"max-duration-sec" help:"Hard ceiling on the VM's life, in seconds (at most 28800)." default:"3600"`
	Volume         []string      `help:"NAME:/path: attach volume NAME (a chain of checkpoints in --bucket) at /path before the command, its newest generation laid there (empty on first use), and save a new generation at teardown; repeatable. A volume another live MicroVM holds is refused with its id." placeholder:"NAME:/PATH" sep:"none"`
	StateDir       string        `name:"state-dir" help:"Where the run ledger is written; defaults to $MICROVM_STATE_DIR or the user's state directory." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	ImageFlags
	InfraFlags
	LifecycleFlags
	FleetFlags
	NetworkFlags
}

// checkLaunch refuses, before any call, the launch values a finding says
// the service refuses.
func checkLaunch(maxDuration, maxIdle, suspended int) error {
	if maxDuration < taxonomy.MinDurationSec || maxDuration > taxonomy.MaxDurationSec {
		return render.InvalidArg(taxonomy.FindingMaxDuration, "--max-duration-sec %d is outside %d..%d", maxDuration, taxonomy.MinDurationSec, taxonomy.MaxDurationSec)
	}
	if maxIdle < taxonomy.MinIdleDurationSec {
		return render.InvalidArg(taxonomy.FindingIdlePolicy, "--max-idle-sec %d is under the idle policy's minimum of %d", maxIdle, taxonomy.MinIdleDurationSec)
	}
	if suspended < 0 {
		return render.InvalidArg(taxonomy.FindingIdlePolicy, "--suspended-sec %d is negative", suspended)
	}
	return nil
}

func (c *RunCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if c.Count != 0 || c.Parallel != 0 || c.From != "" || c.AllowOtherVersion {
		if len(c.Volume) > 0 {
			return nil, render.InvalidArg("", "--volume with a fleet or --from: a volume has one writer at a time, so at most one MicroVM of the fleet could attach it")
		}
		return c.runFleet(ctx, a) // fleet.go
	}
	if len(c.Volume) > 0 && c.Local {
		return nil, render.InvalidArg("", "--volume with --local: the in-process emulator's S3 ends with this command, so no generation would outlive the run; run `microvm emulator` and pass --control-endpoint")
	}
	var mounts []checkpoint.Mount
	for _, v := range c.Volume {
		m, err := checkpoint.ParseMount(v)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, m)
	}
	if c.Keep && c.Local {
		return nil, render.InvalidArg("", "--keep with --local: the in-process emulator stops when this command exits; run `microvm emulator` and pass --control-endpoint to keep a VM")
	}
	st, err := c.prepare(ctx, a)
	if err != nil {
		return nil, err
	}
	defer st.p.close()
	p := st.p
	var limits *cliapi.LocalLimits
	o := workflow.Options{
		Platform: p.Platform, Image: c.image(p, st), Launch: c.launch(st.env, st.net),
		Command: c.Exec, Timeout: time.Duration(c.Timeout * float64(time.Second)),
		Size: st.size, Ledger: st.rec, Keep: c.Keep, ArtifactGiven: c.ArtifactURI != "",
		Events: runEvents(a, "run"), Warn: func(msg string) { a.Warn("%s", msg) },
		OnLaunch: func(sb *sandbox.Sandbox) {
			if p.emu != nil {
				if l, ok := p.emu.Server.GuestLimits(sb.ID()); ok {
					// The emulator warned already (lifecycle.go); JSON lists them.
					limits = &cliapi.LocalLimits{Applied: nonNil(l.Applied), Missing: nonNil(l.Missing)}
				}
			}
		},
	}
	if len(mounts) > 0 {
		if o.Volumes, err = p.Volumes(ctx, c.InfraFlags.withSetup(a, p).Bucket); err != nil {
			return nil, err
		}
		o.Mounts = mounts
	}
	if !a.JSON && !a.Dense {
		// The child's bytes, exactly and as they arrive.
		o.Stdout, o.Stderr = a.Stdout, a.Stderr
	}
	res, err := workflow.Run(ctx, o)
	out := runData(res)
	out.LocalLimits = limits

	held := false // --keepalive held the kept VM until Ctrl-C: that interrupt is the expected end
	if sb := res.Sandbox; res.Kept {
		tok := sb.AgentToken()
		out.AgentToken = &tok
		a.remember(st.dir, kept.MicroVM{ID: sb.ID(), Endpoint: out.Endpoint, AgentToken: tok, Port: c.Port, ControlEndpoint: p.Endpoint(), Region: p.Region().String()})
		a.Progress("keeping MicroVM %s and image %s: both bill until `microvm terminate %s --delete-image`", sb.ID(), out.ImageIdentifier, sb.ID())
		if c.Keepalive {
			// Always printed: the command holds the terminal until Ctrl-C.
			fmt.Fprintf(a.Stderr, "microvm: holding MicroVM %s awake; Ctrl-C stops, and it idles out after its maxIdleDurationSeconds from the last ping\n", sb.ID())
			if _, herr := sb.KeepAwake(ctx, c.KeepaliveEvery); herr != nil {
				a.Warn("stopped holding MicroVM %s awake: %v", sb.ID(), herr)
			}
			held = true
		}
	}
	if rep := res.Cost; rep != nil {
		cr := render.CostReport(*rep)
		out.Cost = &cr
		stale := rep.Staleness
		said := *rep
		said.Staleness = "" // said once a day at most, by staleRates
		if !a.Quiet && !a.JSON {
			fmt.Fprintln(a.Stderr, said.String())
		}
		a.StaleRates(stale)
	}

	if ctx.Err() != nil && !held {
		return nil, &render.Failure{Err: client.Errorf(taxonomy.KindInterrupted, taxonomy.FindingBuildLogGroupSurvives,
			"interrupted; teardown ran, and anything it could not delete is named in data.leaked (%s)", workflow.LeakedText(out.Leaked)), Data: out}
	}
	if err != nil {
		ce := render.AsClientError(err)
		return nil, &render.Failure{Err: ce, Data: out, Human: runHuman(out, a, true)}
	}
	rr := &render.Result{Type: cliapi.TypeRun, Data: out, Human: runHuman(out, a, false)}
	if out.Kept && c.Exec == "" {
		// Like `docker run -d`, the id is the one line on stdout, so a
		// shell keeps it: export MICROVM_ID=$(microvm run --keep).
		human := rr.Human
		rr.Human = func(w io.Writer) error {
			if _, err := fmt.Fprintln(w, out.MicrovmID); err != nil {
				return err
			}
			return human(w)
		}
	}
	return rr, nil
}

// image is what a run or fleet launches from: --image, else the image
// `microvm build` would make from these flags.
func (c *RunCmd) image(p *plane, st *runSetup) workflow.Image {
	reuse := c.Reuse && c.Count == 0 && c.Parallel == 0 // a fleet never reuses
	return workflow.Image{Identifier: c.Image, Version: c.ImageVersion,
		Build: func(ctx context.Context, rec *ledger.Record) (*build.Result, error) {
			return p.buildImage(ctx, c.ImageFlags, c.InfraFlags, st.binary, c.Agentd, "", reuse, rec)
		}}
}

// launch is what each MicroVM of the run is launched with.
func (c *RunCmd) launch(env map[string]string, net *sandbox.Network) workflow.Launch {
	return workflow.Launch{ExecutionRoleARN: c.ExecutionRoleARN, Env: env, Network: net,
		MaxIdle: time.Duration(c.MaxIdleSec) * time.Second, SuspendedFor: time.Duration(c.SuspendedSec) * time.Second,
		MaxDuration: time.Duration(c.MaxDurationSec) * time.Second, Egress: c.Egress, Port: c.Port}
}

// runData is a run's result as the microvm.run envelope carries it.
func runData(r workflow.Result) cliapi.RunData {
	out := cliapi.RunData{ImageIdentifier: r.ImageARN, ImageName: r.ImageName, Endpoint: r.Endpoint, Kept: r.Kept, Leaked: r.Leaked, Network: r.Network}
	if r.Sandbox != nil {
		out.MicrovmID = r.Sandbox.ID()
	}
	if x := r.Exec; x != nil {
		out.Stdout, out.Stderr, out.Truncated = x.Stdout, x.Stderr, x.Truncated
		if x.ExitCode != nil {
			v := int64(*x.ExitCode)
			out.ExecExitCode = &v
		}
	}
	if r.RanFor > 0 {
		v := r.RanFor.Seconds()
		out.RunningSeconds = &v
	}
	if r.BuildTook > 0 {
		v := r.BuildTook.Seconds()
		out.BuildSeconds = &v
	}
	return out
}

// runEvents says a run's or a fleet's progress on stderr; what names the
// workflow in its last line.
func runEvents(a *app, what string) func(workflow.Event) {
	update, stop := func(string) {}, func() {}
	return func(e workflow.Event) {
		switch e.Step {
		case workflow.ImageFound:
			a.Progress("resolved image name %s to %s", e.Name, e.Image)
		case workflow.ImageResolved:
			a.Progress("launching from the existing image %s (%s)", e.Image, e.Size)
		case workflow.ImageBuilt:
			a.Progress("image %s built in %s", e.Image, render.HumanDuration(e.Took))
		case workflow.Launching:
			update, stop = a.Waiting("launching a MicroVM from " + e.Name)
		case workflow.LaunchPolled:
			update("launching a MicroVM: " + e.State)
		case workflow.Launched:
			stop()
		case workflow.Running:
			a.Progress("MicroVM %s RUNNING at %s after %s", e.MicrovmID, e.Endpoint, render.HumanDuration(e.Took))
		case workflow.Exec:
			a.Progress("exec %s: %s", e.ExecID, e.Command)
		case workflow.TearingDown:
			a.Progress("tearing down MicroVM %s", e.MicrovmID)
		case workflow.Clean:
			a.Progress("teardown clean: nothing of this %s is left", what)
		case workflow.FleetLaunching:
			a.Progress("launching MicroVM %d of %d from %s", e.Index+1, e.Count, e.Name)
		case workflow.FleetRunning:
			a.Progress("MicroVM %d of %d: %s RUNNING", e.Index+1, e.Count, e.MicrovmID)
		case workflow.FleetPriced:
			fleetPriced(a, e)
		}
	}
}

// runHuman is the human form: the child's bytes already went to stdout as
// they arrived, so stdout gets nothing more; the summary goes to stderr.
func runHuman(d cliapi.RunData, a *app, failed bool) func(io.Writer) error {
	return func(io.Writer) error {
		if a.Quiet && !failed {
			return nil
		}
		tw := tabwriter.NewWriter(a.Stderr, 0, 2, 2, ' ', 0)
		fmt.Fprintf(tw, "microvm\t%s\nimage\t%s\n", d.MicrovmID, d.ImageIdentifier)
		if d.ExecExitCode != nil {
			fmt.Fprintf(tw, "exit\t%d\n", *d.ExecExitCode)
		}
		if n := d.Network; n != nil && n.DeniedCount > 0 {
			// Why a download failed, before the MicroVM (and its
			// `network show`) is gone.
			var last []string
			for _, x := range n.Denied[max(0, len(n.Denied)-3):] {
				last = append(last, fmt.Sprintf("%s:%d %s", x.Host, x.Port, x.Why))
			}
			fmt.Fprintf(tw, "network\t%d refused by the policy (latest: %s)\n", n.DeniedCount, strings.Join(last, ", "))
		}
		if d.Kept {
			fmt.Fprintf(tw, "endpoint\t%s\nkept\tyes: remembered, so attach with --microvm-id %s (or MICROVM_ID) alone; `microvm terminate %s --delete-image` ends it\n", d.Endpoint, d.MicrovmID, d.MicrovmID)
		} else {
			fmt.Fprintf(tw, "teardown\t%s\n", workflow.LeakedText(d.Leaked))
		}
		return tw.Flush()
	}
}

// nonNil is list, or an empty list for nil: the envelope's arrays are never
// null.
func nonNil(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}

// runSetup is what a run, single or fleet, has checked and opened before it
// launches anything: the caller closes p.
type runSetup struct {
	dir    string // the ledger's directory
	env    map[string]string
	net    *sandbox.Network // --network-allow, --secret...: nil for none
	size   client.SizeClass
	p      *plane
	binary string
	led    *ledger.Ledger
	rec    *ledger.Record
}

// prepare checks the flags a run and a fleet share, opens the plane, finds
// the daemon and begins the ledger record of the run (a fleet's image).
func (c *RunCmd) prepare(ctx context.Context, a *app) (*runSetup, error) {
	if c.Timeout <= 0 {
		return nil, render.InvalidArg("", "--timeout must be positive seconds, got %v", c.Timeout)
	}
	if c.Keepalive && !c.Keep {
		return nil, render.InvalidArg(taxonomy.FindingIdlePolicy, "--keepalive holds a kept VM awake; without --keep the run tears the VM down, and while its command runs the run keeps it awake already")
	}
	if c.Keepalive && c.Count > 1 {
		return nil, render.InvalidArg("", "--keepalive holds one kept VM; it is not for a fleet (--count)")
	}
	if c.Exec != "" && c.Timeout > float64(c.MaxDurationSec) {
		a.Warn("--timeout %vs is longer than --max-duration-sec %d: the platform ends the VM at its maximum duration, before the command's timeout (finding max-duration)", c.Timeout, c.MaxDurationSec)
	}
	if err := checkLaunch(c.MaxDurationSec, c.MaxIdleSec, c.SuspendedSec); err != nil {
		return nil, err
	}
	env, err := parseEnv(c.LaunchEnv)
	if err != nil {
		return nil, err
	}
	net, err := c.NetworkFlags.network(a.Env)
	if err != nil {
		return nil, err
	}
	if net != nil && !c.Local {
		// Refused before anything is opened, credentials included.
		if err := sandbox.CheckNetworkEndpoint(cplane.ConfiguredEndpoint(c.ControlEndpoint, a.Env)); err != nil {
			return nil, err
		}
	}
	if c.ImageVersion != "" {
		if err := cplane.CheckImageVersion(c.ImageVersion); err != nil {
			return nil, err
		}
	}
	size, err := client.SizeClassFromBaseline(c.Memory)
	if err != nil {
		return nil, err
	}
	if c.Image != "" && c.Memory != taxonomy.DefaultBaselineMiB {
		// A launch takes no size: the class is the image's, fixed when it
		// was built. Reported as applied, it was priced and printed while
		// the guest had the image's (issue 51.2).
		return nil, render.InvalidArg(taxonomy.FindingMemorySelectsBaseline,
			"--memory %d beside --image: a size class belongs to the image, chosen when it is built, and a launch cannot change it; drop --memory to launch %s at its own class, or build an image with --memory %d", c.Memory, c.Image, c.Memory)
	}
	dir, err := ledgerDir(a, c.StateDir)
	if err != nil {
		return nil, err
	}
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	binary := c.Binary
	if c.Image == "" && c.From == "" {
		// Resolved before the ledger begins: a run that cannot build makes
		// no record and prints no teardown.
		if binary, err = p.daemonFor(c.Binary, c.Agentd); err != nil {
			p.close()
			return nil, err
		}
	}
	led, err := ledger.Open(dir, nil)
	if err != nil {
		p.close()
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "%v; pass --state-dir", err)
	}
	rec, err := led.Begin(p.Region().String())
	if err != nil {
		p.close()
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "%v; pass --state-dir", err)
	}
	return &runSetup{dir: dir, env: env, net: net, size: size, p: p, binary: binary, led: led, rec: rec}, nil
}
