// Package platform is the AWS side one command talks to: the Lambda
// MicroVMs control plane and the services beside it (S3 for build
// artifacts, CloudWatch Logs for build log groups, STS for the caller's
// identity), each reached at its own endpoint by the SDKs' rules
// (cplane.ServiceEndpoint) and signed by the default credential chain, or,
// for a control plane on this machine (an emulator), by the placeholder
// credentials the caller supplies. A CLI parses its flags into Options,
// calls Open, and from then on only asks: launch through Control, a MicroVM
// by its id through Handle, images, log groups, artifacts.
//
// What it must never do: send a control plane on this machine's artifacts or
// log-group requests to AWS's own S3 or CloudWatch Logs (the buckets and
// groups are the emulator's, and AWS's of the same name are someone
// else's); let the SDK log on its own (the caller owns stderr); or return an
// error that is not a *client.Error, whose kind decides a CLI's exit code.
package platform

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/logging"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Emulator is what a caller knows of a local control plane: how its
// requests are signed (it checks a signature's scope, never its secret), how
// fast it moves, and, for one in the caller's own process, how to make a
// bucket in its S3.
type Emulator struct {
	Credentials aws.CredentialsProvider
	Wait        func(timeout time.Duration) cplane.WaitOptions
	// CreateBucket makes a bucket in an in-process emulator's S3; nil for
	// one in another process (`microvm emulator` makes its buckets itself).
	CreateBucket func(name string)
}

// Options configure Open.
type Options struct {
	Region client.Region
	// Endpoint is the configured control-plane URL (--control-endpoint,
	// AWS_ENDPOINT_URL_LAMBDA_MICROVMS, AWS_ENDPOINT_URL), "" for AWS's own.
	Endpoint string
	// Control is a control-plane client already built (an emulator in the
	// caller's process, which then serves every service at Endpoint); nil
	// builds one for Endpoint.
	Control *lambdamicrovms.Client
	// Emulator describes a control plane on this machine. It applies when
	// Control is set or Endpoint is a loopback URL; nil leaves such an
	// endpoint signed by the default chain.
	Emulator *Emulator
	Getenv   func(string) string
}

// Platform is the control plane and its neighbours for one command.
type Platform struct {
	region   client.Region
	endpoint string
	local    bool
	emu      *Emulator
	cp       *lambdamicrovms.Client
	// The endpoints of the services beside the control plane, "" for AWS's
	// own; an in-process emulator is all of them.
	s3Endpoint, logsEndpoint, stsEndpoint string
	iamEndpoint                           string // setup.go
}

// IsLocal reports whether endpoint is a URL on this machine (a loopback
// host): an emulator, or a compatible endpoint that does not verify
// credentials either.
func IsLocal(endpoint string) bool {
	if endpoint == "" {
		return false
	}
	return cplane.IsLoopbackURL(endpoint)
}

// Open resolves the platform. It makes no network call.
func Open(ctx context.Context, o Options) (*Platform, error) {
	p := &Platform{region: o.Region, endpoint: o.Endpoint, cp: o.Control}
	p.local = o.Control != nil || IsLocal(o.Endpoint)
	if p.local {
		p.emu = o.Emulator
	}
	if o.Control != nil {
		p.s3Endpoint, p.logsEndpoint, p.stsEndpoint, p.iamEndpoint = o.Endpoint, o.Endpoint, o.Endpoint, o.Endpoint
		return p, nil
	}
	p.s3Endpoint = cplane.ServiceEndpoint(cplane.ServiceS3, o.Getenv)
	p.logsEndpoint = cplane.ServiceEndpoint(cplane.ServiceLogs, o.Getenv)
	p.stsEndpoint = cplane.ServiceEndpoint(cplane.ServiceSTS, o.Getenv)
	p.iamEndpoint = cplane.ServiceEndpoint(cplane.ServiceIAM, o.Getenv)
	co := cplane.Options{Region: o.Region, Endpoint: o.Endpoint, Getenv: o.Getenv}
	if p.local && p.emu != nil {
		co.Credentials, co.MaxBackoff = p.emu.Credentials, 50*time.Millisecond
	}
	cp, err := cplane.New(ctx, co)
	if err != nil {
		return nil, err
	}
	p.cp = cp
	return p, nil
}

// Region is the control plane's region.
func (p *Platform) Region() client.Region { return p.region }

// Endpoint is the control plane's configured URL, "" for AWS's own.
func (p *Platform) Endpoint() string { return p.endpoint }

