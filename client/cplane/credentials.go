package cplane

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/logging"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// credentialsProbe bounds the one resolution CheckCredentials makes: off EC2
// the instance-metadata step of the chain is the slow one, and a machine
// with no credentials at all should hear so in seconds, not after the
// chain's own retries.
const credentialsProbe = 3 * time.Second

// CheckCredentials resolves the SDK's default credential chain once
// (environment, shared config and credentials files, SSO, a credential
// process, web identity, container and instance metadata), for a caller about
// to call AWS itself rather than an emulator or another configured endpoint.
// A chain that yields nothing is a Credentials error that says so in one
// sentence, in place of the chain's last step's failure (on a laptop, the
// instance metadata service's). It makes no call to any MicroVMs endpoint.
func CheckCredentials(ctx context.Context, region client.Region) error {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region.String()), config.WithLogger(logging.Nop{}))
	if err != nil {
		return client.Errorf(taxonomy.KindCredentials, "", "loading the AWS configuration: %w", err)
	}
	if cfg.Credentials == nil {
		return client.Errorf(taxonomy.KindCredentials, "", "the AWS configuration resolved no credentials provider")
	}
	ctx, cancel := context.WithTimeout(ctx, credentialsProbe)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return client.Errorf(taxonomy.KindCredentials, "",
			"no AWS credentials: the SDK's chain (environment, shared config and credentials files, SSO, web identity, container and instance metadata) found none, and no control endpoint is configured, so this would call AWS").WithCause(err)
	}
	return nil
}
