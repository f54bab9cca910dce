package main

import (
	"context"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/taxonomy"
)

// LifecycleFlags choose the control plane a lifecycle command drives: AWS by
// default, a running emulator (or any compatible endpoint) with
// --control-endpoint, or an emulator in this process with --local.
type LifecycleFlags struct {
	Local           bool   `help:"Run the local emulator in this process for this one command: no AWS account, guests are agentd processes on this machine, and everything stops when the command exits."`
	Agentd          string `name:"agentd" help:"The host agentd the emulator's guests run with --local; unset: $MICROVM_AGENTD, then an agentd next to the microvm executable, then PATH." placeholder:"PATH" type:"path"`
	BaseImage       string `name:"base-image" help:"With --local: the image a Dockerfile's FROM stands for, as an OCI image layout directory or a docker-save tarball (for offline machines); unset, FROM is pulled from its registry with your Docker credentials and kept by digest in the state directory." placeholder:"PATH" type:"path"`
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

// plane is the control plane one lifecycle command talks to.
type plane struct {
	cp     *lambdamicrovms.Client
	region client.Region
	// endpoint is the configured control-plane URL, "" for AWS's own.
	endpoint string
	// local is true for an endpoint on this machine: an emulator, which
	// needs no credentials, moves with the wall clock and reads artifacts
	// from a local store.
	local bool
	// The endpoints of the services beside the control plane, each by the
	// SDKs' rules (cplane.ServiceEndpoint): "" is AWS's own. With --local
	// every one is the in-process emulator.
	s3Endpoint, logsEndpoint, stsEndpoint string
	emu                                   *embedded.Emulator // --local: the emulator this process runs
	steps                                 *buildSteps        // --local: the Dockerfile builds' progress
	a                                     *app
}

// open resolves the plane. With --local it starts the emulator, which close
// stops with every guest.
func (f *LifecycleFlags) open(ctx context.Context, a *app) (*plane, error) {
	p := &plane{a: a}
	if f.Local {
		region := client.USEast1
		if r, ok, err := f.flagRegion(); err != nil {
			return nil, err
		} else if ok {
			region = r
		}
		var guestLog io.Writer
		if a.env("MICROVM_GUEST_LOG") != "" {
			guestLog = a.stderr
		}
		p.steps = &buildSteps{a: a}
		emu, err := embedded.Start(ctx, embedded.Options{Agentd: f.Agentd, Region: region, GuestLog: guestLog, Getenv: a.env,
			BaseImage: f.BaseImage, BuildProgress: p.steps.event})
		if err != nil {
			return nil, err
		}
		a.progress("local emulator serving %s (guests run %s)", emu.URL, emu.Agentd)
		cpc, err := emu.Control(ctx)
		if err != nil {
			emu.Close()
			return nil, err
		}
		p.cp, p.region, p.endpoint, p.local, p.emu = cpc, region, emu.URL, true, emu
		p.s3Endpoint, p.logsEndpoint, p.stsEndpoint = emu.URL, emu.URL, emu.URL
		return p, nil
	}
	region, err := f.controlRegion(a.env)
	if err != nil {
		return nil, err
	}
	p.region = region
	p.endpoint = cplane.ConfiguredEndpoint(f.ControlEndpoint, a.env)
	p.local = embedded.IsLocal(p.endpoint)
	p.s3Endpoint = cplane.ServiceEndpoint(cplane.ServiceS3, a.env)
	p.logsEndpoint = cplane.ServiceEndpoint(cplane.ServiceLogs, a.env)
	p.stsEndpoint = cplane.ServiceEndpoint(cplane.ServiceSTS, a.env)
	p.cp, err = newControl(ctx, region, p.endpoint, a.env)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newControl is the control-plane client for endpoint ("" is AWS's own). A
// loopback endpoint is an emulator: it is signed with the emulator's
// placeholder credentials, so no AWS account is needed.
func newControl(ctx context.Context, region client.Region, endpoint string, getenv func(string) string) (*lambdamicrovms.Client, error) {
	o := cplane.Options{Region: region, Endpoint: endpoint, Getenv: getenv}
	if embedded.IsLocal(endpoint) {
		o.Credentials, o.MaxBackoff = embedded.Credentials(), 50*time.Millisecond
	}
	return cplane.New(ctx, o)
}

func (p *plane) close() {
	if p != nil && p.emu != nil {
		p.emu.Close()
	}
}

// wait is the waiter options: fast polls against an emulator, the
// platform's pace against AWS; timeout bounds a wait whose context has no
// deadline.
func (p *plane) wait(timeout time.Duration) cplane.WaitOptions {
	if p.local {
		return embedded.WaitOptions(timeout)
	}
	return cplane.WaitOptions{Interval: 5 * time.Second, Timeout: timeout}
}

// awsConfig is the SDK configuration for a service beside the control plane
// (S3, CloudWatch Logs, STS) reached at endpoint: "" is AWS's own, resolved
// by the SDK from its configuration; a loopback endpoint is an emulator,
// signed with its placeholder credentials, so no AWS account is needed.
func (p *plane) awsConfig(ctx context.Context, endpoint string) (aws.Config, error) {
	if embedded.IsLocal(endpoint) {
		return aws.Config{Region: p.region.String(), Credentials: embedded.Credentials(), BaseEndpoint: aws.String(endpoint), Logger: logging.Nop{}}, nil
	}
	// The SDK's own logger ("WARN falling back to IMDSv1") would write
	// outside the CLI's stderr contract; a failure arrives as an error.
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(p.region.String()), config.WithLogger(logging.Nop{}))
	if err != nil {
		return aws.Config{}, client.Errorf(taxonomy.KindCredentials, "", "loading the AWS configuration: %w", err)
	}
	if endpoint != "" {
		// Resolved from this command's environment, which the SDK's own
		// loader never sees when it is not the process's.
		cfg.BaseEndpoint = aws.String(endpoint)
	}
	return cfg, nil
}

// logs is the CloudWatch Logs client, at CloudWatch Logs' own endpoint
// (AWS_ENDPOINT_URL_CLOUDWATCH_LOGS, AWS_ENDPOINT_URL, else AWS): never the
// control plane's, which is another service's. A local control plane with
// CloudWatch Logs on AWS is refused without a request: its build log groups
// are in the emulator, and AWS's group of the same name is someone else's.
func (p *plane) logs(ctx context.Context) (*cloudwatchlogs.Client, error) {
	if p.local && !embedded.IsLocal(p.logsEndpoint) {
		return nil, client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingBuildLogsLocation,
			"the control plane is an emulator at %s but CloudWatch Logs resolves to AWS, where its build log groups are not; set AWS_ENDPOINT_URL (every service) or AWS_ENDPOINT_URL_CLOUDWATCH_LOGS to the emulator", p.endpoint)
	}
	cfg, err := p.awsConfig(ctx, p.logsEndpoint)
	if err != nil {
		return nil, err
	}
	return cloudwatchlogs.NewFromConfig(cfg), nil
}

// uploader is where a build's artifact goes: nowhere with --artifact-uri
// (it is already there), the local store an emulator reads when no bucket
// is set, else S3 at its own endpoint (AWS_ENDPOINT_URL_S3,
// AWS_ENDPOINT_URL, else AWS). A local control plane with S3 on AWS is
// refused: the emulator could never read what was uploaded.
func (p *plane) uploader(ctx context.Context, artifactURI, bucket string) (build.Uploader, error) {
	switch {
	case artifactURI != "":
		return build.PresetURI(artifactURI), nil
	case p.local && bucket == "":
		dir, err := artifactDir(p.a)
		if err != nil {
			return nil, err
		}
		return build.DirUploader{Dir: dir}, nil
	case bucket == "":
		return nil, client.Errorf(taxonomy.KindPrecondition, "",
			"no --bucket (MICROVM_BUCKET) and no --artifact-uri: an AWS build reads its artifact from S3")
	case p.local && !embedded.IsLocal(p.s3Endpoint):
		return nil, client.Errorf(taxonomy.KindPrecondition, "",
			"the control plane is an emulator at %s but S3 resolves to AWS: the emulator cannot read s3://%s; set AWS_ENDPOINT_URL (every service) or AWS_ENDPOINT_URL_S3 to the emulator, or unset MICROVM_BUCKET to use the local artifact store", p.endpoint, bucket)
	}
	if p.emu != nil {
		// --local: this process's emulator holds no bucket yet.
		p.emu.Server.CreateBucket(bucket)
	}
	cfg, err := p.awsConfig(ctx, p.s3Endpoint)
	if err != nil {
		return nil, err
	}
	custom := p.s3Endpoint != ""
	return build.NewS3Uploader(s3.NewFromConfig(cfg, func(o *s3.Options) {
		// A custom endpoint (an emulator, LocalStack) is addressed by
		// path: a bucket-named host under 127.0.0.1 resolves nowhere.
		o.UsePathStyle = o.UsePathStyle || custom
	}), bucket), nil
}

// artifactDir is the local artifact store: $MICROVM_ARTIFACT_DIR, else the
// user's cache directory. An artifact is a cache entry: the emulator unpacks
// what it reads into its own state.
func artifactDir(a *app) (string, error) {
	if d := a.env("MICROVM_ARTIFACT_DIR"); d != "" {
		return d, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", client.Errorf(taxonomy.KindPrecondition, "", "no local artifact store: %v; set MICROVM_ARTIFACT_DIR", err)
	}
	return filepath.Join(dir, "microvm", "artifacts"), nil
}

// ledgerDir is the run ledger's directory: the flag, else the default.
func ledgerDir(_ *app, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	dir, err := ledger.DefaultDir()
	if err != nil {
		return "", invalidArg("", "%v; pass --state-dir", err)
	}
	return dir, nil
}

// guestMachine is the ELF machine a daemon baked into an image must be for:
// the host's for an emulator, aarch64 for the platform.
func (p *plane) guestMachine() elf.Machine {
	if p.local {
		return emulator.HostMachine()
	}
	return 0
}

// placeholder ARNs an emulator accepts where AWS needs a real role; the
// emulator checks only their shape.
const (
	emulatorBuildRole = "arn:aws:iam::123456789012:role/microvm-emulator-build"
)

// buildRole is the build role: the flag, else the emulator's placeholder.
func (p *plane) buildRole(flag string) (string, error) {
	switch {
	case flag != "":
		return flag, nil
	case p.local:
		return emulatorBuildRole, nil
	}
	return "", client.Errorf(taxonomy.KindPrecondition, "", "an AWS image build needs --build-role-arn (MICROVM_BUILD_ROLE_ARN)")
}
