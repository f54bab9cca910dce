package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// VolumeCmd lists and removes volumes (client/checkpoint Volumes) and
// saves a new generation of the volumes a kept MicroVM holds.
type VolumeCmd struct {
	Action   string `arg:"" help:"ls: every volume, its generations and lease; rm NAME: delete a volume no live MicroVM holds; sync ID: save a generation of each volume the kept MicroVM ID holds (renewing its leases)."`
	Target   string `arg:"" optional:"" help:"The volume (rm) or the MicroVM id (sync)."`
	Bucket   string `help:"The S3 bucket the volumes live in; unset: setup.env's." env:"MICROVM_BUCKET" placeholder:"BUCKET"`
	StateDir string `name:"state-dir" help:"Where kept MicroVMs are remembered (sync finds the agent token there); defaults to $MICROVM_STATE_DIR or the user's state directory." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	LifecycleFlags
}

func (c *VolumeCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	// The actions are the envelope's action domain (api/cli.yaml), checked
	// here rather than published as a parser domain of their own.
	if c.Action != "ls" && c.Action != "rm" && c.Action != "sync" {
		return nil, render.InvalidArg("", "volume %q: the actions are ls, rm NAME and sync ID", c.Action)
	}
	if (c.Action == "ls") != (c.Target == "") {
		return nil, render.InvalidArg("", "volume ls takes no argument; volume rm takes a NAME and volume sync a MicroVM ID")
	}
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	infra := InfraFlags{Bucket: c.Bucket}.withSetupIn(a, c.StateDir, p)
	v, err := p.Volumes(ctx, infra.Bucket)
	if err != nil {
		return nil, err
	}
	d := cliapi.VolumeData{Action: c.Action, Volumes: []cliapi.VolumeInfo{}, Removed: []string{}, Saved: []cliapi.CheckpointManifest{}}
	switch c.Action {
	case "ls":
		infos, err := v.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, i := range infos {
			vi := cliapi.VolumeInfo{Name: i.Name, Generations: []cliapi.CheckpointManifest{}, LeaseExpired: i.Expired}
			for _, g := range i.Generations {
				vi.Generations = append(vi.Generations, manifestOut(g))
			}
			if i.Lease != nil {
				holder, exp := i.Lease.Holder, i.Lease.Expires.UTC().Format(time.RFC3339)
				vi.Holder, vi.LeaseExpires = &holder, &exp
			}
			d.Volumes = append(d.Volumes, vi)
		}
	case "rm":
		removed, err := v.Remove(ctx, c.Target)
		d.Removed = append(d.Removed, removed...)
		if err != nil {
			return nil, err
		}
	case "sync":
		saved, err := c.sync(ctx, a, p, v)
		d.Saved = append(d.Saved, saved...)
		if err != nil {
			return nil, err
		}
	}
	return &render.Result{Type: cliapi.TypeVolume, Data: d, Human: func(w io.Writer) error { return volumeHuman(w, d) }}, nil
}

// sync saves a generation of every volume the kept MicroVM c.Target holds.
func (c *VolumeCmd) sync(ctx context.Context, a *app, p *plane, v *checkpoint.Volumes) ([]cliapi.CheckpointManifest, error) {
	return saveHeld(ctx, a, p, v, c.Target, c.StateDir, false)
}

// saveHeld saves a generation of every volume the kept MicroVM id holds
// (platform.SaveVolumes), with release letting go of their leases too.
func saveHeld(ctx context.Context, a *app, p *plane, v *checkpoint.Volumes, id, stateDir string, release bool) ([]cliapi.CheckpointManifest, error) {
	f := AttachFlags{MicrovmID: id, StateDir: stateDir, Port: taxonomy.DefaultAgentPort}
	if _, err := f.fillFromKept(a); err != nil {
		return nil, err
	}
	saved, err := p.SaveVolumes(ctx, v, id, f.AgentToken, f.Port, release)
	if err == nil && len(saved) == 0 && !release {
		err = render.InvalidArg("", "MicroVM %s holds no volume (or its leases expired unrenewed: attach them again with run --volume)", id)
	}
	out := []cliapi.CheckpointManifest{}
	for _, m := range saved {
		out = append(out, manifestOut(m))
	}
	return out, err
}

// releaseVolumes is terminate's part: the volumes the kept MicroVM id
// holds get a last generation and their leases back, when a bucket is
// known (MICROVM_BUCKET or setup.env's). A failure is warned of, never
// fatal: the teardown goes on, and an unreleased lease expires.
func releaseVolumes(ctx context.Context, a *app, p *plane, id, stateDir string) {
	infra := InfraFlags{Bucket: a.Env("MICROVM_BUCKET")}.withSetupIn(a, stateDir, p)
	if infra.Bucket == "" {
		return
	}
	v, err := p.Volumes(ctx, infra.Bucket)
	if err == nil {
		var saved []cliapi.CheckpointManifest
		saved, err = saveHeld(ctx, a, p, v, id, stateDir, true)
		for _, m := range saved {
			a.Progress("saved generation %s of %v and released its volume", m.Name, m.Paths)
		}
	}
	if err != nil {
		a.Warn("the volumes %s holds were not saved and released (their leases expire unrenewed): %v", id, err)
	}
}

// manifestOut is m with every array present, as the envelope's keys are.
func manifestOut(m cliapi.CheckpointManifest) cliapi.CheckpointManifest {
	if m.Paths == nil {
		m.Paths = []string{}
	}
	if m.Labels == nil {
		m.Labels = []cliapi.CheckpointLabel{}
	}
	if m.ChangedUnderneath == nil {
		m.ChangedUnderneath = []string{}
	}
	return m
}

func volumeHuman(w io.Writer, d cliapi.VolumeData) error {
	var err error
	switch d.Action {
	case "ls":
		if len(d.Volumes) == 0 {
			_, err = fmt.Fprintln(w, "no volumes")
		}
		for _, v := range d.Volumes {
			holder := "free"
			if v.Holder != nil {
				holder = "held by " + *v.Holder + " until " + *v.LeaseExpires
				if v.LeaseExpired {
					holder = "lease of " + *v.Holder + " expired " + *v.LeaseExpires
				}
			}
			if _, err = fmt.Fprintf(w, "%s\t%d generations\t%s\n", v.Name, len(v.Generations), holder); err != nil {
				return err
			}
		}
	case "rm":
		_, err = fmt.Fprintf(w, "removed %d keys\n", len(d.Removed))
	case "sync":
		for _, m := range d.Saved {
			if _, err = fmt.Fprintf(w, "saved generation %s of %v (%d files)\n", m.Name, m.Paths, m.Files); err != nil {
				return err
			}
		}
	}
	return err
}
