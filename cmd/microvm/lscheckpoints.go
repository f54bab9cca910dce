package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/setupapi"
)

// checkpoints lists the stored checkpoints for ls (issue 47), so a
// checkpoint never bills S3 storage unseen. The store is the bucket setup
// or MICROVM_BUCKET names; against an emulator, its S3 slice's default.
func (c *LsCmd) checkpoints(ctx context.Context, a *app) ([]cliapi.CheckpointManifest, error) {
	f := LifecycleFlags{ControlEndpoint: c.ControlEndpoint, RegionFlags: c.RegionFlags}
	p, err := f.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	infra := InfraFlags{Bucket: a.Env(setupapi.BucketEnv)}.withSetupIn(a, c.StateDir, p)
	if infra.Bucket == "" && !p.Local() {
		return nil, nil // no bucket on AWS: nowhere a checkpoint could be
	}
	list, _, err := workflow.Checkpoints(ctx, p.Platform, infra.Bucket, "")
	return list, err
}

// checkpointsHuman is ls's table of checkpoints; nothing when there are none.
func checkpointsHuman(w io.Writer, a *app, list []cliapi.CheckpointManifest) error {
	if len(list) == 0 {
		return nil
	}
	g := render.Grid{Headers: []string{"checkpoint", "digest", "size", "paths", "created"}}
	for _, m := range list {
		g.Add(false, m.Name, m.Digest[:min(len(m.Digest), 19)], render.HumanBytes(m.Size), strings.Join(m.Paths, ","), m.CreatedAt)
	}
	g.Footer = fmt.Sprintf("%d checkpoint(s), S3 storage unpriced; microvm checkpoint rm removes one", len(list))
	return a.WriteGrid(w, g)
}
