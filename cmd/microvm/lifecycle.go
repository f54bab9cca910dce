package main

import (
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator/embedded"
)

// LifecycleFlags choose the control plane a lifecycle command drives: AWS by
// default, a running emulator (or any compatible endpoint) with
// --control-endpoint, or an emulator in this process with --local.
type LifecycleFlags struct {
	Local           bool   `help:"Run the local emulator in this process for this one command: no AWS account, guests are agentd processes on this machine, and everything stops when the command exits."`
	Agentd          string `name:"agentd" help:"The host agentd the emulator's guests run with --local; unset: $MICROVM_AGENTD, then an agentd next to the microvm executable, then PATH." placeholder:"PATH" type:"path"`
	BaseImage       string `name:"base-image" help:"With --local only (a running emulator takes it as 'microvm emulator --base-image'; elsewhere it is refused): the image a Dockerfile's FROM stands for, as an OCI image layout directory or a docker-save tarball (for offline machines); unset, FROM is pulled from its registry with your Docker credentials and kept by digest in the state directory." placeholder:"PATH" type:"path"`
	ControlEndpoint string `name:"control-endpoint" help:"Control-plane URL: a running 'microvm emulator' or any compatible endpoint; a loopback one needs no AWS credentials. Reaches the control plane only. Unset: AWS_ENDPOINT_URL_LAMBDA_MICROVMS, then AWS_ENDPOINT_URL, else AWS." env:"MICROVM_CONTROL_ENDPOINT" placeholder:"URL"`
	RegionFlags
}

// InfraFlags are the account values AWS builds and launches need; against
// an emulator none is required.
type InfraFlags struct {
	Bucket           string `help:"S3 bucket the build artifact is uploaded to (AWS); against an emulator the artifact goes to a local store instead." env:"MICROVM_BUCKET" placeholder:"BUCKET"`
	BuildRoleARN     string `name:"build-role-arn" help:"IAM role the image build runs as (AWS)." env:"MICROVM_BUILD_ROLE_ARN" placeholder:"ARN"`
	ExecutionRoleARN string `name:"execution-role-arn" help:"IAM role the MicroVM runs as (AWS)." env:"MICROVM_EXECUTION_ROLE_ARN" placeholder:"ARN"`
}

// plane is the control plane one lifecycle command talks to, with the
// services beside it: client/platform's, plus the emulator this process
// runs for --local.
type plane struct {
	*platform.Platform
	emu   *embedded.Emulator // --local: the emulator this process runs
	steps *buildSteps        // --local: the Dockerfile builds' progress
	a     *app
}

// open resolves the plane. With --local it starts the emulator, which close
// stops with every guest.
func (f *LifecycleFlags) open(ctx context.Context, a *app) (*plane, error) {
	p := &plane{a: a}
	if f.BaseImage != "" {
		// Only an emulator this process runs builds with it: a running one
		// was given its base image when it started, and AWS builds FROM
		// itself. Silently ignored, its RUN steps were skipped (issue 51.1).
		if !f.Local {
			return nil, render.InvalidArg("", "--base-image acts only with --local: a running emulator builds FROM the base image it was started with (`microvm emulator --base-image PATH`), and AWS builds FROM itself")
		}
		if err := checkBaseImagePath(f.BaseImage); err != nil {
			return nil, err
		}
	}
	if f.Local {
		region := client.USEast1
		if r, ok, err := f.flagRegion(); err != nil {
			return nil, err
		} else if ok {
			region = r
		}
		var guestLog io.Writer
		if a.Env("MICROVM_GUEST_LOG") != "" {
			guestLog = a.Stderr
		}
		steps := &buildSteps{a: a}
		emu, err := embedded.Start(ctx, embedded.Options{Agentd: f.Agentd, Region: region, GuestLog: guestLog, Getenv: a.Env,
			BaseImage: f.BaseImage, BuildProgress: steps.event,
			// Every path (run --local, run_many, the engine, MCP) says so
			// when a guest runs without some of its limits.
			Warn: func(msg string) { a.Warn("%s", msg) }})
		if err != nil {
			return nil, err
		}
		a.Progress("local emulator serving %s (guests run %s)", emu.URL, emu.Agentd)
		p.Platform, err = planes.Local(ctx, emu, region, a.Env)
		if err != nil {
			emu.Close()
			return nil, err
		}
		p.emu, p.steps = emu, steps
		return p, nil
	}
	region, err := f.controlRegion(a.Env)
	if err != nil {
		return nil, err
	}
	p.Platform, err = platform.Open(ctx, platform.Options{Region: region, Endpoint: cplane.ConfiguredEndpoint(f.ControlEndpoint, a.Env),
		Emulator: planes.EmulatorSide(nil), Getenv: a.Env})
	if err != nil {
		return nil, err
	}
	if a.command != "doctor" {
		// doctor reports the credentials as one of its checks.
		if err := a.requireAWSCredentials(ctx, p.Platform); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// requireAWSCredentials refuses, before anything else fails for want of
// them, a command bound for AWS itself (no control endpoint) on a machine
// whose credential chain yields nothing: its hints name --local and
// `microvm emulator` (hints.go).
func (a *app) requireAWSCredentials(ctx context.Context, p *platform.Platform) error {
	if err := p.CheckCredentials(ctx); err != nil {
		a.awsWithoutCredentials = true
		return err
	}
	return nil
}

// checkBaseImagePath refuses a --base-image that is not there, before an
// emulator is started with it.
func checkBaseImagePath(path string) error {
	if _, err := os.Stat(path); err != nil {
		return render.InvalidArg("", "--base-image %s: %v (give an OCI image layout directory or a docker-save tarball)", path, errors.Unwrap(err))
	}
	return nil
}

func (p *plane) close() {
	if p != nil && p.emu != nil {
		p.emu.Close()
	}
}

// ledgerDir is the run ledger's directory: the flag, else the default.
func ledgerDir(_ *app, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	dir, err := ledger.DefaultDir()
	if err != nil {
		return "", render.InvalidArg("", "%v; pass --state-dir", err)
	}
	return dir, nil
}

// guestMachine is the ELF machine a daemon baked into an image must be for.
func (p *plane) guestMachine() elf.Machine { return planes.GuestMachine(p.Platform) }
