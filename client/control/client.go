package control

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/logging"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Options configure a Client. Region is required; everything else has a
// default taken from the environment the way aws-sdk-go-v2 takes it.
type Options struct {
	// Region is one of the supported regions, or client.UnlistedRegion.
	Region client.Region
	// Endpoint overrides the resolved endpoint (an emulator, a proxy).
	// Unset, AWS_ENDPOINT_URL_LAMBDA then AWS_ENDPOINT_URL apply.
	Endpoint string
	// UseFIPS and UseDualStack select those endpoint variants.
	UseFIPS, UseDualStack bool
	// Credentials default to config.LoadDefaultConfig's chain: environment,
	// shared config and profiles, SSO, a credential process, IMDS.
	Credentials aws.CredentialsProvider
	// HTTPClient sends the requests; a 60-second-timeout client by default.
	HTTPClient *http.Client
	// MaxAttempts bounds attempts per call, the first included (default 5).
	MaxAttempts int
	// MaxBackoff caps one retry delay, Retry-After included (default 20s).
	MaxBackoff time.Duration
	// Now is the signing and waiting clock (default time.Now).
	Now func() time.Time
	// Random is the entropy behind clientTokens (default crypto/rand).
	Random io.Reader
	// Getenv reads the environment (default os.Getenv).
	Getenv func(string) string
}

// Client is the control-plane client. It is safe for concurrent use.
type Client struct {
	region   client.Region
	endpoint string
	api      *cp.ClientWithResponses
	now      func() time.Time
	rnd      io.Reader
	sdk      *lambdamicrovms.Client
}

// New builds a Client. It makes no network call; credentials are resolved
// when the first request is signed.
func New(ctx context.Context, o Options) (*Client, error) {
	if o.Region.IsZero() {
		return nil, refuse(taxonomy.RegionFinding, "no region: pick one of %v (or client.UnlistedRegion for one this client has not seen carry MicroVMs)", taxonomy.Regions)
	}
	endpoint, err := resolveFor(&o)
	if err != nil {
		return nil, err
	}
	creds := o.Credentials
	if creds == nil {
		// The SDK's own logger writes lines like "WARN falling back to
		// IMDSv1" on stderr, outside any caller's output contract; a
		// credential the chain cannot resolve is reported as this client's
		// Credentials error instead.
		cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(o.Region.String()), config.WithLogger(logging.Nop{}))
		if err != nil {
			return nil, client.Errorf(taxonomy.KindCredentials, "", "loading the AWS configuration: %w", err)
		}
		creds = cfg.Credentials
		if creds == nil {
			return nil, client.Errorf(taxonomy.KindCredentials, "", "the AWS configuration resolved no credentials provider")
		}
	}
	api, err := cp.NewClientWithResponses(endpoint, cp.WithHTTPClient(newSigningTransport(&o, creds)))
	if err != nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "control-plane endpoint %q: %w", endpoint, err)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Random == nil {
		o.Random = defaultRandom
	}
	return &Client{region: o.Region, endpoint: endpoint, api: api, now: o.Now, rnd: o.Random, sdk: newSDK(&o, endpoint, creds)}, nil
}

// Region is the region the client signs for.
func (c *Client) Region() client.Region { return c.region }

// Endpoint is the resolved base URL.
func (c *Client) Endpoint() string { return c.endpoint }

// ManagedBaseImageARN is the managed base image's ARN in this region.
func (c *Client) ManagedBaseImageARN() string {
	return "arn:" + partitionOf(c.region.String()).name + ":lambda:" + c.region.String() + ":aws:microvm-image:" + taxonomy.ManagedBaseImage
}

// reply unwraps a generated reply's success body. The transport already
// turned every non-2xx into an error, so a nil body here is a 2xx the
// generated parser did not recognise.
func reply[T any](op string, body *T, raw []byte, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	if body == nil {
		return nil, client.Errorf(taxonomy.KindPlatform, "", "%s: the success reply did not parse as the model's output shape: %.200q", op, raw)
	}
	return body, nil
}
