package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// CostCmd prices a run or a plan with the client's cost engine. It touches
// no account: the rate table is the one the engine pins.
type CostCmd struct {
	ID           string  `arg:"" optional:"" help:"A run of the ledger (its run id or MicroVM id): price what it recorded instead of the duration flags."`
	ByCommand    bool    `name:"by-command" help:"With ID: split the run's running cost over the commands it ran (overlaps share equally, idle time is the remainder, suspended time is not running)."`
	StateDir     string  `name:"state-dir" help:"Where the run ledger is read from; defaults to $MICROVM_STATE_DIR or the user's state directory." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
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
	var byCmd *cost.ByCommand
	var run ledger.Run
	if c.ByCommand && c.ID == "" {
		return nil, render.InvalidArg(taxonomy.FindingWhatCostsMoney, "--by-command needs the ID of a run in the ledger")
	}
	if c.ID != "" {
		if c.Estimate || c.RunningSec > 0 || c.SuspendedSec > 0 {
			return nil, render.InvalidArg(taxonomy.FindingWhatCostsMoney, "a run ID is priced from what its ledger recorded; --estimate and the duration flags do not apply")
		}
		if run, err = c.ledgerRun(); err != nil {
			return nil, err
		}
		if run.BaselineMiB > 0 {
			if size, err = client.SizeClassFromBaseline(run.BaselineMiB); err != nil {
				return nil, err
			}
		}
		var b *cost.ByCommand
		if rep, b, err = runByCommand(run, size, rates, now); err != nil {
			return nil, err
		}
		if c.ByCommand {
			byCmd = b
		}
	} else if c.Estimate {
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
	if byCmd != nil {
		data.ByCommand = costByCommand(*byCmd, run)
	}
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
			if byCmd != nil {
				fmt.Fprintln(w)
				if err := a.WriteGrid(w, byCommandGrid(*data.ByCommand)); err != nil {
					return err
				}
				fmt.Fprintln(w, byCmd.Rule)
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

// ledgerRun finds the run c.ID names, by run id or MicroVM id.
func (c *CostCmd) ledgerRun() (ledger.Run, error) {
	dir := c.StateDir
	if dir == "" {
		d, err := ledger.DefaultDir()
		if err != nil {
			return ledger.Run{}, err
		}
		dir = d
	}
	runs, _, err := ledger.List(dir)
	if err != nil {
		return ledger.Run{}, err
	}
	for _, r := range runs {
		if r.ID == c.ID || (r.MicrovmID != "" && r.MicrovmID == c.ID) {
			return r, nil
		}
	}
	return ledger.Run{}, render.InvalidArg("", "no run in the ledger %s has the id or MicroVM id %q (microvm ls lists them)", dir, c.ID)
}

// runByCommand prices a ledger run's running time and splits it over the
// commands it recorded.
func runByCommand(run ledger.Run, size client.SizeClass, rates cost.RateTable, now time.Time) (cost.Report, *cost.ByCommand, error) {
	if len(run.Running) == 0 {
		return cost.Report{}, nil, render.InvalidArg(taxonomy.FindingWhatCostsMoney, "run %s recorded no running time (it never launched, or predates per-command usage)", run.ID)
	}
	var total time.Duration
	spans := make([]cost.Interval, len(run.Running))
	for i, s := range run.Running {
		spans[i] = cost.Interval{Start: s.Start, End: s.End}
		total += s.End.Sub(s.Start)
	}
	running, err := cost.MeasuredDuration(total)
	if err != nil {
		return cost.Report{}, nil, err
	}
	rep, err := cost.RunReport("run "+run.ID, size, cost.Usage{Running: running, Launched: true}, rates, now)
	if err != nil {
		return cost.Report{}, nil, err
	}
	cmds := make([]cost.CommandSpan, len(run.Commands))
	for i, c := range run.Commands {
		cmds[i] = cost.CommandSpan{ID: c.ExecID, Interval: cost.Interval{Start: c.Start, End: c.End}}
	}
	b, err := cost.AttributeCommands(rep, spans, cmds)
	if err != nil {
		return cost.Report{}, nil, err
	}
	return rep, &b, nil
}

func costByCommand(b cost.ByCommand, run ledger.Run) *cliapi.CostByCommand {
	out := &cliapi.CostByCommand{Rule: b.Rule, TotalUSD: b.Total.String(), IdleUSD: b.Idle.String(), IdleSeconds: b.IdleSeconds.String(), Commands: []cliapi.CommandShare{}}
	for i, s := range b.Shares {
		c := run.Commands[i]
		out.Commands = append(out.Commands, cliapi.CommandShare{ExecID: s.ID, Command: c.Command, Seconds: s.Seconds.String(), USD: s.USD.String(), Usage: render.ExecUsage(c.Usage)})
	}
	return out
}

// byCommandGrid is the split as a table: one row per command, the idle
// remainder, and the total they add up to.
func byCommandGrid(b cliapi.CostByCommand) render.Grid {
	g := render.Grid{Headers: []string{"exec", "command", "running s", "cpu s", "peak MiB", "usd"}}
	for _, c := range b.Commands {
		cpu, peak := "-", "-"
		if c.Usage != nil {
			cpu = fmt.Sprintf("%.3f", c.Usage.UserCPUSecs+c.Usage.SystemCPUSecs)
			peak = fmt.Sprintf("%.1f", float64(c.Usage.PeakMemoryBytes)/(1<<20))
		}
		g.Rows = append(g.Rows, []string{c.ExecID, c.Command, c.Seconds, cpu, peak, c.USD})
	}
	g.Rows = append(g.Rows, []string{"(idle)", "", b.IdleSeconds, "", "", b.IdleUSD})
	g.Footer = "total " + b.TotalUSD + " = the commands' shares + the idle remainder, exactly"
	return g
}