// Local reports a control plane on this machine (an emulator): no
// credentials needed, the wall clock's pace, artifacts from a local store.
func (p *Platform) Local() bool { return p.local }

// Control is the control-plane client, for build.Build and sandbox.Launch.
func (p *Platform) Control() *lambdamicrovms.Client { return p.cp }

// Wait is the waiter options: an emulator's fast polls, or the platform's
// pace; timeout bounds a wait whose context has no deadline.
func (p *Platform) Wait(timeout time.Duration) cplane.WaitOptions {
	if p.local && p.emu != nil && p.emu.Wait != nil {
		return p.emu.Wait(timeout)
	}
	return cplane.WaitOptions{Interval: 5 * time.Second, Timeout: timeout}
}

// Handle is the MicroVM id, for the by-id lifecycle (sandbox.Handle).
func (p *Platform) Handle(id string) *sandbox.Handle { return sandbox.Open(p.cp, id) }

// List is every MicroVM the control plane lists.
func (p *Platform) List(ctx context.Context) ([]sandbox.Status, error) {
	return sandbox.List(ctx, p.cp)
}

// CheckCredentials refuses a platform bound for AWS itself (no configured
// control endpoint) on a machine whose credential chain yields nothing
// (cplane.CheckCredentials); anything else passes unasked.
func (p *Platform) CheckCredentials(ctx context.Context) error {
	if p.endpoint != "" {
		return nil
	}
	return cplane.CheckCredentials(ctx, p.region)
}

// config is the SDK configuration for a service beside the control plane
// reached at endpoint: "" is AWS's own, resolved by the SDK; a loopback
// endpoint is an emulator, signed with its placeholder credentials.
func (p *Platform) config(ctx context.Context, endpoint string) (aws.Config, error) {
	if IsLocal(endpoint) && p.emu != nil {
		return aws.Config{Region: p.region.String(), Credentials: p.emu.Credentials, BaseEndpoint: aws.String(endpoint), Logger: logging.Nop{}}, nil
	}
	// The SDK's own logger ("WARN falling back to IMDSv1") would write
	// outside the caller's stderr contract; a failure arrives as an error.
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(p.region.String()), config.WithLogger(logging.Nop{}))
	if err != nil {
		return aws.Config{}, client.Errorf(taxonomy.KindCredentials, "", "loading the AWS configuration: %w", err)
	}
	if endpoint != "" {
		// Resolved from the caller's environment, which the SDK's own
		// loader never sees when it is not the process's.
		cfg.BaseEndpoint = aws.String(endpoint)
	}
	return cfg, nil
}

// logs is the CloudWatch Logs client, at CloudWatch Logs' own endpoint
// (never the control plane's). A local control plane with CloudWatch Logs
// on AWS is refused without a request: its build log groups are in the
// emulator, and AWS's group of the same name is someone else's.
func (p *Platform) logs(ctx context.Context) (*cloudwatchlogs.Client, error) {
	if p.local && !IsLocal(p.logsEndpoint) {
		return nil, client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingBuildLogsLocation,
			"the control plane is an emulator at %s but CloudWatch Logs resolves to AWS, where its build log groups are not; set AWS_ENDPOINT_URL (every service) or AWS_ENDPOINT_URL_CLOUDWATCH_LOGS to the emulator", p.endpoint)
	}
	cfg, err := p.config(ctx, p.logsEndpoint)
	if err != nil {
		return nil, err
	}
	return cloudwatchlogs.NewFromConfig(cfg), nil
}

// LogGroups is the deleter a sandbox's teardown removes its build log group
// with, nil when CloudWatch Logs cannot be reached (teardown then names the
// group as left behind).
func (p *Platform) LogGroups(ctx context.Context) sandbox.LogGroupDeleter {
	if lc, err := p.logs(ctx); err == nil {
		return lc
	}
	return nil // an untyped nil: a nil *Client in the interface would be called
}

// DeleteLogGroup deletes a build log group; one already gone is deleted.
func (p *Platform) DeleteLogGroup(ctx context.Context, group string) error {
	logs, err := p.logs(ctx)
	if err != nil {
		return err
	}
	_, err = logs.DeleteLogGroup(ctx, &cloudwatchlogs.DeleteLogGroupInput{LogGroupName: &group})
	var nf *cwtypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return client.Errorf(client.KindOf(err), taxonomy.FindingBuildLogGroupSurvives, "deleting %s: %w", group, err)
	}
	return nil
}

