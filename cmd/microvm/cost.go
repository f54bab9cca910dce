package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// CostCmd prices a run or a plan with the client's cost engine. It touches
// no account: the rate table is the one the engine pins.
type CostCmd struct {
	Estimate     bool    `help:"Treat the durations as a plan: every one is labelled projected."`
	Compare      bool    `help:"Also compare running against suspended over --hold-sec, with the break-even."`
	Memory       int     `help:"Baseline MiB, selecting a documented size class." enum:"${memory}" default:"${default_memory}"`
	RunningSec   float64 `name:"running-sec" help:"Seconds RUNNING; billed at baseline whether or not anything executes." default:"0"`
	SuspendedSec float64 `name:"suspended-sec" help:"Seconds suspended: storage only." default:"0"`
	BuildSec     float64 `name:"build-sec" help:"Seconds the image build took; an unpriced line." default:"0"`
	ImageGB      float64 `name:"image-gb" help:"Image size in GB; adds storage with its one-week minimum retention." default:"0"`
	Cycles       int     `help:"Suspend/resume cycles, each a snapshot write plus a read." default:"1"`
	HoldSec      float64 `name:"hold-sec" help:"The hold to compare running against suspended over, in seconds." default:"3600"`
	RegionFlags
}

func seconds(flag string, s float64) (time.Duration, error) {
	if s < 0 {
		return 0, render.InvalidArg(taxonomy.FindingWhatCostsMoney, "%s: a duration cannot be negative (%v s)", flag, s)
	}
	return time.Duration(s * float64(time.Second)), nil
}

func (c *CostCmd) run(_ context.Context, a *app) (*render.Result, error) {
	size, err := client.SizeClassFromBaseline(c.Memory)
	if err != nil {
		return nil, err
	}
	// The rate table's region is the flags' alone: cost calls no AWS API,
	// so a shell's AWS_REGION is not read (and cannot refuse it).
	region, given, err := c.flagRegion()
	if err != nil {
		return nil, err
	}
	if !given {
		region = client.USEast1
	}
	running, err := seconds("--running-sec", c.RunningSec)
	if err != nil {
		return nil, err
	}
	suspended, err := seconds("--suspended-sec", c.SuspendedSec)
	if err != nil {
		return nil, err
	}
	build, err := seconds("--build-sec", c.BuildSec)
	if err != nil {
		return nil, err
	}
	hold, err := seconds("--hold-sec", c.HoldSec)
	if err != nil {
		return nil, err
	}
	if c.Cycles < 0 || c.ImageGB < 0 {
		return nil, render.InvalidArg(taxonomy.FindingWhatCostsMoney, "--cycles and --image-gb cannot be negative")
	}
	rates := cost.Pinned(region)
	now := time.Now()
	imageGB := decimal.NewFromFloat(c.ImageGB)
	var rep cost.Report
	if c.Estimate {
		rep, err = cost.Estimate("plan", size, cost.Plan{Running: running, Suspended: suspended, ImageGB: imageGB, Cycles: c.Cycles, Launched: running > 0}, rates, now)
	} else {
		u := cost.Usage{ImageGB: imageGB, Cycles: c.Cycles, Launched: running > 0}
		if running > 0 {
			if u.Running, err = cost.MeasuredDuration(running); err != nil {
				return nil, err
			}
		}
		if suspended > 0 {
			if u.Suspended, err = cost.MeasuredDuration(suspended); err != nil {
				return nil, err
			}
		}
		if build > 0 {
			if u.ImageBuild, err = cost.MeasuredDuration(build); err != nil {
				return nil, err
			}
		}
		rep, err = cost.RunReport("run", size, u, rates, now)
	}
	if err != nil {
		return nil, err
	}
	a.StaleRates(rep.Staleness)
	data := cliapi.CostData{Report: render.CostReport(rep)}
	var cmp *cost.Residency
	if c.Compare {
		r, err := cost.CompareResidency(size, hold, max(c.Cycles, 1), rates, now)
		if err != nil {
			return nil, err
		}
		cmp = &r
		m := cliapi.CostComparison{Text: r.String(), Running: render.CostReport(r.Running), Suspended: render.CostReport(r.Suspended), PerCycleUSD: r.PerCycle().String()}
		if be, err := r.BreakEven(); err == nil {
			sec := be.Seconds()
			m.BreakEvenSec = &sec
		}
		data.Comparison = &m
	}
	return &render.Result{Type: cliapi.TypeCost, Data: data,
		Human: func(w io.Writer) error {
			// The staleness went to stderr (once a day), above; the table repeats
			// only the figures.
			if err := a.WriteGrid(w, costGrid(rep)); err != nil {
				return err
			}
			if cmp != nil {
				fmt.Fprintln(w)
				for _, r := range []cost.Report{cmp.Running, cmp.Suspended} {
					if err := a.WriteGrid(w, costGrid(r)); err != nil {
						return err
					}
				}
				line := "per suspend/resume cycle: $" + cmp.PerCycle().String()
				if be, err := cmp.BreakEven(); err == nil {
					line += "; suspending pays off for holds over " + render.HumanDuration(be)
				}
				fmt.Fprintln(w, line)
			}
			return nil
		},
		// One line of figures: the report's text and lines stay in --json.
		Dense: func(w io.Writer) error {
			t := rep.Total()
			line := fmt.Sprintf("cost size=%s region=%s total_usd=%s lower_bound=%t lines=%d", rep.Size, rep.Rates.Region(), t.Floor(), t.IsLowerBound(), len(rep.Lines))
			if cmp != nil {
				line += " per_cycle_usd=" + cmp.PerCycle().String()
				if be, err := cmp.BreakEven(); err == nil {
					line += fmt.Sprintf(" break_even_sec=%g", be.Seconds())
				}
			}
			_, err := fmt.Fprintln(w, line)
			return err
		},
	}, nil
}

// costGrid is a report as a table: one row per line item, unpriced lines
// saying so instead of $0, the total in the footer.
func costGrid(r cost.Report) render.Grid {
	g := render.Grid{Headers: []string{"phase", "billing", "quantity", "unit", "usd"}}
	for _, l := range r.Lines {
		usd := "unpriced: " + l.Amount.UnpricedReason()
		if v, ok := l.Amount.Estimate(); ok {
			usd = "$" + v.String()
		}
		q := l.Quantity.String()
		if !l.Duration.IsZero() {
			q += " (" + l.Duration.Provenance().String() + ")"
		}
		g.Add(false, fmt.Sprint(l.Phase), fmt.Sprint(l.Billing), q, l.Unit, usd)
	}
	t := r.Total()
	total := "$" + t.Floor().String()
	if t.IsLowerBound() {
		total = "at least " + total + " (an unpriced line is not in it)"
	}
	g.Footer = fmt.Sprintf("%s, %s in %s: %s, an estimate from published rates, never an invoice", r.Label, r.Size, r.Rates.Region(), total)
	return g
}
