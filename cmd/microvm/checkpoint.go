package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/kept"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
)

// CheckpointCmd is `checkpoint ID` (save a running MicroVM's paths),
// `checkpoint ls`, `checkpoint rm NAME|DIGEST` and `checkpoint image
// NAME|DIGEST` (bake it into a new image) (client/checkpoint, through
// client/workflow and client/platform). A MicroVM id never reads "ls", "rm"
// or "image".
type CheckpointCmd struct {
	Args       []string `arg:"" name:"id" help:"The MicroVM to checkpoint; or ls (list the stored checkpoints); or rm NAME|DIGEST (remove one); or image NAME|DIGEST (bake one into a new image whose launches start with its files in place)."`
	Path       []string `name:"path" help:"An absolute guest path to save (repeatable); unset, the guest's working directory, which must not be /." placeholder:"PATH"`
	Name       string   `help:"With ID: name the checkpoint (a second of the same name replaces the first's manifest). With ls: list only this name or digest. With image: the new image's name (unset, the source image's name and the digest's first 12 characters)." placeholder:"NAME"`
	Label      []string `help:"With ID: a KEY=VALUE kept in the manifest (repeatable)." placeholder:"KEY=VALUE"`
	NoPause    bool     `name:"no-pause" help:"With ID: leave the guest's commands running while its files are read; the manifest's changedUnderneath names what changed."`
	Bucket     string   `help:"The S3 bucket checkpoints are kept in (AWS); against an emulator, its S3 slice's microvm-checkpoints unless named." env:"MICROVM_BUCKET" placeholder:"BUCKET"`
	AgentToken string   `help:"With ID: the agent token its launch installed; unset, the kept MicroVM's record." env:"MICROVM_AGENT_TOKEN"`
	StateDir   string   `name:"state-dir" help:"Where kept MicroVMs are remembered (the run ledger's directory)." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	LifecycleFlags
}

func (c *CheckpointCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	verb := c.Args[0]
	switch {
	case verb == "ls" && len(c.Args) == 1:
	case verb == "rm" && len(c.Args) == 2:
	case verb == "image" && len(c.Args) == 2:
	case verb == "rm" || verb == "image":
		return nil, render.InvalidArg("", "checkpoint %s takes one checkpoint, by name or digest", verb)
	case len(c.Args) != 1:
		return nil, render.InvalidArg("", "checkpoint takes one MicroVM id (or ls, or rm NAME|DIGEST); got %s", strings.Join(c.Args, " "))
	}
	if verb != "ls" && verb != "rm" && verb != "image" {
		return c.save(ctx, a, verb)
	}
	if len(c.Path) > 0 || len(c.Label) > 0 || c.NoPause {
		return nil, render.InvalidArg("", "--path, --label and --no-pause describe a new checkpoint; checkpoint %s takes none", verb)
	}
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	d := cliapi.CheckpointData{Action: verb, Checkpoints: []cliapi.CheckpointManifest{}, Removed: []string{}}
	switch verb {
	case "image":
		// An emulator with no base image for FROM performs no step, so
		// the library refuses (and deletes) an image baked without the files.
		var b checkpoint.Baked
		if b, err = p.Platform.BakeImage(ctx, c.Bucket, c.Args[1], c.Name); err == nil {
			d.Checkpoint = &b.Checkpoint
			d.Image = &cliapi.BakedImage{Name: b.Name, ImageARN: b.ImageARN, Version: b.Version, ArtifactURI: b.ArtifactURI}
		}
	case "ls":
		d.Checkpoints, d.Bucket, err = workflow.Checkpoints(ctx, p.Platform, c.Bucket, c.Name)
		if d.Checkpoints == nil {
			d.Checkpoints = []cliapi.CheckpointManifest{}
		}
	default:
		var m cliapi.CheckpointManifest
		m, d.Removed, d.Bucket, err = workflow.RemoveCheckpoint(ctx, p.Platform, c.Bucket, c.Args[1])
		d.Checkpoint = &m
	}
	if err != nil {
		return nil, err
	}
	return &render.Result{Type: cliapi.TypeCheckpoint, Data: d, Human: checkpointHuman(d)}, nil
}

func (c *CheckpointCmd) save(ctx context.Context, a *app, id string) (*render.Result, error) {
	labels := map[string]string{}
	for _, l := range c.Label {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, render.InvalidArg("", "--label %q is not KEY=VALUE", l)
		}
		labels[k] = v
	}
	token := c.AgentToken
	if token == "" {
		dir, err := ledgerDir(a, c.StateDir)
		if err != nil {
			return nil, err
		}
		m, err := kept.Load(dir, id)
		if err != nil {
			return nil, render.InvalidArg("", "no --agent-token (MICROVM_AGENT_TOKEN) and no kept record of %s: %v", id, err)
		}
		token = m.AgentToken
		if c.ControlEndpoint == "" && !c.Local {
			fillControl(&c.ControlEndpoint, &c.RegionFlags, m, a.Env)
		}
	}
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	a.attached = true // an interrupt leaves the MicroVM as it was
	o := workflow.CheckpointOptions{Platform: p.Platform, Bucket: c.Bucket, MicrovmID: id, AgentToken: token}
	o.Save.Paths, o.Save.Name, o.Save.Labels, o.Save.NoPause = c.Path, c.Name, labels, c.NoPause
	m, bucket, err := workflow.Checkpoint(ctx, o)
	if err != nil {
		return nil, err
	}
	d := cliapi.CheckpointData{Action: "save", Checkpoint: &m, Checkpoints: []cliapi.CheckpointManifest{}, Removed: []string{}, Bucket: bucket}
	return &render.Result{Type: cliapi.TypeCheckpoint, Data: d, Human: checkpointHuman(d)}, nil
}

func checkpointHuman(d cliapi.CheckpointData) func(io.Writer) error {
	return func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		switch d.Action {
		case "ls":
			fmt.Fprintln(tw, "NAME\tDIGEST\tSIZE\tFILES\tPATHS\tCREATED")
			for _, m := range d.Checkpoints {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", m.Name, m.Digest, render.HumanBytes(m.Size), m.Files, strings.Join(m.Paths, ","), m.CreatedAt)
			}
		case "image":
			fmt.Fprintf(tw, "image\t%s\narn\t%s\nversion\t%s\nartifact\t%s\ncheckpoint\t%s (%s)\n", d.Image.Name, d.Image.ImageARN, d.Image.Version, d.Image.ArtifactURI, d.Checkpoint.Name, d.Checkpoint.Digest)
		case "rm":
			for _, k := range d.Removed {
				fmt.Fprintf(tw, "removed\ts3://%s/%s\n", d.Bucket, k)
			}
		default:
			m := d.Checkpoint
			fmt.Fprintf(tw, "name\t%s\ndigest\t%s\nsize\t%s (%s of files)\nfiles\t%d\npaths\t%s\nimage\t%s %s\nwriters paused\t%t\nbucket\t%s\n",
				m.Name, m.Digest, render.HumanBytes(m.Size), render.HumanBytes(m.TreeBytes), m.Files, strings.Join(m.Paths, ","), m.ImageARN, m.ImageVersion, m.WritersPaused, d.Bucket)
			if len(m.ChangedUnderneath) > 0 {
				fmt.Fprintf(tw, "changed underneath\t%s\n", strings.Join(m.ChangedUnderneath, ","))
			}
		}
		return tw.Flush()
	}
}
