package workflow

import (
	"context"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// FleetOptions are one fleet's: the same command in Count MicroVMs launched
// from one image, at most Parallel alive at once.
type FleetOptions struct {
	Platform        *platform.Platform
	Image           Image
	Launch          Launch
	Command         string
	Timeout         time.Duration
	Count, Parallel int
	Size            client.SizeClass
	// Ledger opens each MicroVM's record; Record is the image's.
	Ledger        *ledger.Ledger
	Record        *ledger.Record
	ArtifactGiven bool
	Events        func(Event)
	Warn          func(msg string)
	// Launcher launches each MicroVM; nil is sandbox.LaunchOn (FleetFrom
	// sets one that lays a checkpoint's files first).
	Launcher sandbox.Launcher
}

// FleetResult is what a fleet made, what it left and what it cost.
type FleetResult struct {
	ImageARN, ImageName string
	Built               *build.Result
	// Report has every MicroVM's outcome and teardown, in launch order.
	Report sandbox.FleetReport
	// Leaked names, as "<kind> <id>", what teardown could not delete.
	Leaked []string
	// Cost prices the fleet; nil with CostErr when it could not be.
	Cost      *cost.Report
	CostErr   error
	BuildTook time.Duration
	// Launched says at least one MicroVM launched.
	Launched bool
}

// CheckFleet refuses a count or parallel outside the bounds
// (api/errors.yaml) and answers the parallel a zero one stands for.
func CheckFleet(count, parallel int) (int, error) {
	if count < 1 || count > taxonomy.MaxFleetCount {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "--count %d is outside 1..%d", count, taxonomy.MaxFleetCount)
	}
	p := parallel
	if p == 0 {
		p = min(count, taxonomy.DefaultFleetParallel)
	}
	if p < 1 || p > taxonomy.MaxFleetParallel {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "--parallel %d is outside 1..%d", parallel, taxonomy.MaxFleetParallel)
	}
	return p, nil
}

// severity orders run failures for the fleet's outcome: a command's
// non-zero exit is the mildest (the sandbox worked), then a transient
// failure, then a deadline; any other row means the fleet itself could not
// do what was asked and outranks both.
func severity(k taxonomy.ErrorKind) int {
	switch k {
	case taxonomy.KindExecFailed:
		return 1
	case taxonomy.KindRetryable:
		return 2
	case taxonomy.KindTimeout:
		return 3
	}
	return 4
}

// Worst is the most severe of the runs' failures (nil: none failed).
func (r FleetResult) Worst() error {
	worst := taxonomy.ErrorKind(0)
	var worstErr error
	for _, o := range r.Report.Outcomes {
		if o.Err == nil {
			continue
		}
		if k := client.KindOf(o.Err); worst == 0 || severity(k) > severity(worst) {
			worst, worstErr = k, o.Err
		}
	}
	return worstErr
}

