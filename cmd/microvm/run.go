package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/kept"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// defaultWorkdir is the WORKDIR the generated Dockerfile sets: the managed
// base declares none (finding base-images-lack-workdir).
const defaultWorkdir = "/workspace"

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
	StateDir       string        `name:"state-dir" help:"Where the run ledger is written; defaults to $MICROVM_STATE_DIR or the user's state directory." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	ImageFlags
	InfraFlags
	LifecycleFlags
	FleetFlags
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
	if c.Count != 0 || c.Parallel != 0 {
		return c.runFleet(ctx, a) // fleet.go
	}
	if c.Keep && c.Local {
		return nil, render.InvalidArg("", "--keep with --local: the in-process emulator stops when this command exits; run `microvm emulator` and pass --control-endpoint to keep a VM")
	}
	st, err := c.prepare(ctx, a)
	if err != nil {
		return nil, err
	}
	defer st.p.close()
	env, size, p, binary, rec, dir := st.env, st.size, st.p, st.binary, st.rec, st.dir
	out := cliapi.RunData{Leaked: []string{}}
	var sb *sandbox.Sandbox
	var built *build.Result
	var runStart time.Time
	var buildTook, ranFor time.Duration
	// Without a client (CloudWatch Logs unreachable, or on AWS while the
	// control plane is local), teardown names the log group as left behind.
	logs := p.LogGroups(ctx)

	body := func() error {
		arn, name := "", ""
		if c.Image != "" {
			var err error
			if arn, name, err = p.resolveImage(ctx, c.Image); err != nil {
				return err
			}
			_ = rec.Update(func(r *ledger.Run) { r.Image, r.ImageARN = name, arn })
			// Priced and reported at the image's own class.
			if cls, err := p.imageClass(ctx, arn, c.ImageVersion); err == nil {
				size = cls
			}
			a.Progress("launching from the existing image %s (%s)", arn, size)
		} else {
			start := time.Now()
			res, err := p.buildImage(ctx, c.ImageFlags, c.InfraFlags, binary, c.Agentd, "", c.Reuse, rec)
			if res != nil {
				built = res
				out.ImageIdentifier, out.ImageName = res.ImageARN, res.Name
			}
			if err != nil {
				return err
			}
			buildTook = time.Since(start)
			arn, name = res.ImageARN, res.Name
			a.Progress("image %s built in %s", arn, render.HumanDuration(buildTook))
		}
		out.ImageIdentifier, out.ImageName = arn, name
		// A reused image is recorded too, so terminate --delete-image finds it.
		_ = rec.Update(func(r *ledger.Run) {
			if r.ImageARN == "" {
				r.Image, r.ImageARN = name, arn
			}
		})
		update, stop := a.Waiting("launching a MicroVM from " + name)
		w := p.Wait(10 * time.Minute)
		launching := true
		w.Progress = func(pr cplane.Progress) {
			// The same options serve the teardown's waits, which say
			// their own progress.
			if launching {
				update("launching a MicroVM: " + pr.State)
			}
		}
		o := sandbox.Options{
			Image: arn, Version: c.ImageVersion, ImageName: name, ImageOwned: built != nil && !built.Reused,
			ExecutionRoleARN: c.ExecutionRoleARN, Env: env,
			Idle:        &cplane.IdlePolicy{MaxIdle: time.Duration(c.MaxIdleSec) * time.Second, SuspendedFor: time.Duration(c.SuspendedSec) * time.Second},
			MaxDuration: time.Duration(c.MaxDurationSec) * time.Second,
			Connectors:  cplane.Connectors{InternetEgress: c.Egress},
			Port:        c.Port, Wait: w, Ledger: rec, Logs: logs,
			Warn: func(msg string) { a.Warn("%s", msg) },
		}
		if built != nil {
			o.LogGroup = built.LogGroup
		}
		launched := time.Now()
		s, err := sandbox.Launch(ctx, p.Control(), o)
		launching = false
		stop()
		sb = s
		if sb != nil {
			out.MicrovmID = sb.ID()
			runStart = launched
		}
		if err != nil {
			return err
		}
		out.Endpoint = sb.Endpoint()
		a.Progress("MicroVM %s RUNNING at %s after %s", sb.ID(), out.Endpoint, render.HumanDuration(time.Since(launched)))
		if p.emu != nil {
			if l, ok := p.emu.Server.GuestLimits(sb.ID()); ok {
				// The emulator warned already (lifecycle.go); JSON lists them.
				out.LocalLimits = &cliapi.LocalLimits{Applied: nonNil(l.Applied), Missing: nonNil(l.Missing)}
			}
		}
		if c.Exec == "" {
			return nil
		}
		ro := client.RunOptions{StartOptions: client.StartOptions{ExecID: client.NewExecID(), Shell: true}, ClientTimeout: time.Duration(c.Timeout * float64(time.Second))}
		if !a.JSON && !a.Dense {
			// The child's bytes, exactly and as they arrive.
			ro.Stdout, ro.Stderr = a.Stdout, a.Stderr
		}
		a.Progress("exec %s: %s", ro.ExecID, c.Exec)
		started := time.Now()
		r, err := sb.Run(ctx, []string{c.Exec}, ro)
		if err != nil {
			return err
		}
		// The ledger keeps what each command used, for `microvm cost ID
		// --by-command`.
		_ = rec.Update(func(run *ledger.Run) {
			run.Commands = append(run.Commands, ledger.Command{ExecID: r.ExecID, Command: c.Exec, Start: started, End: time.Now(),
				ExitCode: r.ExitCode, Signal: r.Signal, OOMKilled: r.OOMKilled, Usage: r.Usage})
		})
		out.Stdout, out.Stderr, out.Truncated = r.Stdout, r.Stderr, r.Truncated
		if r.ExitCode != nil {
			v := int64(*r.ExitCode)
			out.ExecExitCode = &v
		}
		return r.Err()
	}
	err = body()
	if !runStart.IsZero() {
		ranFor = time.Since(runStart)
		// The stretch the cost's running lines are billed over, so the
		// ledger can split them over the commands later.
		_ = rec.Update(func(r *ledger.Run) {
			r.BaselineMiB = size.BaselineMiB()
			r.Running = append(r.Running, ledger.Span{Start: runStart, End: runStart.Add(ranFor)})
		})
	}
	if sb != nil || built != nil {
		if built != nil && !built.Reused {
			_ = rec.Update(func(r *ledger.Run) { r.ImageOwned = true })
		}
	}

	held := false // --keepalive held the kept VM until Ctrl-C: that interrupt is the expected end
	// Teardown: by default, on every path, interrupted or not.
	switch {
	case c.Keep && sb != nil && err == nil:
		tok := sb.AgentToken()
		out.AgentToken, out.Kept = &tok, true
		a.remember(dir, kept.MicroVM{ID: sb.ID(), Endpoint: out.Endpoint, AgentToken: tok, Port: c.Port, ControlEndpoint: p.Endpoint(), Region: p.Region().String()})
		a.Progress("keeping MicroVM %s and image %s: both bill until `microvm terminate %s --delete-image`", sb.ID(), out.ImageIdentifier, sb.ID())
		if c.Keepalive {
			// Always printed: the command holds the terminal until Ctrl-C.
			fmt.Fprintf(a.Stderr, "microvm: holding MicroVM %s awake; Ctrl-C stops, and it idles out after its maxIdleDurationSeconds from the last ping\n", sb.ID())
			if _, herr := sb.KeepAwake(ctx, c.KeepaliveEvery); herr != nil {
				a.Warn("stopped holding MicroVM %s awake: %v", sb.ID(), herr)
			}
			held = true
		}
	case sb != nil:
		a.Progress("tearing down MicroVM %s", sb.ID())
		rep := sb.Terminate(ctx, sandbox.TeardownOptions{DeleteImage: true, DeleteLogGroup: true})
		for _, l := range rep.Leaked {
			out.Leaked = append(out.Leaked, l.Kind+" "+l.ID)
			a.Warn("could not delete %s %s, which may still bill: %s", l.Kind, l.ID, l.Reason)
		}
	case built != nil && !built.Reused && built.ImageARN != "":
		// The build ran but nothing launched: the image is still this run's.
		out.Leaked = append(out.Leaked, teardownImage(ctx, p, built.ImageARN, built.LogGroup, logs, a)...)
		_ = rec.Update(func(r *ledger.Run) { r.Leaked, r.Closed = out.Leaked, len(out.Leaked) == 0 })
	default:
		_ = rec.Update(func(r *ledger.Run) { r.Closed = true })
	}
	if built != nil && !built.Reused && !out.Kept && len(out.Leaked) == 0 && c.ArtifactURI == "" {
		// The image is gone, so the artifact this run put in the local
		// store is nobody's; S3 objects are the bucket's lifecycle's.
		removeLocalArtifact(built.ArtifactURI)
	}
	made := sb != nil || (built != nil && !built.Reused && built.ImageARN != "")
	if made && len(out.Leaked) == 0 && !out.Kept {
		a.Progress("teardown clean: nothing of this run is left")
	}

	// The cost of what ran, every line labelled; nothing ran, nothing to price.
	label := "run " + out.ImageName
	if p.Local() {
		// An emulator bills nothing: the figures are what the same run
		// would cost on AWS, and the label says so wherever it is read.
		label += " (local: nothing is billed; priced as AWS would bill it)"
	}
	if rep, cerr := runCost(label, size, p.Region(), buildTook, ranFor, built != nil && !built.Reused, sb != nil); cerr == nil && made {
		c := render.CostReport(rep)
		out.Cost = &c
		stale := rep.Staleness
		rep.Staleness = "" // said once a day at most, by staleRates
		if !a.Quiet && !a.JSON {
			fmt.Fprintln(a.Stderr, rep.String())
		}
		a.StaleRates(stale)
	}
	if ranFor > 0 {
		v := ranFor.Seconds()
		out.RunningSeconds = &v
	}
	if buildTook > 0 {
		v := buildTook.Seconds()
		out.BuildSeconds = &v
	}

	if ctx.Err() != nil && !held {
		return nil, &render.Failure{Err: client.Errorf(taxonomy.KindInterrupted, taxonomy.FindingBuildLogGroupSurvives,
			"interrupted; teardown ran, and anything it could not delete is named in data.leaked (%s)", leakedText(out.Leaked)), Data: out}
	}
	if err != nil {
		ce := render.AsClientError(err)
		return nil, &render.Failure{Err: ce, Data: out, Human: runHuman(out, a, true)}
	}
	res := &render.Result{Type: cliapi.TypeRun, Data: out, Human: runHuman(out, a, false)}
	if out.Kept && c.Exec == "" {
		// Like `docker run -d`, the id is the one line on stdout, so a
		// shell keeps it: export MICROVM_ID=$(microvm run --keep).
		human := res.Human
		res.Human = func(w io.Writer) error {
			if _, err := fmt.Fprintln(w, out.MicrovmID); err != nil {
				return err
			}
			return human(w)
		}
	}
	return res, nil
}

