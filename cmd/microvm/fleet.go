package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// FleetFlags make `run` a fleet: the same command in --count MicroVMs
// launched from one image, at most --parallel alive at once
// (sandbox.RunMany). There is no `microvm pool` command: a warm pool only
// pays while a process holds it between tenants, and a CLI invocation ends
// with its one command, so a pool would either die with it (no tenant ever
// sees a warm member) or outlive it as suspended MicroVMs billing storage
// with nobody to release them. A program that serves tenants holds a
// sandbox.Pool itself.
type FleetFlags struct {
	Count    int `help:"Run the command in this many MicroVMs (1 to MAX_FLEET_COUNT, which microvm constants lists), each launched from the one image and torn down after; the result is the microvm.run.fleet envelope. Unset: one MicroVM." default:"0"`
	Parallel int `help:"With --count, at most this many MicroVMs alive at once (1 to MAX_FLEET_PARALLEL); 0 is DEFAULT_FLEET_PARALLEL, or --count when smaller." default:"0"`
}

// fleetSeverity orders run failures for the fleet's exit status: a
// command's non-zero exit is the mildest (the sandbox worked), then a
// transient failure, then a deadline; any other row means the fleet itself
// could not do what was asked and outranks both.
func fleetSeverity(k taxonomy.ErrorKind) int {
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

// runFleet is `run --count N`: build (or name) the image once, run the
// command in N MicroVMs with sandbox.RunMany, tear every one down, delete
// the image this run built, and price the whole fleet in one report.
func (c *RunCmd) runFleet(ctx context.Context, a *app) (*render.Result, error) {
	if c.Count < 1 || c.Count > taxonomy.MaxFleetCount {
		return nil, render.InvalidArg("", "--count %d is outside 1..%d", c.Count, taxonomy.MaxFleetCount)
	}
	parallel := c.Parallel
	if parallel == 0 {
		parallel = min(c.Count, taxonomy.DefaultFleetParallel)
	}
	if parallel < 1 || parallel > taxonomy.MaxFleetParallel {
		return nil, render.InvalidArg("", "--parallel %d is outside 1..%d", c.Parallel, taxonomy.MaxFleetParallel)
	}
	if c.Keep {
		return nil, render.InvalidArg("", "--keep with --count: a fleet is torn down run by run; launch with `run --keep` once per MicroVM to keep them")
	}
	// The image's record; each MicroVM gets one of its own.
	st, err := c.prepare(ctx, a)
	if err != nil {
		return nil, err
	}
	defer st.p.close()
	env, size, p, binary, led, rec := st.env, st.size, st.p, st.binary, st.led, st.rec
	logs := p.LogGroups(ctx)
	out := cliapi.RunFleetData{Count: int64(c.Count), Parallel: int64(parallel), Runs: []cliapi.FleetRun{}, Leaked: []string{}}
	var built *build.Result
	var buildTook time.Duration
	var fleet sandbox.FleetReport
	body := func() error {
		arn, name := "", ""
		if c.Image != "" {
			var err error
			if arn, name, err = p.resolveImage(ctx, c.Image); err != nil {
				return err
			}
			_ = rec.Update(func(r *ledger.Run) { r.Image, r.ImageARN = name, arn })
			if cls, err := p.imageClass(ctx, arn, c.ImageVersion); err == nil {
				size = cls // the image's own class, whatever a launch asks
			}
		} else {
			start := time.Now()
			res, err := p.buildImage(ctx, c.ImageFlags, c.InfraFlags, binary, c.Agentd, "", false, rec)
			if res != nil {
				built = res
			}
			if err != nil {
				return err
			}
			buildTook = time.Since(start)
			arn, name = res.ImageARN, res.Name
		}
		out.ImageIdentifier, out.ImageName = arn, name
		o := sandbox.FleetOptions{
			Count: c.Count, Parallel: parallel, Launch: sandbox.LaunchOn(p.Control()),
			Options: sandbox.Options{
				Image: arn, Version: c.ImageVersion, ImageName: name, ExecutionRoleARN: c.ExecutionRoleARN, Env: env,
				Idle:        &cplane.IdlePolicy{MaxIdle: time.Duration(c.MaxIdleSec) * time.Second, SuspendedFor: time.Duration(c.SuspendedSec) * time.Second},
				MaxDuration: time.Duration(c.MaxDurationSec) * time.Second,
				Connectors:  cplane.Connectors{InternetEgress: c.Egress},
				Port:        c.Port, Wait: p.Wait(10 * time.Minute),
			},
			PerSandbox: func(i int, so *sandbox.Options) error {
				r, err := led.Begin(p.Region().String())
				if err != nil {
					return client.Errorf(taxonomy.KindPrecondition, "", "%v; pass --state-dir", err)
				}
				_ = r.Update(func(run *ledger.Run) { run.Image, run.ImageARN = name, arn })
				so.Ledger = r
				a.Progress("launching MicroVM %d of %d from %s", i+1, c.Count, name)
				return nil
			},
		}
		task := func(ctx context.Context, i int, sb *sandbox.Sandbox) (client.Result, error) {
			a.Progress("MicroVM %d of %d: %s RUNNING", i+1, c.Count, sb.ID())
			if c.Exec == "" {
				return client.Result{}, nil
			}
			return sandbox.Command([]string{c.Exec}, client.RunOptions{
				StartOptions:  client.StartOptions{ExecID: client.NewExecID(), Shell: true},
				ClientTimeout: time.Duration(c.Timeout * float64(time.Second)),
			})(ctx, i, sb)
		}
		var err error
		fleet, err = sandbox.RunMany(ctx, o, task)
		return err
	}
	err = body()

	// Priced before the image goes: each MicroVM's size class is read from
	// its image version.
	launched := false
	for _, o := range fleet.Outcomes {
		launched = launched || o.Sandbox != nil
	}
	if rep, cerr := fleetCost(ctx, fleet, out.ImageName, size, p.Region(), buildTook, built != nil && !built.Reused, launched); cerr == nil {
		cr := render.CostReport(rep)
		out.Cost = &cr
		if !a.Quiet && !a.JSON {
			fmt.Fprintln(a.Stderr, rep.String())
		} else if rep.Staleness != "" {
			a.Warn("%s", rep.Staleness)
		}
	} else if launched || built != nil {
		a.Warn("no cost report for the fleet: %v", cerr)
	}
	// The fleet's MicroVMs are down (RunMany tore each down); the image is
	// this run's to delete once none is left that launched from it.
	for _, l := range fleet.Leaked() {
		out.Leaked = append(out.Leaked, l.Kind+" "+l.ID)
		a.Warn("could not delete %s %s, which may still bill: %s", l.Kind, l.ID, l.Reason)
	}
	if built != nil && !built.Reused && built.ImageARN != "" {
		if left := fleetStillUp(fleet); len(left) > 0 {
			out.Leaked = append(out.Leaked, "image "+built.ImageARN)
			a.Warn("kept image %s: MicroVMs launched from it may still run (%v)", built.ImageARN, left)
		} else {
			out.Leaked = append(out.Leaked, teardownImage(ctx, p, built.ImageARN, built.LogGroup, logs, a)...)
		}
	}
	_ = rec.Update(func(r *ledger.Run) {
		r.ImageOwned = built != nil && !built.Reused
		r.Leaked, r.Closed = out.Leaked, len(out.Leaked) == 0
	})
	if built != nil && !built.Reused && len(out.Leaked) == 0 && c.ArtifactURI == "" {
		removeLocalArtifact(built.ArtifactURI)
	}

	worst := taxonomy.ErrorKind(0)
	var worstErr error
	for _, o := range fleet.Outcomes {
		run := cliapi.FleetRun{Index: int64(o.Index), MicrovmID: o.MicrovmID, Stdout: o.Result.Stdout, Stderr: o.Result.Stderr, Truncated: o.Result.Truncated}
		if o.Result.ExitCode != nil {
			v := int64(*o.Result.ExitCode)
			run.ExitCode = &v
		}
		if o.Err != nil {
			k := client.KindOf(o.Err)
			run.Code, run.Error = k.Code(), o.Err.Error()
			if worst == 0 || fleetSeverity(k) > fleetSeverity(worst) {
				worst, worstErr = k, o.Err
			}
		}
		out.Runs = append(out.Runs, run)
	}
	if len(out.Leaked) == 0 && (launched || built != nil) {
		a.Progress("teardown clean: nothing of this fleet is left")
	}

	human := fleetHuman(out, a)
	switch {
	case ctx.Err() != nil:
		return nil, &render.Failure{Err: client.Errorf(taxonomy.KindInterrupted, taxonomy.FindingBuildLogGroupSurvives,
			"interrupted; every MicroVM of the fleet was torn down, and anything that could not be deleted is named in data.leaked (%s)", leakedText(out.Leaked)), Data: out, Human: human}
	case err != nil:
		return nil, &render.Failure{Err: render.AsClientError(err), Data: out, Human: human}
	case worst != 0:
		// As a single run's non-zero exit, a failure envelope whose data is
		// the whole fleet's record.
		ce := render.AsClientError(worstErr)
		return nil, &render.Failure{Err: client.Errorf(worst, ce.Finding(), "%d of %d runs failed; the worst: %s", len(fleet.Failed()), c.Count, ce.Message()).WithCause(worstErr), Data: out, Human: human}
	}
	return &render.Result{Type: cliapi.TypeRunFleet, Data: out, Human: human}, nil
}

// fleetStillUp names the fleet's MicroVMs whose teardown did not confirm
// them terminated: the image they launched from must outlive them.
func fleetStillUp(r sandbox.FleetReport) []string {
	var ids []string
	for _, o := range r.Outcomes {
		if o.MicrovmID != "" && !o.Teardown.MicrovmTerminated {
			ids = append(ids, o.MicrovmID)
		}
	}
	return ids
}

// fleetCost is the fleet's one report: every MicroVM priced from the
// platform's record of it, and the image this run built (its build
// unpriced, its storage at the retention floor), summed.
func fleetCost(ctx context.Context, fleet sandbox.FleetReport, name string, size client.SizeClass, region client.Region, buildFor time.Duration, built, launched bool) (cost.Report, error) {
	rates := cost.Pinned(region)
	ctx = context.WithoutCancel(ctx)
	var reports []cost.Report
	if launched {
		rs, err := fleet.Costs(ctx, rates)
		if err != nil {
			return cost.Report{}, err
		}
		reports = append(reports, rs...)
		if len(rs) > 0 {
			size = rs[0].Size
		}
	}
	if built {
		u := cost.Usage{ImageGB: decimal.NewFromInt(int64(size.BaselineMiB())).Div(decimal.NewFromInt(1024))}
		if buildFor > 0 {
			var err error
			if u.ImageBuild, err = cost.MeasuredDuration(buildFor); err != nil {
				return cost.Report{}, err
			}
		}
		r, err := cost.RunReport("image "+name, size, u, rates, time.Now())
		if err != nil {
			return cost.Report{}, err
		}
		reports = append(reports, r)
	}
	return cost.Sum(fmt.Sprintf("fleet of %d from %s", len(fleet.Outcomes), name), reports...)
}

// fleetHuman writes each run's stdout in launch order on stdout (nothing
// else goes there) and a table of the runs on stderr.
func fleetHuman(d cliapi.RunFleetData, a *app) func(io.Writer) error {
	return func(w io.Writer) error {
		for _, r := range d.Runs {
			_, _ = io.WriteString(w, r.Stdout)
			_, _ = io.WriteString(a.Stderr, r.Stderr)
		}
		if a.Quiet {
			return nil
		}
		tw := tabwriter.NewWriter(a.Stderr, 0, 2, 2, ' ', 0)
		fmt.Fprintf(tw, "run\tmicrovm\texit\terror\n")
		for _, r := range d.Runs {
			exit := "-"
			if r.ExitCode != nil {
				exit = fmt.Sprint(*r.ExitCode)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", r.Index, r.MicrovmID, exit, r.Code)
		}
		fmt.Fprintf(tw, "image\t%s\nteardown\t%s\n", d.ImageIdentifier, leakedText(d.Leaked))
		return tw.Flush()
	}
}
