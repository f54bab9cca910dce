package workflow

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Image is what a workflow launches from: an existing image (Identifier,
// its ARN or name), else the one Build makes.
type Image struct {
	Identifier string
	// Version launches this image version instead of the latest active one.
	Version string
	// Build makes the image when Identifier is empty; rec is the ledger
	// record the build writes to.
	Build func(ctx context.Context, rec *ledger.Record) (*build.Result, error)
}

// Step names one point of a workflow's progress.
type Step int

// The steps an Event reports, in the order a run reaches them.
const (
	// ImageFound: the image named Name is Image.
	ImageFound Step = iota + 1
	// ImageResolved: launching from the existing image Image, at Size.
	ImageResolved
	// ImageBuilt: Image was built in Took.
	ImageBuilt
	// Launching: a launch from Name began.
	Launching
	// LaunchPolled: the launch's poll saw State.
	LaunchPolled
	// Launched: the launch returned, whatever it answered.
	Launched
	// Running: MicrovmID is RUNNING at Endpoint, Took after the launch began.
	Running
	// Exec: the command (Command) starts as ExecID.
	Exec
	// TearingDown: MicrovmID is being terminated.
	TearingDown
	// Clean: nothing the workflow made is left.
	Clean
	// FleetLaunching: member Index of Count launches from Name.
	FleetLaunching
	// FleetRunning: member Index of Count, MicrovmID, is RUNNING.
	FleetRunning
	// FleetPriced: the fleet's Cost (or why not, Err), before its image
	// goes.
	FleetPriced
)

// Event is one step of a workflow's progress; only the fields its Step
// names are set.
type Event struct {
	Step                Step
	Image, Name, State  string
	MicrovmID, Endpoint string
	ExecID, Command     string
	Size                client.SizeClass
	Took                time.Duration
	Index, Count        int
	Cost                *cost.Report
	Err                 error
	// Made says the workflow launched or built something.
	Made bool
}

// Launch is what every MicroVM of a workflow is launched with.
type Launch struct {
	ExecutionRoleARN string
	Env              map[string]string
	MaxIdle          time.Duration
	SuspendedFor     time.Duration
	MaxDuration      time.Duration
	Egress           bool
	Port             int
	// Network, when set, launches each MicroVM under a network policy
	// with secrets kept outside the guest (sandbox.Network); only a local
	// emulator enforces one, and on AWS the workflow is refused before it
	// builds or launches anything (finding egress-connector-or-none).
	Network *sandbox.Network
}

func (l Launch) options(p *platform.Platform) sandbox.Options {
	return sandbox.Options{ExecutionRoleARN: l.ExecutionRoleARN, Env: l.Env,
		Idle:        &cplane.IdlePolicy{MaxIdle: l.MaxIdle, SuspendedFor: l.SuspendedFor},
		MaxDuration: l.MaxDuration,
		Connectors:  cplane.Connectors{InternetEgress: l.Egress},
		Port:        l.Port, Wait: p.Wait(10 * time.Minute), Network: l.Network}
}

// checkNetwork refuses a network policy the platform cannot enforce, before
// anything is built or launched.
func (l Launch) checkNetwork(p *platform.Platform) error {
	if l.Network == nil {
		return nil
	}
	return sandbox.CheckNetwork(p.Control())
}

// Options are one run's.
type Options struct {
	Platform *platform.Platform
	Image    Image
	Launch   Launch
	// Command is a shell command run in the MicroVM; empty, the run only
	// launches and tears down, which checks that the image boots.
	Command string
	Timeout time.Duration
	// Size is the class a built image gets; an existing image's own class
	// replaces it, since a launch cannot change it.
	Size client.SizeClass
	// Ledger is this run's record, begun by the caller.
	Ledger *ledger.Record
	// Keep leaves the MicroVM (and a built image) up: Result.Sandbox is it.
	Keep bool
	// ArtifactGiven says the build artifact was the caller's (an
	// artifact URI it named), so it is not this run's to delete.
	ArtifactGiven bool
	// Stdout and Stderr receive the command's bytes as they arrive; nil,
	// they are only in Result.Exec.
	Stdout, Stderr io.Writer
	Events         func(Event)
	Warn           func(msg string)
	// OnLaunch sees the sandbox as soon as it runs, before the command.
	OnLaunch func(*sandbox.Sandbox)
	// Mounts are volumes attached once the sandbox runs, before the
	// command (each one's newest generation laid at its path), in
	// Volumes; teardown saves a generation of each before it terminates.
	// A kept sandbox keeps their leases until they expire unrenewed.
	Volumes *checkpoint.Volumes
	Mounts  []checkpoint.Mount
}

// Result is what a run made, what it left and what it cost.
type Result struct {
	ImageARN, ImageName string
	// Built is the image this run built (nil: it named one).
	Built *build.Result
	// Sandbox is the MicroVM launched (nil: none); torn down unless Kept.
	Sandbox *sandbox.Sandbox
	// Endpoint is the MicroVM's, once it ran.
	Endpoint string
	// Exec is the command's result, when it ran to an answer.
	Exec *client.Result
	Kept bool
	// Leaked names, as "<kind> <id>", what teardown could not delete.
	Leaked []string
	// VolumesSaved are the generations teardown saved of the mounts.
	VolumesSaved []checkpoint.Manifest
	// Network is, under a network policy, what the policy allowed and
	// refused by the time the command ended (read before teardown, which
	// takes it away): the place to see why a download failed.
	Network *cliapi.NetworkState
	// Size is the class the run was priced at.
	Size              client.SizeClass
	BuildTook, RanFor time.Duration
	// Made says the run launched a MicroVM or built an image of its own.
	Made bool
	// Cost prices what ran (nil when nothing did); Local says the figures
	// are what AWS would bill, not a bill.
	Cost *cost.Report
}

func (o *Options) event(e Event) {
	if o.Events != nil {
		o.Events(e)
	}
}

func (o *Options) warn(format string, args ...any) {
	if o.Warn != nil {
		o.Warn(sprintf(format, args...))
	}
}

// Run builds (or names) an image, launches one MicroVM, runs the command,
// tears everything down (unless Keep), closes the ledger record, deletes
// this run's local artifact and prices what ran. The error is the first
// failure (a command's non-zero exit included); the result is filled either
// way, and on every path teardown has run.
func Run(ctx context.Context, o Options) (Result, error) {
	if err := noImage(o.Image); err != nil {
		return Result{Leaked: []string{}}, err
	}
	if err := o.Launch.checkNetwork(o.Platform); err != nil {
		return Result{Leaked: []string{}}, err
	}
	p, rec := o.Platform, o.Ledger
	out := Result{Leaked: []string{}, Size: o.Size}
	var sb *sandbox.Sandbox
	var attached []*checkpoint.Attachment
	var runStart time.Time
	// Without a client (CloudWatch Logs unreachable, or on AWS while the
	// control plane is local), teardown names the log group as left behind.
	logs := p.LogGroups(ctx)

	body := func() error {
		arn, name := "", ""
		if o.Image.Identifier != "" {
			var err error
			// Priced and reported at the image's own class.
			if arn, name, err = existingImage(ctx, p, o.Image, rec, o.event, &out.Size); err != nil {
				return err
			}
			o.event(Event{Step: ImageResolved, Image: arn, Size: out.Size})
		} else {
			start := time.Now()
			res, err := o.Image.Build(ctx, rec)
			if res != nil {
				out.Built = res
				out.ImageARN, out.ImageName = res.ImageARN, res.Name
			}
			if err != nil {
				return err
			}
			out.BuildTook = time.Since(start)
			arn, name = res.ImageARN, res.Name
			o.event(Event{Step: ImageBuilt, Image: arn, Took: out.BuildTook})
		}
		out.ImageARN, out.ImageName = arn, name
		// A reused image is recorded too, so terminate --delete-image finds it.
		update(rec, func(r *ledger.Run) {
			if r.ImageARN == "" {
				r.Image, r.ImageARN = name, arn
			}
		})
		o.event(Event{Step: Launching, Name: name})
		so := o.Launch.options(p)
		launching := true
		so.Wait.Progress = func(pr cplane.Progress) {
			// The same options serve the teardown's waits, which say
			// their own progress.
			if launching {
				o.event(Event{Step: LaunchPolled, Name: name, State: pr.State})
			}
		}
		so.Image, so.Version, so.ImageName = arn, o.Image.Version, name
		so.ImageOwned = out.Built != nil && !out.Built.Reused
		so.Ledger, so.Logs, so.Warn = rec, logs, func(msg string) { o.warn("%s", msg) }
		if out.Built != nil {
			so.LogGroup = out.Built.LogGroup
		}
		launched := time.Now()
		s, err := sandbox.Launch(ctx, p.Control(), so)
		launching = false
		o.event(Event{Step: Launched})
		sb = s
		if sb != nil {
			out.Sandbox = sb
			runStart = launched
		}
		if err != nil {
			return err
		}
		out.Endpoint = sb.Endpoint()
		o.event(Event{Step: Running, MicrovmID: sb.ID(), Endpoint: out.Endpoint, Took: time.Since(launched)})
		if o.OnLaunch != nil {
			o.OnLaunch(sb)
		}
		if err := attachVolumes(ctx, o, sb, &attached); err != nil {
			return err
		}
		if o.Command == "" {
			return nil
		}
		ro := client.RunOptions{StartOptions: client.StartOptions{ExecID: client.NewExecID(), Shell: true}, ClientTimeout: o.Timeout,
			Stdout: o.Stdout, Stderr: o.Stderr}
		o.event(Event{Step: Exec, ExecID: ro.ExecID, Command: o.Command})
		started := time.Now()
		r, err := sb.Run(ctx, []string{o.Command}, ro)
		if err != nil {
			return err
		}
		// The ledger keeps what each command used, for `microvm cost ID
		// --by-command`.
		update(rec, func(run *ledger.Run) {
			run.Commands = append(run.Commands, ledger.Command{ExecID: r.ExecID, Command: o.Command, Start: started, End: time.Now(),
				ExitCode: r.ExitCode, Signal: r.Signal, OOMKilled: r.OOMKilled, Usage: r.Usage})
		})
		out.Exec = &r
		return r.Err()
	}
	err := body()
	if sb != nil && o.Launch.Network != nil {
		if st, nerr := sb.Network(ctx); nerr == nil {
			out.Network = &st
		} else {
			o.warn("could not read the network policy's refusals: %v", nerr)
		}
	}
	built := out.Built
	if !runStart.IsZero() {
		out.RanFor = time.Since(runStart)
		// The stretch the cost's running lines are billed over, so the
		// ledger can split them over the commands later.
		update(rec, func(r *ledger.Run) {
			r.BaselineMiB = out.Size.BaselineMiB()
			r.Running = append(r.Running, ledger.Span{Start: runStart, End: runStart.Add(out.RanFor)})
		})
	}
	if (sb != nil || built != nil) && built != nil && !built.Reused {
		update(rec, func(r *ledger.Run) { r.ImageOwned = true })
	}

	// Teardown: by default, on every path, interrupted or not.
	switch {
	case o.Keep && sb != nil && err == nil:
		out.Kept = true
	case sb != nil:
		out.VolumesSaved = detachVolumes(ctx, o, attached)
		o.event(Event{Step: TearingDown, MicrovmID: sb.ID()})
		rep := sb.Terminate(ctx, sandbox.TeardownOptions{DeleteImage: true, DeleteLogGroup: true})
		for _, l := range rep.Leaked {
			out.Leaked = append(out.Leaked, l.Kind+" "+l.ID)
			o.warn("could not delete %s %s, which may still bill: %s", l.Kind, l.ID, l.Reason)
		}
	case built != nil && !built.Reused && built.ImageARN != "":
		// The build ran but nothing launched: the image is still this run's.
		out.Leaked = append(out.Leaked, DeleteImage(ctx, p, built.ImageARN, built.LogGroup, logs, o.Warn)...)
		update(rec, func(r *ledger.Run) { r.Leaked, r.Closed = out.Leaked, len(out.Leaked) == 0 })
	default:
		update(rec, func(r *ledger.Run) { r.Closed = true })
	}
	if built != nil && !built.Reused && !out.Kept && len(out.Leaked) == 0 && !o.ArtifactGiven {
		// The image is gone, so the artifact this run put in the local
		// store is nobody's; S3 objects are the bucket's lifecycle's.
		RemoveLocalArtifact(built.ArtifactURI)
	}
	out.Made = sb != nil || (built != nil && !built.Reused && built.ImageARN != "")
	if out.Made && len(out.Leaked) == 0 && !out.Kept {
		o.event(Event{Step: Clean})
	}

	// The cost of what ran, every line labelled; nothing ran, nothing to price.
	label := "run " + out.ImageName
	if p.Local() {
		// An emulator bills nothing: the figures are what the same run
		// would cost on AWS, and the label says so wherever it is read.
		label += " (local: nothing is billed; priced as AWS would bill it)"
	}
	if rep, cerr := Cost(label, out.Size, p.Region(), out.BuildTook, out.RanFor, built != nil && !built.Reused, sb != nil); cerr == nil && out.Made {
		out.Cost = &rep
	}
	return out, err
}

// update changes the ledger record, when there is one: a library caller
// may keep none.
func update(r *ledger.Record, f func(*ledger.Run)) {
	if r != nil {
		_ = r.Update(f)
	}
}

// noImage refuses a workflow given neither an image nor a way to build one.
func noImage(im Image) error {
	if im.Identifier == "" && im.Build == nil {
		return client.Errorf(taxonomy.KindInvalidArg, "", "no image: name one (Image.Identifier) or give Image.Build")
	}
	return nil
}

// LeakedText says what a teardown left, for a message or a summary line.
func LeakedText(l []string) string {
	if len(l) == 0 {
		return "nothing leaked"
	}
	return "leaked: " + strings.Join(l, ", ")
}

// The launch and wait values `microvm run` defaults to (its flags' tags
// repeat them; TestRunDefaultsAreTheLibrarys holds them equal), so the
// engine's run_many launches what `run --count` launches.
const (
	DefaultTimeout      = 300 * time.Second
	DefaultMaxIdle      = 600 * time.Second
	DefaultSuspendedFor = 600 * time.Second
	DefaultMaxDuration  = 3600 * time.Second
)