// Fleet builds (or names) the image once, runs the command in Count
// MicroVMs with sandbox.RunMany, tears every one down, deletes the image it
// built once none launched from it is left, and prices the whole fleet in
// one report. The error is the fleet's own failure; each run's is in
// Report (and Worst).
func Fleet(ctx context.Context, o FleetOptions) (FleetResult, error) {
	if err := noImage(o.Image); err != nil {
		return FleetResult{Leaked: []string{}}, err
	}
	if err := o.Launch.checkNetwork(o.Platform); err != nil {
		return FleetResult{Leaked: []string{}}, err
	}
	p, led, rec := o.Platform, o.Ledger, o.Record
	ro := Options{Events: o.Events, Warn: o.Warn}
	size := o.Size
	logs := p.LogGroups(ctx)
	out := FleetResult{Leaked: []string{}}
	var built *build.Result
	body := func() error {
		arn, name := "", ""
		if o.Image.Identifier != "" {
			var err error
			if arn, name, err = existingImage(ctx, p, o.Image, rec, ro.event, &size); err != nil {
				return err
			}
		} else {
			start := time.Now()
			res, err := o.Image.Build(ctx, rec)
			if res != nil {
				built = res
			}
			if err != nil {
				return err
			}
			out.BuildTook = time.Since(start)
			arn, name = res.ImageARN, res.Name
		}
		out.ImageARN, out.ImageName = arn, name
		so := o.Launch.options(p)
		so.Image, so.Version, so.ImageName = arn, o.Image.Version, name
		fo := sandbox.FleetOptions{
			Count: o.Count, Parallel: o.Parallel, Launch: launcher(o.Launcher, p), Options: so,
			PerSandbox: func(i int, so *sandbox.Options) error {
				if led != nil {
					r, err := led.Begin(p.Region().String())
					if err != nil {
						return client.Errorf(taxonomy.KindPrecondition, "", "%v; pass --state-dir", err)
					}
					update(r, func(run *ledger.Run) { run.Image, run.ImageARN = name, arn })
					so.Ledger = r
				}
				ro.event(Event{Step: FleetLaunching, Index: i, Count: o.Count, Name: name})
				return nil
			},
		}
		task := func(ctx context.Context, i int, sb *sandbox.Sandbox) (client.Result, error) {
			ro.event(Event{Step: FleetRunning, Index: i, Count: o.Count, MicrovmID: sb.ID()})
			if o.Command == "" {
				return client.Result{}, nil
			}
			return sandbox.Command([]string{o.Command}, client.RunOptions{
				StartOptions:  client.StartOptions{ExecID: client.NewExecID(), Shell: true},
				ClientTimeout: o.Timeout,
			})(ctx, i, sb)
		}
		var err error
		out.Report, err = sandbox.RunMany(ctx, fo, task)
		return err
	}
	err := body()
	out.Built = built

	// Priced before the image goes: each MicroVM's size class is read from
	// its image version.
	for _, oc := range out.Report.Outcomes {
		out.Launched = out.Launched || oc.Sandbox != nil
	}
	if rep, cerr := fleetCost(ctx, out.Report, out.ImageName, size, p.Region(), out.BuildTook, built != nil && !built.Reused, out.Launched); cerr == nil {
		out.Cost = &rep
	} else {
		out.CostErr = cerr
	}
	ro.event(Event{Step: FleetPriced, Cost: out.Cost, Err: out.CostErr, Made: out.Launched || built != nil})
	// The fleet's MicroVMs are down (RunMany tore each down); the image is
	// this fleet's to delete once none is left that launched from it.
	for _, l := range out.Report.Leaked() {
		out.Leaked = append(out.Leaked, l.Kind+" "+l.ID)
		ro.warn("could not delete %s %s, which may still bill: %s", l.Kind, l.ID, l.Reason)
	}
	if built != nil && !built.Reused && built.ImageARN != "" {
		if left := stillUp(out.Report); len(left) > 0 {
			out.Leaked = append(out.Leaked, "image "+built.ImageARN)
			ro.warn("kept image %s: MicroVMs launched from it may still run (%v)", built.ImageARN, left)
		} else {
			out.Leaked = append(out.Leaked, DeleteImage(ctx, p, built.ImageARN, built.LogGroup, logs, o.Warn)...)
		}
	}
	update(rec, func(r *ledger.Run) {
		r.ImageOwned = built != nil && !built.Reused
		r.Leaked, r.Closed = out.Leaked, len(out.Leaked) == 0
	})
	if built != nil && !built.Reused && len(out.Leaked) == 0 && !o.ArtifactGiven {
		RemoveLocalArtifact(built.ArtifactURI)
	}
	if len(out.Leaked) == 0 && (out.Launched || built != nil) {
		ro.event(Event{Step: Clean})
	}
	return out, err
}

func launcher(l sandbox.Launcher, p *platform.Platform) sandbox.Launcher {
	if l != nil {
		return l
	}
	return sandbox.LaunchOn(p.Control())
}

// stillUp names the fleet's MicroVMs whose teardown did not confirm them
// terminated: the image they launched from must outlive them.
func stillUp(r sandbox.FleetReport) []string {
	var ids []string
	for _, o := range r.Outcomes {
		if o.MicrovmID != "" && !o.Teardown.MicrovmTerminated {
			ids = append(ids, o.MicrovmID)
		}
	}
	return ids
}
