package platform

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/setup"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The services `microvm setup`, `doctor` and `gc` need beside the control
// plane: IAM and S3 at their own endpoints, the caller's account from STS.
// A local control plane with any of them on AWS is refused without a
// request, as the artifact upload is: an emulator's roles and buckets are
// its own, and AWS's of the same name are someone else's.

func (p *Platform) localService(name, endpoint, variable string) error {
	if p.local && !IsLocal(endpoint) {
		return client.Errorf(taxonomy.KindPrecondition, "",
			"the control plane is an emulator at %s but %s resolves to AWS; set AWS_ENDPOINT_URL (every service) or %s to the emulator", p.endpoint, name, variable)
	}
	return nil
}

// SetupOptions are setup.Options for this platform's account and region:
// the IAM and S3 clients and the account id STS names.
func (p *Platform) SetupOptions(ctx context.Context, prefix string, dryRun bool) (setup.Options, error) {
	if err := p.localService("IAM", p.iamEndpoint, "AWS_ENDPOINT_URL_IAM"); err != nil {
		return setup.Options{}, err
	}
	if err := p.localService("S3", p.s3Endpoint, "AWS_ENDPOINT_URL_S3"); err != nil {
		return setup.Options{}, err
	}
	if err := p.localService("STS", p.stsEndpoint, "AWS_ENDPOINT_URL_STS"); err != nil {
		return setup.Options{}, err
	}
	s3c, err := p.s3Client(ctx)
	if err != nil {
		return setup.Options{}, err
	}
	icfg, err := p.config(ctx, p.iamEndpoint)
	if err != nil {
		return setup.Options{}, err
	}
	scfg, err := p.config(ctx, p.stsEndpoint)
	if err != nil {
		return setup.Options{}, err
	}
	id, err := sts.NewFromConfig(scfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return setup.Options{}, client.Errorf(taxonomy.KindCredentials, "", "STS GetCallerIdentity: %w", err)
	}
	return setup.Options{IAM: iam.NewFromConfig(icfg), S3: s3c, Account: aws.ToString(id.Account), Region: p.region.String(), Prefix: prefix, DryRun: dryRun}, nil
}

func (p *Platform) s3Client(ctx context.Context) (*s3.Client, error) {
	cfg, err := p.config(ctx, p.s3Endpoint)
	if err != nil {
		return nil, err
	}
	custom := p.s3Endpoint != ""
	return s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = o.UsePathStyle || custom }), nil
}

// GCOptions are setup.GCOptions for this platform: the control plane, its
// CloudWatch Logs and S3, and the run ledger's records.
func (p *Platform) GCOptions(ctx context.Context, bucket string, runs []ledger.Run) (setup.GCOptions, error) {
	o := setup.GCOptions{Control: p.cp, Bucket: strings.TrimSpace(bucket), Runs: runs}
	lc, err := p.logs(ctx)
	if err != nil {
		return o, err
	}
	o.Logs = lc
	if o.Bucket != "" {
		if err := p.localService("S3", p.s3Endpoint, "AWS_ENDPOINT_URL_S3"); err != nil {
			return o, err
		}
		if o.S3, err = p.s3Client(ctx); err != nil {
			return o, err
		}
	}
	return o, nil
}
