package main

import (
	"context"
	"fmt"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
)

// ImageFlags shape an image build; run and build share them.
type ImageFlags struct {
	ArtifactURI    string `name:"artifact-uri" help:"Where the build artifact already is (s3:// on AWS, file:// for an emulator); nothing is uploaded." placeholder:"URI"`
	Name           string `help:"Image name; unset, a fresh per-invocation name (reusing a name can replay a clientToken and wedge the image)." placeholder:"NAME"`
	Memory         int    `help:"Baseline MiB, selecting a documented size class." enum:"${memory}" default:"${default_memory}"`
	Dockerfile     string `help:"A Dockerfile to build instead of the generated stanza; its FROM must match the base, and it needs a WORKDIR." type:"path" placeholder:"PATH"`
	RepairIdentity bool   `name:"repair-identity" help:"Give the guest the capabilities identity repair needs (sethostname, the boot_id bind mount)."`
	Port           int    `help:"The daemon's port inside the guest." default:"${default_port}"`
}

// daemonFor is the agentd an image is built from: BINARY, else (against an
// emulator) the host agentd the emulator's guests run.
func (p *plane) daemonFor(binary, agentdFlag string) (string, error) {
	return planes.Daemon(p.Platform, p.emu, binary, agentdFlag, p.a.Env)
}

// buildImage runs one build (workflow.Build) with the flags in f and
// reports its progress.
func (p *plane) buildImage(ctx context.Context, f ImageFlags, infra InfraFlags, binary, agentdFlag, baseVersion string, reuse bool, rec *ledger.Record) (*build.Result, error) {
	a := p.a
	infra = infra.withSetup(a, p)
	daemonPath, err := p.daemonFor(binary, agentdFlag)
	if err != nil {
		return nil, err
	}
	size, err := client.SizeClassFromBaseline(f.Memory)
	if err != nil {
		return nil, err
	}
	if f.Dockerfile != "" && p.Local() {
		// Named only if the emulator did not run the Dockerfile after all
		// (no base image to build from): then its guests run on the host's
		// system directories without these steps.
		defer p.warnUnperformed(f.Dockerfile)
	}
	sent, sentDone := a.Transfer("uploading the artifact")
	update, stop := func(string) {}, func() {}
	defer func() { stop() }()
	uploading := false
	var name string
	o := workflow.BuildOptions{
		Daemon: daemonPath, Dockerfile: f.Dockerfile, Name: f.Name, Reuse: reuse, Size: size, Port: f.Port,
		RepairIdentity: f.RepairIdentity, BaseVersion: baseVersion,
		ArtifactURI: f.ArtifactURI, Bucket: infra.Bucket, BuildRoleARN: infra.BuildRoleARN,
		ArtifactDir: func() (string, error) { return workflow.ArtifactDir(a.Env) },
		Machine:     p.guestMachine(), Ledger: rec,
		Progress: func(pr build.Progress) {
			switch pr.Stage {
			case "upload":
				uploading = true
				sent(pr.Sent, pr.Size)
			case "build":
				if uploading {
					sentDone()
					uploading = false
					update, stop = a.Waiting("building image " + name)
					if p.steps != nil {
						p.steps.setLabel(update)
					}
				}
				if pr.Poll != nil {
					update(fmt.Sprintf("building image %s: %s", name, pr.Poll.State))
				}
			}
		},
	}
	res, err := workflow.Build(ctx, p.Platform, o, func(n string) {
		name = n
		a.Progress("building image %s (%s)", name, size)
	})
	if uploading {
		sentDone()
	}
	return res, err
}

// warnUnperformed names the steps of a local Dockerfile build the emulator
// did not perform.
func (p *plane) warnUnperformed(dockerfile string) {
	if p.steps != nil && p.steps.performed() {
		return
	}
	for _, w := range planes.UnperformedWarnings(p.emu != nil, dockerfile) {
		p.a.Warn("%s", w)
	}
}
