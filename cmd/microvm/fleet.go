package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/workflow"
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
	// Issue 47: a fleet (of one, without --count) restored from a checkpoint.
	From              string `help:"Launch from this checkpoint (its name or digest; microvm checkpoint ls lists them): its image and version, with its files laid before the command runs; verified first, a corrupted or other-version one is refused (exit 14). With --count, a fork of N; the result is the microvm.run.fleet envelope." placeholder:"CHECKPOINT"`
	AllowOtherVersion bool   `name:"allow-other-version" help:"With --from and --image: lay the checkpoint into another image or version than it was taken on."`
}

// runFleet is `run --count N`: workflow.Fleet builds (or names) the image once,
// runs the command in N MicroVMs, tears every one down, deletes the image
// it built, and prices the whole fleet in one report.
func (c *RunCmd) runFleet(ctx context.Context, a *app) (*render.Result, error) {
	if c.From != "" && c.Count == 0 {
		c.Count = 1 // a restore is a fleet of one
	}
	if c.AllowOtherVersion && c.From == "" {
		return nil, render.InvalidArg("", "--allow-other-version acts only with --from")
	}
	parallel, err := workflow.CheckFleet(c.Count, c.Parallel)
	if err != nil {
		return nil, err
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
	fo := workflow.FleetOptions{
		Platform: st.p.Platform, Image: c.image(st.p, st), Launch: c.launch(st.env, st.net),
		Command: c.Exec, Timeout: time.Duration(c.Timeout * float64(time.Second)),
		Count: c.Count, Parallel: parallel, Size: st.size, Ledger: st.led, Record: st.rec, ArtifactGiven: c.ArtifactURI != "",
		Events: runEvents(a, "fleet"), Warn: func(msg string) { a.Warn("%s", msg) },
	}
	var res workflow.FleetResult
	if c.From != "" {
		fo.Image = workflow.Image{Identifier: c.Image, Version: c.ImageVersion}
		res, _, err = workflow.FleetFrom(ctx, workflow.FromOptions{Fleet: fo, Bucket: c.Bucket, Ref: c.From, AllowOtherVersion: c.AllowOtherVersion})
	} else {
		res, err = workflow.Fleet(ctx, fo)
	}
	out := render.FleetData(res, c.Count, parallel)
	human := fleetHuman(out, a)
	worst := res.Worst()
	switch {
	case ctx.Err() != nil:
		return nil, &render.Failure{Err: client.Errorf(taxonomy.KindInterrupted, taxonomy.FindingBuildLogGroupSurvives,
			"interrupted; every MicroVM of the fleet was torn down, and anything that could not be deleted is named in data.leaked (%s)", workflow.LeakedText(out.Leaked)), Data: out, Human: human}
	case err != nil:
		return nil, &render.Failure{Err: render.AsClientError(err), Data: out, Human: human}
	case worst != nil:
		// As a single run's non-zero exit, a failure envelope whose data is
		// the whole fleet's record.
		return nil, &render.Failure{Err: render.FleetFailure(worst, len(res.Report.Failed()), c.Count), Data: out, Human: human}
	}
	return &render.Result{Type: cliapi.TypeRunFleet, Data: out, Human: human}, nil
}

// fleetPriced says the fleet's cost on stderr as soon as it is known.
func fleetPriced(a *app, e workflow.Event) {
	switch {
	case e.Cost != nil:
		if !a.Quiet && !a.JSON {
			fmt.Fprintln(a.Stderr, e.Cost.String())
		} else if e.Cost.Staleness != "" {
			a.Warn("%s", e.Cost.Staleness)
		}
	case e.Err != nil && e.Made:
		a.Warn("no cost report for the fleet: %v", e.Err)
	}
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
		fmt.Fprintf(tw, "image\t%s\nteardown\t%s\n", d.ImageIdentifier, workflow.LeakedText(d.Leaked))
		return tw.Flush()
	}
}