// ReadLogGroup reads at most limit lines of a build log group, oldest first,
// each prefixed with its RFC 3339 time.
func (p *Platform) ReadLogGroup(ctx context.Context, group string, limit int) ([]string, error) {
	logs, err := p.logs(ctx)
	if err != nil {
		return nil, err
	}
	lines := []string{}
	pg := cloudwatchlogs.NewFilterLogEventsPaginator(logs, &cloudwatchlogs.FilterLogEventsInput{LogGroupName: &group})
	for pg.HasMorePages() && len(lines) < limit {
		out, err := pg.NextPage(ctx)
		var nf *cwtypes.ResourceNotFoundException
		if errors.As(err, &nf) {
			return nil, client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingBuildLogsLocation,
				"no log group %s: the image was never built here, or its group was deleted", group)
		}
		if err != nil {
			return nil, client.Errorf(client.KindOf(err), taxonomy.FindingBuildLogsLocation, "reading %s: %w", group, err)
		}
		for _, e := range out.Events {
			if len(lines) == limit {
				break
			}
			line := aws.ToString(e.Message)
			if e.Timestamp != nil {
				line = time.UnixMilli(*e.Timestamp).UTC().Format(time.RFC3339) + " " + line
			}
			lines = append(lines, line)
		}
	}
	return lines, nil
}

// Uploader is where a build's artifact goes: nowhere with artifactURI (it
// is already there), the local store (dir, which an emulator reads) when no
// bucket is set, else S3 at its own endpoint. A local control plane with S3
// on AWS is refused: the emulator could never read what was uploaded.
func (p *Platform) Uploader(ctx context.Context, artifactURI, bucket string, localStore func() (string, error)) (build.Uploader, error) {
	switch {
	case artifactURI != "":
		return build.PresetURI(artifactURI), nil
	case p.local && bucket == "":
		dir, err := localStore()
		if err != nil {
			return nil, err
		}
		return build.DirUploader{Dir: dir}, nil
	case bucket == "":
		return nil, client.Errorf(taxonomy.KindPrecondition, "",
			"no --bucket (MICROVM_BUCKET) and no --artifact-uri: an AWS build reads its artifact from S3")
	case p.local && !IsLocal(p.s3Endpoint):
		return nil, client.Errorf(taxonomy.KindPrecondition, "",
			"the control plane is an emulator at %s but S3 resolves to AWS: the emulator cannot read s3://%s; set AWS_ENDPOINT_URL (every service) or AWS_ENDPOINT_URL_S3 to the emulator, or unset MICROVM_BUCKET to use the local artifact store", p.endpoint, bucket)
	}
	if p.emu != nil && p.emu.CreateBucket != nil {
		// An in-process emulator holds no bucket yet.
		p.emu.CreateBucket(bucket)
	}
	cfg, err := p.config(ctx, p.s3Endpoint)
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

// emulatorBuildRole is the placeholder an emulator accepts where AWS needs a
// real role; the emulator checks only its shape.
const emulatorBuildRole = "arn:aws:iam::123456789012:role/microvm-emulator-build"

// BuildRole is the role an image build runs as: given, else an emulator's
// placeholder; AWS needs one.
func (p *Platform) BuildRole(given string) (string, error) {
	switch {
	case given != "":
		return given, nil
	case p.local:
		return emulatorBuildRole, nil
	}
	return "", client.Errorf(taxonomy.KindPrecondition, "", "an AWS image build needs --build-role-arn (MICROVM_BUILD_ROLE_ARN)")
}

// Identity asks STS, at STS's own endpoint, whose credentials sign.
// needless is true when no credentials are needed at all: a control plane
// on this machine with STS on AWS is not asked.
func (p *Platform) Identity(ctx context.Context) (arn string, stsLocal, needless bool, err error) {
	if p.local && !IsLocal(p.stsEndpoint) {
		return "", false, true, nil
	}
	cfg, err := p.config(ctx, p.stsEndpoint)
	if err != nil {
		return "", false, false, err
	}
	id, err := sts.NewFromConfig(cfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return "", false, false, client.Errorf(taxonomy.KindCredentials, "", "STS GetCallerIdentity: %w", err)
	}
	return aws.ToString(id.Arn), IsLocal(p.stsEndpoint), false, nil
}

// STSEndpoint is STS's endpoint, "" for AWS's own.
func (p *Platform) STSEndpoint() string { return p.stsEndpoint }
