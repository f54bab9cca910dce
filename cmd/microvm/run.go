package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// defaultWorkdir is the WORKDIR the generated Dockerfile sets: the managed
// base declares none (finding base-images-lack-workdir).
const defaultWorkdir = "/workspace"

// ImageFlags shape an image build; run and build share them.
type ImageFlags struct {
	ArtifactURI    string `name:"artifact-uri" help:"Where the build artifact already is (s3:// on AWS, file:// for an emulator); nothing is uploaded." placeholder:"URI"`
	Name           string `help:"Image name; unset, a fresh per-invocation name (reusing a name can replay a clientToken and wedge the image)." placeholder:"NAME"`
	Memory         int    `help:"Baseline MiB, selecting a documented size class." enum:"${memory}" default:"${default_memory}"`
	Dockerfile     string `help:"A Dockerfile to build instead of the generated stanza; its FROM must match the base, and it needs a WORKDIR." type:"path" placeholder:"PATH"`
	RepairIdentity bool   `name:"repair-identity" help:"Give the guest the capabilities identity repair needs (sethostname, the boot_id bind mount)."`
	Port           int    `help:"The daemon's port inside the guest." default:"${default_port}"`
}

// RunCmd builds (or names) an image, launches a MicroVM, runs one command,
// reports the cost and tears everything down.
type RunCmd struct {
	Binary         string   `arg:"" optional:"" help:"The agentd binary baked into the image as its CMD: aarch64 for AWS, the host's for an emulator (found as --agentd is when omitted). Ignored with --image." type:"path"`
	Image          string   `help:"Launch this existing image instead of building one: its ARN, or its name, resolved through every page of the account's image listing." placeholder:"IDENTIFIER"`
	ImageVersion   string   `name:"image-version" help:"Launch this image version instead of the latest active one." placeholder:"VERSION"`
	Exec           string   `help:"A shell command to run in the VM; omitted, the run only launches and tears down, which checks that the image boots." placeholder:"COMMAND"`
	Egress         bool     `help:"Give the VM outbound network."`
	LaunchEnv      []string `name:"launch-env" help:"KEY=VALUE for every exec in the VM, repeatable; delivered once in the runHookPayload (4096 bytes with the token)." placeholder:"KEY=VALUE" sep:"none"`
	Keep           bool     `help:"Leave the VM (and a built image) running and report the agent token to attach with; both keep billing until terminated."`
	Timeout        float64  `help:"Seconds to wait for the exec." default:"300"`
	MaxIdleSec     int      `name:"max-idle-sec" help:"Suspend the VM after this many seconds without inbound traffic." default:"600"`
	SuspendedSec   int      `name:"suspended-sec" help:"Terminate the VM after this many seconds suspended; a resume after that fails." default:"600"`
	MaxDurationSec int      `name:"max-duration-sec" help:"Hard ceiling on the VM's life, in seconds (at most 28800)." default:"3600"`
	StateDir       string   `name:"state-dir" help:"Where the run ledger is written; defaults to $MICROVM_STATE_DIR or the user's state directory." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	ImageFlags
	InfraFlags
	LifecycleFlags
	FleetFlags
}

// checkLaunch refuses, before any call, the launch values a finding says
// the service refuses.
func checkLaunch(maxDuration, maxIdle, suspended int) error {
	if maxDuration < taxonomy.MinDurationSec || maxDuration > taxonomy.MaxDurationSec {
		return invalidArg(taxonomy.FindingMaxDuration, "--max-duration-sec %d is outside %d..%d", maxDuration, taxonomy.MinDurationSec, taxonomy.MaxDurationSec)
	}
	if maxIdle < taxonomy.MinIdleDurationSec {
		return invalidArg(taxonomy.FindingIdlePolicy, "--max-idle-sec %d is under the idle policy's minimum of %d", maxIdle, taxonomy.MinIdleDurationSec)
	}
	if suspended < 0 {
		return invalidArg(taxonomy.FindingIdlePolicy, "--suspended-sec %d is negative", suspended)
	}
	return nil
}

// freshName is a per-invocation image name: a fixed one can replay a
// clientToken (finding client-token-permanent).
func freshName() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("microvm-cli-%d-%s", time.Now().Unix(), hex.EncodeToString(b[:]))
}

// daemonFor is the agentd an image is built from: BINARY, else (against an
// emulator) the host agentd the emulator's guests run.
func (p *plane) daemonFor(binary, agentdFlag string) (string, error) {
	switch {
	case binary != "":
		return binary, nil
	case p.emu != nil:
		return p.emu.Agentd, nil
	case p.local:
		return embedded.FindAgentd(agentdFlag, p.a.env)
	}
	return "", client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingArm64Only,
		"no BINARY and no --image: a build on AWS bakes an aarch64 agentd into the image (make build writes bin/linux-arm64/agentd), or --image launches an existing one")
}

// buildImage runs one build with the flags in f and reports its progress.
func (p *plane) buildImage(ctx context.Context, f ImageFlags, infra InfraFlags, binary, agentdFlag, baseVersion string, reuse bool, rec *ledger.Record) (*build.Result, error) {
	a := p.a
	daemonPath, err := p.daemonFor(binary, agentdFlag)
	if err != nil {
		return nil, err
	}
	daemon, err := os.ReadFile(daemonPath)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the daemon binary: %w", err)
	}
	var dockerfile, context string
	if f.Dockerfile != "" {
		if p.local {
			// A local build carries what the Dockerfile copies from its
			// directory; an AWS artifact stays the Dockerfile and the daemon.
			context = filepath.Dir(f.Dockerfile)
		}
		b, err := os.ReadFile(f.Dockerfile)
		if err != nil {
			return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the Dockerfile: %w", err)
		}
		dockerfile = string(b)
		if p.local {
			// Named only if the emulator did not run the Dockerfile after
			// all (no base image to build from): then its guests run on
			// the host's system directories without these steps.
			defer func() {
				if p.steps != nil && p.steps.performed() {
					return
				}
				steps, err := emulator.UnperformedSteps(b)
				if err == nil && len(steps) > 0 {
					for _, s := range steps {
						a.warn("the emulator does not perform this Dockerfile step; its guests run without it: %s", s)
					}
					a.warn("with no base image for FROM (--base-image, or a registry to pull it from), the guests run on this machine's system directories")
				}
			}()
		}
	}
	if baseVersion != "" {
		if err := cplane.CheckImageVersion(baseVersion); err != nil {
			return nil, err
		}
	}
	size, err := client.SizeClassFromBaseline(f.Memory)
	if err != nil {
		return nil, err
	}
	role, err := p.buildRole(infra.BuildRoleARN)
	if err != nil {
		return nil, err
	}
	up, err := p.uploader(ctx, f.ArtifactURI, infra.Bucket)
	if err != nil {
		return nil, err
	}
	name := f.Name
	if name == "" {
		name = freshName()
		if reuse {
			name = "microvm-cli" // the stable stem: the hash makes it unique
		}
	}
	sent, sentDone := a.transfer("uploading the artifact")
	update, stop := func(string) {}, func() {}
	defer func() { stop() }()
	uploading := false
	spec := build.Spec{
		Daemon: daemon, Dockerfile: dockerfile, Context: context, Workdir: defaultWorkdir, Port: f.Port, Name: name, Reuse: reuse,
		BuildRoleARN: role, BaseImageVersion: baseVersion, Size: size, RepairIdentity: f.RepairIdentity,
		Machine: p.guestMachine(), Wait: p.wait(30 * time.Minute), Ledger: rec,
		Progress: func(pr build.Progress) {
			switch pr.Stage {
			case "upload":
				uploading = true
				sent(pr.Sent, pr.Size)
			case "build":
				if uploading {
					sentDone()
					uploading = false
					update, stop = a.waiting("building image " + name)
					if p.steps != nil {
						p.steps.setLabel(update)
					}
				}
				if pr.Poll != nil {
					update(fmt.Sprintf("building image %s: %s", name, pr.Poll.State))
				}
			}
		},
	}
	a.progress("building image %s (%s)", name, size)
	res, err := build.Build(ctx, p.cp, up, spec)
	if uploading {
		sentDone()
	}
	return res, err
}

// resolveImage turns --image into an ARN: an ARN passes through, a name is
// looked up through every page of the listing.
func (p *plane) resolveImage(ctx context.Context, id string) (arn, name string, err error) {
	if strings.HasPrefix(id, "arn:") {
		_, n, _ := strings.Cut(id, ":microvm-image:")
		return id, n, nil
	}
	found, err := p.findImage(ctx, id)
	if err != nil {
		return "", "", err
	}
	if found == nil {
		return "", "", client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingImageARNColon,
			"no image named %s in %s; `microvm build` makes one (the service answers a bare name with a 400 that says nothing about names)", id, p.region)
	}
	p.a.progress("resolved image name %s to %s", id, aws.ToString(found.ImageArn))
	return aws.ToString(found.ImageArn), id, nil
}

func (c *RunCmd) run(ctx context.Context, a *app) (*result, error) {
	if c.Count != 0 || c.Parallel != 0 {
		return c.runFleet(ctx, a) // fleet.go
	}
	if c.Keep && c.Local {
		return nil, invalidArg("", "--keep with --local: the in-process emulator stops when this command exits; run `microvm emulator` and pass --control-endpoint to keep a VM")
	}
	if c.Timeout <= 0 {
		return nil, invalidArg("", "--timeout must be positive seconds, got %v", c.Timeout)
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
	dir, err := ledgerDir(a, c.StateDir)
	if err != nil {
		return nil, err
	}
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	binary := c.Binary
	if c.Image == "" {
		// Resolved before the ledger begins: a run that cannot build makes
		// no record and prints no teardown.
		if binary, err = p.daemonFor(c.Binary, c.Agentd); err != nil {
			return nil, err
		}
	}
	led, err := ledger.Open(dir, nil)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "%v; pass --state-dir", err)
	}
	rec, err := led.Begin(p.region.String())
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "%v; pass --state-dir", err)
	}
	out := cliapi.RunData{Leaked: []string{}}
	var sb *sandbox.Sandbox
	var built *build.Result
	var runStart time.Time
	var buildTook, ranFor time.Duration
	// Without a client (CloudWatch Logs unreachable, or on AWS while the
	// control plane is local), teardown names the log group as left behind.
	// An untyped nil: a nil *Client in the interface would be called.
	var logs sandbox.LogGroupDeleter
	if lc, lerr := p.logs(ctx); lerr == nil {
		logs = lc
	}

	body := func() error {
		arn, name := "", ""
		if c.Image != "" {
			var err error
			if arn, name, err = p.resolveImage(ctx, c.Image); err != nil {
				return err
			}
			_ = rec.Update(func(r *ledger.Run) { r.Image, r.ImageARN = name, arn })
			a.progress("launching from the existing image %s", arn)
		} else {
			start := time.Now()
			res, err := p.buildImage(ctx, c.ImageFlags, c.InfraFlags, binary, c.Agentd, "", false, rec)
			if res != nil {
				built = res
				out.ImageIdentifier, out.ImageName = res.ImageARN, res.Name
			}
			if err != nil {
				return err
			}
			buildTook = time.Since(start)
			arn, name = res.ImageARN, res.Name
			a.progress("image %s built in %s", arn, humanDuration(buildTook))
		}
		out.ImageIdentifier, out.ImageName = arn, name
		update, stop := a.waiting("launching a MicroVM from " + name)
		w := p.wait(10 * time.Minute)
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
		}
		if built != nil {
			o.LogGroup = built.LogGroup
		}
		launched := time.Now()
		s, err := sandbox.Launch(ctx, p.cp, o)
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
		a.progress("MicroVM %s RUNNING at %s after %s", sb.ID(), out.Endpoint, humanDuration(time.Since(launched)))
		if p.emu != nil {
			if l, ok := p.emu.Server.GuestLimits(sb.ID()); ok {
				out.LocalLimits = &cliapi.LocalLimits{Applied: nonNil(l.Applied), Missing: nonNil(l.Missing)}
				if len(l.Missing) > 0 {
					a.warn("this local guest runs without some limits (microvm doctor --local says why): %s", strings.Join(l.Missing, "; "))
				}
			}
		}
		if c.Exec == "" {
			return nil
		}
		ro := client.RunOptions{StartOptions: client.StartOptions{ExecID: client.NewExecID(), Shell: true}, ClientTimeout: time.Duration(c.Timeout * float64(time.Second))}
		if !a.g.JSON && !a.g.Dense {
			// The child's bytes, exactly and as they arrive.
			ro.Stdout, ro.Stderr = a.stdout, a.stderr
		}
		a.progress("exec %s: %s", ro.ExecID, c.Exec)
		r, err := sb.Run(ctx, []string{c.Exec}, ro)
		if err != nil {
			return err
		}
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
	}
	if sb != nil || built != nil {
		if built != nil && !built.Reused {
			_ = rec.Update(func(r *ledger.Run) { r.ImageOwned = true })
		}
	}

	// Teardown: by default, on every path, interrupted or not.
	switch {
	case c.Keep && sb != nil && err == nil:
		tok := sb.AgentToken()
		out.AgentToken, out.Kept = &tok, true
		a.progress("keeping MicroVM %s and image %s: both bill until `microvm terminate %s --delete-image --image-identifier %s`", sb.ID(), out.ImageIdentifier, sb.ID(), out.ImageIdentifier)
	case sb != nil:
		a.progress("tearing down MicroVM %s", sb.ID())
		rep := sb.Terminate(ctx, sandbox.TeardownOptions{DeleteImage: true, DeleteLogGroup: true})
		for _, l := range rep.Leaked {
			out.Leaked = append(out.Leaked, l.Kind+" "+l.ID)
			a.warn("could not delete %s %s, which may still bill: %s", l.Kind, l.ID, l.Reason)
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
		a.progress("teardown clean: nothing of this run is left")
	}

	// The cost of what ran, every line labelled; nothing ran, nothing to price.
	if rep, cerr := runCost(out.ImageName, size, p.region, buildTook, ranFor, built != nil && !built.Reused, sb != nil); cerr == nil && made {
		c := reportJSON(rep)
		out.Cost = &c
		if !a.g.Quiet && !a.g.JSON {
			fmt.Fprintln(a.stderr, rep.String()) // its text carries any staleness warning
		} else if rep.Staleness != "" {
			a.warn("%s", rep.Staleness)
		}
	}
	if ranFor > 0 {
		v := ranFor.Seconds()
		out.RunningSeconds = &v
	}
	if buildTook > 0 {
		v := buildTook.Seconds()
		out.BuildSeconds = &v
	}

	if ctx.Err() != nil {
		return nil, &failure{err: client.Errorf(taxonomy.KindInterrupted, taxonomy.FindingBuildLogGroupSurvives,
			"interrupted; teardown ran, and anything it could not delete is named in data.leaked (%s)", leakedText(out.Leaked)), data: out}
	}
	if err != nil {
		ce := asClientError(err)
		return nil, &failure{err: ce, data: out, human: runHuman(out, a, true)}
	}
	return &result{typ: cliapi.TypeRun, data: out, human: runHuman(out, a, false)}, nil
}

func leakedText(l []string) string {
	if len(l) == 0 {
		return "nothing leaked"
	}
	return "leaked: " + strings.Join(l, ", ")
}

// teardownImage deletes an image this run built but never launched from, and
// its build log group; it returns what it could not delete.
func teardownImage(ctx context.Context, p *plane, arn, group string, logs sandbox.LogGroupDeleter, a *app) []string {
	ctx = context.WithoutCancel(ctx)
	var leaked []string
	if _, err := cplane.ParseImageRef(arn); err == nil {
		if err := p.deleteImage(ctx, arn); err != nil {
			leaked = append(leaked, "image "+arn)
			a.warn("could not delete image %s: %v", arn, err)
		}
	}
	if group != "" && logs != nil {
		if err := deleteGroup(ctx, logs, group); err != nil {
			leaked = append(leaked, "log_group "+group)
			a.warn("could not delete the build log group %s: %v", group, err)
		}
	}
	return leaked
}

// runCost prices what a run measured with the pinned rate table.
func runCost(name string, size client.SizeClass, region client.Region, buildFor, ranFor time.Duration, built, launched bool) (cost.Report, error) {
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
	return cost.RunReport("run "+name, size, u, cost.Pinned(region), time.Now())
}

// runHuman is the human form: the child's bytes already went to stdout as
// they arrived, so stdout gets nothing more; the summary goes to stderr.
func runHuman(d cliapi.RunData, a *app, failed bool) func(io.Writer) error {
	return func(io.Writer) error {
		if a.g.Quiet && !failed {
			return nil
		}
		tw := tabwriter.NewWriter(a.stderr, 0, 2, 2, ' ', 0)
		fmt.Fprintf(tw, "microvm\t%s\nimage\t%s\n", d.MicrovmID, d.ImageIdentifier)
		if d.ExecExitCode != nil {
			fmt.Fprintf(tw, "exit\t%d\n", *d.ExecExitCode)
		}
		if d.Kept {
			fmt.Fprintf(tw, "endpoint\t%s\nkept\tyes: attach with --endpoint %s --microvm-id %s --agent-token (data.agentToken under --json)\n", d.Endpoint, d.Endpoint, d.MicrovmID)
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
