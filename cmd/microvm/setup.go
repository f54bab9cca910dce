package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/setup"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// SetupCmd makes the artifact bucket and the build and execution roles an
// AWS run needs (api/setup.yaml), or with --destroy removes them.
type SetupCmd struct {
	Prefix   string `help:"The names' prefix: <prefix>-artifacts-<account>-<region>, <prefix>-build, <prefix>-execution." default:"${setup_prefix}" placeholder:"P"`
	DryRun   bool   `name:"dry-run" help:"Print every call setup would make; send none that changes anything."`
	Destroy  bool   `help:"Remove what setup made (the roles' policies, the roles, the bucket and its artifacts), and nothing without this tool's tag."`
	StateDir string `name:"state-dir" help:"Where setup.env is written; defaults to $MICROVM_STATE_DIR or the user's state directory." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	LifecycleFlags
}

func (c *SetupCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	o, err := p.SetupOptions(ctx, c.Prefix, c.DryRun)
	if err != nil {
		return nil, err
	}
	if !c.DryRun {
		// Progress as it happens; a dry run's calls are its output, on stdout.
		o.Log = func(call setup.Call) { a.Progress("%s", call) }
	}
	var res *setup.Result
	if c.Destroy {
		res, err = setup.Destroy(ctx, o)
	} else {
		res, err = setup.Apply(ctx, o)
	}
	if err != nil {
		return nil, err
	}
	d := cliapi.SetupData{Calls: []cliapi.SetupCall{}, Changed: int64(res.Changed), Env: []string{}, DryRun: c.DryRun, Destroy: c.Destroy}
	for _, call := range res.Calls {
		d.Calls = append(d.Calls, cliapi.SetupCall{Service: call.Service, Op: call.Op, Target: call.Target, Mutating: call.Mutating, Sent: call.Sent})
	}
	for _, e := range res.Env {
		d.Env = append(d.Env, e.Name+"="+e.Value)
	}
	if !c.DryRun && !c.Destroy {
		dir, err := ledgerDir(a, c.StateDir)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, setup.EnvFile)
		if err := writeSetupEnv(path, p.Endpoint(), d.Env); err != nil {
			return nil, client.Errorf(taxonomy.KindPrecondition, "", "writing %s: %w", path, err)
		}
		d.EnvFile = &path
	}
	return &render.Result{Type: cliapi.TypeSetup, Data: d, Human: func(w io.Writer) error {
		switch {
		case c.DryRun:
			for _, call := range res.Calls {
				fmt.Fprintf(w, "# %s\n", call)
			}
			fmt.Fprintf(w, "# dry run: %d change(s) held back, nothing changed\n", d.Changed)
		case c.Destroy:
			_, err := fmt.Fprintf(w, "# removed what setup made: %d change(s)\n", d.Changed)
			return err
		case d.Changed == 0:
			fmt.Fprintln(w, "# already in place: nothing changed")
		}
		if d.EnvFile != nil {
			fmt.Fprintf(w, "# also written to %s\n", *d.EnvFile)
		}
		for _, e := range d.Env {
			if _, err := fmt.Fprintf(w, "export %s\n", e); err != nil {
				return err
			}
		}
		return nil
	}}, nil
}

func writeSetupEnv(path, endpoint string, lines []string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("# written by microvm setup; later commands bound for the same endpoint and region read it for what the environment leaves unset\n")
	b.WriteString(setup.EndpointKey + "=" + endpoint + "\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// withSetup fills what the flags and the environment left unset from
// setup.env, when setup ran against p's endpoint and region.
func (f InfraFlags) withSetup(a *app, p *plane) InfraFlags { return f.withSetupIn(a, "", p) }

// withSetupIn is withSetup reading the setup.env of state directory dir
// (setup.Infra.Filled).
func (f InfraFlags) withSetupIn(a *app, dir string, p *plane) InfraFlags {
	i := setup.Infra{Bucket: f.Bucket, BuildRoleARN: f.BuildRoleARN, ExecutionRoleARN: f.ExecutionRoleARN}.Filled(dir, a.Env, p.Endpoint(), p.Region().String())
	return InfraFlags{Bucket: i.Bucket, BuildRoleARN: i.BuildRoleARN, ExecutionRoleARN: i.ExecutionRoleARN}
}

// GcCmd lists, and unless --dry-run deletes, this tool's leftovers.
type GcCmd struct {
	OlderThan time.Duration `name:"older-than" help:"Only what is at least this old (e.g. 24h); 0 takes everything." default:"0s" placeholder:"D"`
	DryRun    bool          `name:"dry-run" help:"List what would be deleted; delete nothing."`
	StateDir  string        `name:"state-dir" help:"Where the run ledgers live; defaults to $MICROVM_STATE_DIR or the user's state directory." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	Bucket    string        `help:"The artifact bucket setup made, whose artifacts are this tool's; unset: setup.env's." env:"MICROVM_BUCKET" placeholder:"BUCKET"`
	LifecycleFlags
}

func (c *GcCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if c.OlderThan < 0 {
		return nil, render.InvalidArg("", "--older-than %s is negative", c.OlderThan)
	}
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	dir, err := ledgerDir(a, c.StateDir)
	if err != nil {
		return nil, err
	}
	runs, _, _ := ledger.List(dir)
	infra := InfraFlags{Bucket: c.Bucket}.withSetupIn(a, c.StateDir, p)
	o, err := p.GCOptions(ctx, infra.Bucket, runs)
	if err != nil {
		return nil, err
	}
	o.OlderThan, o.Now = c.OlderThan, time.Now()
	found, err := setup.FindLeftovers(ctx, o)
	if err != nil {
		return nil, err
	}
	d := cliapi.GcData{Leftovers: leftovers(found), Removed: []cliapi.Leftover{}, DryRun: c.DryRun}
	var errs []error
	if !c.DryRun {
		var removed []setup.Leftover
		removed, errs = setup.Remove(ctx, o, found)
		d.Removed = leftovers(removed)
	}
	human := func(w io.Writer) error {
		verb := "removed"
		if c.DryRun {
			verb = "would remove (dry run)"
		}
		if len(d.Leftovers) == 0 {
			_, err := fmt.Fprintln(w, "nothing of this tool's is left")
			return err
		}
		for _, l := range d.Leftovers {
			if _, err := fmt.Fprintf(w, "%s %s %s (by its %s)\n", verb, l.Kind, l.ID, l.Why); err != nil {
				return err
			}
		}
		return nil
	}
	if len(errs) > 0 {
		var msgs []string
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		return nil, &render.Failure{Err: client.Errorf(client.KindOf(errs[0]), "", "%d leftover(s) not deleted: %s", len(errs), strings.Join(msgs, "; ")), Data: d, Human: human}
	}
	return &render.Result{Type: cliapi.TypeGc, Data: d, Human: human}, nil
}

func leftovers(in []setup.Leftover) []cliapi.Leftover {
	out := []cliapi.Leftover{}
	for _, l := range in {
		c := cliapi.Leftover{Kind: l.Kind, ID: l.ID, Why: l.Why}
		if !l.Created.IsZero() {
			s := l.Created.UTC().Format(time.RFC3339)
			c.Created = &s
		}
		out = append(out, c)
	}
	return out
}
