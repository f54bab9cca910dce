package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/taxonomy"
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

// freshName is a per-invocation image name: a fixed one can replay a
// clientToken (finding client-token-permanent).
func freshName() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("microvm-cli-%d-%s", time.Now().Unix(), hex.EncodeToString(b[:]))
}

// daemonFor is the agentd an image is built from: BINARY, else (against an
// emulator) the host agentd the emulator's guests run.
func (p *plane) daemonFor(binary, agentdFlag string) (string, error) {
	switch {
	case binary != "":
		return binary, nil
	case p.emu != nil:
		return p.emu.Agentd, nil
	case p.Local():
		return embedded.FindAgentd(agentdFlag, p.a.Env)
	}
	return "", client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingArm64Only,
		"no BINARY and no --image: a build on AWS bakes an aarch64 agentd into the image (make build writes bin/linux-arm64/agentd), or --image launches an existing one")
}

// buildImage runs one build with the flags in f and reports its progress.
func (p *plane) buildImage(ctx context.Context, f ImageFlags, infra InfraFlags, binary, agentdFlag, baseVersion string, reuse bool, rec *ledger.Record) (*build.Result, error) {
	a := p.a
	infra = infra.withSetup(a, p)
	daemonPath, err := p.daemonFor(binary, agentdFlag)
	if err != nil {
		return nil, err
	}
	daemon, err := os.ReadFile(daemonPath)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the daemon binary: %w", err)
	}
	var dockerfile, context string
	if f.Dockerfile != "" {
		if p.Local() {
			// A local build carries what the Dockerfile copies from its
			// directory; an AWS artifact stays the Dockerfile and the daemon.
			context = filepath.Dir(f.Dockerfile)
		}
		b, err := os.ReadFile(f.Dockerfile)
		if err != nil {
			return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the Dockerfile: %w", err)
		}
		dockerfile = string(b)
		if p.Local() {
			// Named only if the emulator did not run the Dockerfile after
			// all (no base image to build from): then its guests run on
			// the host's system directories without these steps.
			defer func() {
				if p.steps != nil && p.steps.performed() {
					return
				}
				if p.emu == nil {
					// A running emulator: whether it ran them is its own
					// base image's matter, and its build log says.
					a.Warn("a running emulator performs this Dockerfile's RUN steps only with a base image for FROM: start it with `microvm emulator --base-image PATH` (or where it can pull FROM); its build log names any step it did not perform")
					return
				}
				steps, err := emulator.UnperformedSteps(b)
				if err == nil && len(steps) > 0 {
					for _, s := range steps {
						a.Warn("the emulator does not perform this Dockerfile step; its guests run without it: %s", s)
					}
					a.Warn("with no base image for FROM (--base-image, or a registry to pull it from), the guests run on this machine's system directories")
				}
			}()
		}
	}
	if baseVersion != "" {
		if err := cplane.CheckImageVersion(baseVersion); err != nil {
			return nil, err
		}
	}
	size, err := client.SizeClassFromBaseline(f.Memory)
	if err != nil {
		return nil, err
	}
	role, err := p.BuildRole(infra.BuildRoleARN)
	if err != nil {
		return nil, err
	}
	up, err := p.uploader(ctx, f.ArtifactURI, infra.Bucket)
	if err != nil {
		return nil, err
	}
	name := f.Name
	if name == "" {
		name = freshName()
		if reuse {
			name = "microvm-cli" // the stable stem: the hash makes it unique
		}
	}
	sent, sentDone := a.Transfer("uploading the artifact")
	update, stop := func(string) {}, func() {}
	defer func() { stop() }()
	uploading := false
	spec := build.Spec{
		Daemon: daemon, Dockerfile: dockerfile, Context: context, Workdir: defaultWorkdir, Port: f.Port, Name: name, Reuse: reuse,
		BuildRoleARN: role, BaseImageVersion: baseVersion, Size: size, RepairIdentity: f.RepairIdentity,
		Machine: p.guestMachine(), Wait: p.Wait(30 * time.Minute), Ledger: rec,
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
	a.Progress("building image %s (%s)", name, size)
	res, err := build.Build(ctx, p.Control(), up, spec)
	if uploading {
		sentDone()
	}
	return res, err
}

// resolveImage turns --image into an ARN (workflow.ResolveImage), saying
// so when a name was looked up.
func (p *plane) resolveImage(ctx context.Context, id string) (arn, name string, err error) {
	arn, name, err = workflow.ResolveImage(ctx, p.Platform, id)
	if err == nil && !strings.HasPrefix(id, "arn:") {
		p.a.Progress("resolved image name %s to %s", id, arn)
	}
	return arn, name, err
}