func leakedText(l []string) string {
	if len(l) == 0 {
		return "nothing leaked"
	}
	return "leaked: " + strings.Join(l, ", ")
}

// runCost prices what a run measured with the pinned rate table.
func runCost(label string, size client.SizeClass, region client.Region, buildFor, ranFor time.Duration, built, launched bool) (cost.Report, error) {
	u := cost.Usage{Launched: launched}
	var err error
	if ranFor > 0 {
		if u.Running, err = cost.MeasuredDuration(ranFor); err != nil {
			return cost.Report{}, err
		}
	}
	if buildFor > 0 {
		if u.ImageBuild, err = cost.MeasuredDuration(buildFor); err != nil {
			return cost.Report{}, err
		}
	}
	if built {
		// A built image is stored: its size is unknown here, so the
		// baseline memory stands in, as the reference does.
		u.ImageGB = decimal.NewFromInt(int64(size.BaselineMiB())).Div(decimal.NewFromInt(1024))
	}
	return cost.RunReport(label, size, u, cost.Pinned(region), time.Now())
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
		if d.Kept {
			fmt.Fprintf(tw, "endpoint\t%s\nkept\tyes: remembered, so attach with --microvm-id %s (or MICROVM_ID) alone; `microvm terminate %s --delete-image` ends it\n", d.Endpoint, d.MicrovmID, d.MicrovmID)
		} else {
			fmt.Fprintf(tw, "teardown\t%s\n", leakedText(d.Leaked))
		}
		return tw.Flush()
	}
}

// removeLocalArtifact deletes a file:// artifact and its directory when that
// is left empty; any other URI is left alone.
func removeLocalArtifact(uri string) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || u.Path == "" {
		return
	}
	if os.Remove(u.Path) == nil {
		_ = os.Remove(filepath.Dir(u.Path)) // only if empty
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
	if c.Image == "" {
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
	return &runSetup{dir: dir, env: env, size: size, p: p, binary: binary, led: led, rec: rec}, nil
}
