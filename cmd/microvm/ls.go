package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/kept"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/client/setup"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/setupapi"
)

// LsCmd lists what is alive (the control plane's list, joined with the
// ledger and the kept records) and the ledger's open records; --all adds
// the closed ones.
type LsCmd struct {
	StateDir        string `name:"state-dir" help:"Where the run ledgers live; defaults to $MICROVM_STATE_DIR or the user's state directory." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	All             bool   `help:"Also list the ledger's closed records: runs whose teardown confirmed nothing is left."`
	ControlEndpoint string `name:"control-endpoint" help:"Control-plane URL to list the live MicroVMs at; unset: AWS_ENDPOINT_URL_LAMBDA_MICROVMS, then AWS_ENDPOINT_URL, else AWS." env:"MICROVM_CONTROL_ENDPOINT" placeholder:"URL"`
	RegionFlags
}

// alive reports whether a process pid exists (a signal 0 is delivered or
// refused for want of permission).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// elsewhere is the pid of another live process whose run r is, 0 when it
// is this process's, finished, or its process is gone.
func elsewhere(r ledger.Run) int {
	if r.Closed || r.PID == 0 || r.PID == os.Getpid() || !alive(r.PID) {
		return 0
	}
	return r.PID
}

func (c *LsCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	dir, err := ledgerDir(a, c.StateDir)
	if err != nil {
		return nil, err
	}
	recorded, unreadable, err := ledger.List(dir)
	if err != nil {
		return nil, render.InvalidArg("", "reading the ledger %s: %v", dir, err)
	}
	keptIDs, _ := kept.IDs(dir)
	isKept := map[string]bool{}
	for _, id := range keptIDs {
		isKept[id] = true
	}
	byVM := map[string]ledger.Run{}
	for _, r := range recorded {
		if r.MicrovmID != "" {
			byVM[r.MicrovmID] = r // the newest record wins: List is oldest first
		}
	}

	d := cliapi.RunsData{StateDir: dir, Runs: []cliapi.Run{}, Microvms: []cliapi.LiveMicrovm{}}
	live, lerr := c.live(ctx, a)
	if lerr != nil {
		msg := lerr.Error()
		d.ControlPlaneError = &msg
		a.Warn("only the ledger is listed: the control plane could not be asked what is alive: %v", lerr)
	}
	now := time.Now()
	for _, st := range live {
		if st.State == sandbox.Terminated {
			continue
		}
		m := cliapi.LiveMicrovm{MicrovmID: st.ID, State: string(st.State), ImageIdentifier: render.Present(st.ImageARN), Kept: isKept[st.ID]}
		if !st.StartedAt.IsZero() {
			at, age := st.StartedAt.UTC().Format(time.RFC3339), now.Sub(st.StartedAt).Seconds()
			m.StartedAt, m.AgeSeconds = &at, &age
		}
		if st.costUSD != "" {
			m.CostSoFarUSD = &st.costUSD
		}
		if st.MaxIdle > 0 {
			sec := int64(st.MaxIdle / time.Second)
			m.MaxIdleSeconds = &sec
		}
		if !st.Deadline.IsZero() {
			at := st.Deadline.UTC().Format(time.RFC3339)
			m.EndsAt = &at
		}
		if r, ok := byVM[st.ID]; ok {
			id := r.ID
			m.RunID = &id
			if pid := elsewhere(r); pid != 0 {
				p := int64(pid)
				m.RunningIn = &p
			}
		}
		d.Microvms = append(d.Microvms, m)
	}
	var listed []ledger.Run
	for _, r := range recorded {
		if c.All || !r.Closed {
			listed = append(listed, r)
			d.Runs = append(d.Runs, runJSON(r))
		}
	}
	for _, name := range unreadable {
		// A damaged record still names a run that may have leaked; list it by
		// file rather than hide it.
		yes := true
		d.Runs = append(d.Runs, cliapi.Run{ID: strings.TrimSuffix(name, ".json"), Unreadable: &yes})
	}
	if lerr == nil {
		if cps, err := c.checkpoints(ctx, a); err != nil {
			a.Warn("the checkpoints could not be listed: %v", err)
		} else if cps != nil {
			d.Checkpoints = cps
		}
	}
	if c.All && lerr == nil {
		left, err := c.leftovers(ctx, a, recorded)
		if err != nil {
			a.Warn("this tool's leftovers could not be listed: %v", err)
		} else {
			d.Leftovers = leftovers(left)
		}
	}
	return &render.Result{Type: cliapi.TypeRuns, Data: d, Human: func(w io.Writer) error {
		if err := c.human(w, a, d, listed, unreadable, isKept, len(recorded)); err != nil {
			return err
		}
		if err := checkpointsHuman(w, a, d.Checkpoints); err != nil {
			return err
		}
		if d.Leftovers == nil {
			return nil
		}
		if len(d.Leftovers) == 0 {
			_, err := fmt.Fprintln(w, "nothing of this tool's is left in the account")
			return err
		}
		g := render.Grid{Headers: []string{"leftover", "id", "created", "known by"}}
		for _, l := range d.Leftovers {
			created := "?"
			if l.Created != nil {
				created = *l.Created
			}
			g.Add(false, l.Kind, l.ID, created, l.Why)
		}
		g.Footer = "microvm gc deletes them"
		return a.WriteGrid(w, g)
	}}, nil
}

// leftovers lists this tool's resources in the account (setup.FindLeftovers,
// as `microvm gc --dry-run` does): the bucket is the one setup.env or
// MICROVM_BUCKET names.
func (c *LsCmd) leftovers(ctx context.Context, a *app, runs []ledger.Run) ([]setup.Leftover, error) {
	f := LifecycleFlags{ControlEndpoint: c.ControlEndpoint, RegionFlags: c.RegionFlags}
	p, err := f.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	infra := InfraFlags{Bucket: a.Env(setupapi.BucketEnv)}.withSetupIn(a, c.StateDir, p)
	o, err := p.GCOptions(ctx, infra.Bucket, runs)
	if err != nil {
		return nil, err
	}
	o.Now = time.Now()
	return setup.FindLeftovers(ctx, o)
}

// liveStatus is a listed MicroVM with its cost so far.
type liveStatus struct {
	sandbox.Status
	costUSD string
}

// live lists the MicroVMs the control plane holds, each priced so far.
func (c *LsCmd) live(ctx context.Context, a *app) ([]liveStatus, error) {
	f := LifecycleFlags{ControlEndpoint: c.ControlEndpoint, RegionFlags: c.RegionFlags}
	p, err := f.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	listed, err := p.List(ctx)
	if err != nil {
		return nil, err
	}
	rates := cost.Pinned(p.Region())
	out := make([]liveStatus, 0, len(listed))
	for _, st := range listed {
		ls := liveStatus{Status: st}
		if st.State != sandbox.Terminated {
			// The list carries no idle policy or maximum duration.
			if full, err := p.Handle(st.ID).Status(ctx); err == nil {
				ls.MaxIdle, ls.Deadline = full.MaxIdle, full.Deadline
			}
			if rep, err := p.Handle(st.ID).Cost(ctx, rates); err == nil {
				ls.costUSD = rep.Total().Floor().String()
			}
		}
		out = append(out, ls)
	}
	return out, nil
}

func (c *LsCmd) human(w io.Writer, a *app, d cliapi.RunsData, listed []ledger.Run, unreadable []string, isKept map[string]bool, total int) error {
	if d.ControlPlaneError == nil {
		if len(d.Microvms) == 0 {
			fmt.Fprintln(w, "no MicroVM is alive")
		} else {
			g := render.Grid{Headers: []string{"microvm", "state", "age", "idles after", "ends in", "cost so far", "run", "note"}}
			for _, m := range d.Microvms {
				age, usd, run, idle, ends := "?", "?", "-", "-", "?"
				if m.AgeSeconds != nil {
					age = render.HumanDuration(time.Duration(*m.AgeSeconds * float64(time.Second)))
				}
				if m.MaxIdleSeconds != nil {
					// Counted from the last inbound request, which only the
					// platform knows.
					idle = render.HumanDuration(time.Duration(*m.MaxIdleSeconds)*time.Second) + " idle"
				}
				if m.EndsAt != nil {
					if at, err := time.Parse(time.RFC3339, *m.EndsAt); err == nil {
						ends = render.HumanDuration(time.Until(at).Truncate(time.Second))
					}
				}
				if m.CostSoFarUSD != nil {
					usd = "~$" + *m.CostSoFarUSD
				}
				var notes []string
				if m.RunID != nil {
					run = *m.RunID
				} else {
					notes = append(notes, "not launched by this CLI")
				}
				if m.Kept {
					notes = append(notes, "kept: --microvm-id reaches it")
				}
				if m.RunningIn != nil {
					notes = append(notes, "another process's run (pid "+strconv.FormatInt(*m.RunningIn, 10)+")")
				}
				g.Add(false, m.MicrovmID, m.State, age, idle, ends, usd, run, strings.Join(notes, "; "))
			}
			g.Footer = fmt.Sprintf("%d alive; cost so far prices time suspended as running (an upper bound)", len(d.Microvms))
			if err := a.WriteGrid(w, g); err != nil {
				return err
			}
		}
	}
	if len(listed) == 0 && len(unreadable) == 0 {
		what := "no open runs"
		if c.All {
			what = "no runs"
		}
		_, err := fmt.Fprintf(w, "%s recorded under %s\n", what, d.StateDir)
		return err
	}
	g := render.Grid{Headers: []string{"run", "region", "microvm", "image", "open", "leaked", "note"}}
	open, leaked := 0, 0
	for _, r := range listed {
		if !r.Closed {
			open++
		}
		if len(r.Leaked) > 0 {
			leaked++
		}
		note := ""
		switch {
		case elsewhere(r) != 0:
			note = "another process's run, still going (pid " + strconv.Itoa(r.PID) + ")"
		case isKept[r.MicrovmID] && !r.Closed:
			note = "kept"
		case !r.Closed && r.PID != 0 && r.PID != os.Getpid():
			note = "its process ended before closing it: check it is gone"
		}
		// A leak is the one thing here an operator must not skim past.
		g.Add(len(r.Leaked) > 0, r.ID, r.Region, r.MicrovmID, r.Image, strconv.FormatBool(!r.Closed), strings.Join(r.Leaked, ","), note)
	}
	for _, name := range unreadable {
		g.Add(true, strings.TrimSuffix(name, ".json"), "?", "?", "?", "?", "unreadable record", "")
	}
	g.Footer = fmt.Sprintf("%d runs listed of %d recorded, %d open, %d with leaks, %d unreadable (%s)", len(listed), total, open, leaked, len(unreadable), d.StateDir)
	if !c.All {
		g.Footer += "; --all adds the closed ones"
	}
	return a.WriteGrid(w, g)
}
