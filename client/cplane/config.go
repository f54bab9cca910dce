package cplane

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/logging"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Options configure New. Region is required; everything else has a default
// taken from the environment the way aws-sdk-go-v2 takes it.
type Options struct {
	// Region is one of the supported regions, or client.UnlistedRegion.
	Region client.Region
	// Endpoint overrides the resolved endpoint (an emulator, a proxy).
	// Unset, ConfiguredEndpoint's variables apply.
	Endpoint string
	// UseFIPS and UseDualStack select those endpoint variants.
	UseFIPS, UseDualStack bool
	// Credentials default to config.LoadDefaultConfig's chain: environment,
	// shared config and profiles, SSO, a credential process, IMDS.
	Credentials aws.CredentialsProvider
	// HTTPClient sends the requests; the SDK's default when nil.
	HTTPClient *http.Client
	// MaxAttempts bounds attempts per call, the first included (default 5).
	MaxAttempts int
	// MaxBackoff caps one retry delay, Retry-After included (default 20s).
	MaxBackoff time.Duration
	// Getenv reads the environment (default os.Getenv).
	Getenv func(string) string
}

// New builds the control-plane client. It makes no network call;
// credentials are resolved when the first request is signed. The retryer is
// aws-sdk-go-v2's standard one with MaxAttempts and MaxBackoff.
func New(ctx context.Context, o Options) (*lambdamicrovms.Client, error) {
	if o.Region.IsZero() {
		return nil, client.Errorf(taxonomy.KindInvalidArg, taxonomy.RegionFinding, "no region: pick one of %v (or client.UnlistedRegion for one this client has not seen carry MicroVMs)", taxonomy.Regions)
	}
	endpoint := ConfiguredEndpoint(o.Endpoint, o.Getenv)
	if endpoint != "" {
		if o.UseFIPS || o.UseDualStack {
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "control-plane endpoint: a custom endpoint cannot be combined with FIPS or dual-stack")
		}
		if u, err := url.Parse(endpoint); err != nil || u.Scheme == "" || u.Host == "" {
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "control-plane endpoint %q is not an absolute URL", endpoint)
		}
		endpoint = strings.TrimRight(endpoint, "/")
	}
	creds := o.Credentials
	if creds == nil {
		// The SDK's own logger writes lines like "WARN falling back to
		// IMDSv1" on stderr, outside any caller's output contract; a
		// credential the chain cannot resolve is reported as a Credentials
		// error instead.
		cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(o.Region.String()), config.WithLogger(logging.Nop{}))
		if err != nil {
			return nil, client.Errorf(taxonomy.KindCredentials, "", "loading the AWS configuration: %w", err)
		}
		creds = cfg.Credentials
		if creds == nil {
			return nil, client.Errorf(taxonomy.KindCredentials, "", "the AWS configuration resolved no credentials provider")
		}
	}
	maxBackoff := o.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 20 * time.Second
	}
	attempts := o.MaxAttempts
	if attempts <= 0 {
		attempts = 5
	}
	so := lambdamicrovms.Options{
		Region:      o.Region.String(),
		Credentials: creds,
		Retryer: retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = attempts
			so.MaxBackoff = maxBackoff
			so.Backoff = retry.NewExponentialJitterBackoff(maxBackoff)
		}),
	}
	if endpoint != "" {
		so.BaseEndpoint = aws.String(endpoint)
	}
	so.EndpointOptions.UseFIPSEndpoint, so.EndpointOptions.UseDualStackEndpoint = fipsState(o.UseFIPS), dualStackState(o.UseDualStack)
	if o.HTTPClient != nil {
		so.HTTPClient = o.HTTPClient
	}
	return lambdamicrovms.New(so), nil
}

// Service names one AWS service this project calls by the suffix of its
// AWS_ENDPOINT_URL_<SERVICE> variable, which the SDKs derive from the
// service model's sdkId (upper case, spaces to underscores).
type Service string

// The services the CLI calls, each reached only at its own endpoint.
const (
	ServiceMicrovms Service = "LAMBDA_MICROVMS" // sdkId "Lambda Microvms": the control plane
	ServiceS3       Service = "S3"              // build artifacts
	ServiceLogs     Service = "CLOUDWATCH_LOGS" // build log groups (`logs`, teardown)
	ServiceSTS      Service = "STS"             // GetCallerIdentity (`doctor`)
	ServiceIAM      Service = "IAM"             // the roles `setup` makes and `doctor` checks
)

// ServiceEndpoint is the endpoint configured for svc by the SDKs' rules, ""
// when none: AWS_ENDPOINT_URL_<svc>, then AWS_ENDPOINT_URL, and neither when
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true. No other service's variable
// ever applies: Lambda's AWS_ENDPOINT_URL_LAMBDA is not the control plane's.
// getenv nil reads the process environment.
func ServiceEndpoint(svc Service, getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	if strings.EqualFold(strings.TrimSpace(getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")), "true") {
		return ""
	}
	for _, k := range []string{"AWS_ENDPOINT_URL_" + string(svc), "AWS_ENDPOINT_URL"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return ""
}

// ConfiguredEndpoint is the control-plane endpoint a caller configured, ""
// when none: the option (--control-endpoint) first, then
// ServiceEndpoint(ServiceMicrovms): AWS_ENDPOINT_URL_LAMBDA_MICROVMS, then
// AWS_ENDPOINT_URL, unless AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true. The
// option reaches the control plane only. getenv nil reads the process
// environment.
func ConfiguredEndpoint(option string, getenv func(string) string) string {
	if option != "" {
		return option
	}
	return ServiceEndpoint(ServiceMicrovms, getenv)
}

// ManagedBaseImageARN is the managed base image's ARN in region.
func ManagedBaseImageARN(region string) string {
	return "arn:" + lambdamicrovms.PartitionID(region) + ":lambda:" + region + ":aws:microvm-image:" + taxonomy.ManagedBaseImage
}

// EndpointURL turns the bare host GetMicrovm and RunMicrovm return into a
// URL; the service sends no scheme (finding endpoint-bare-host). A platform
// endpoint gets https://. A loopback host (127.0.0.0/8, ::1, localhost,
// with or without a port) gets http://: no platform endpoint is loopback,
// and the local emulator serves its endpoint proxy as plain HTTP there, the
// one place client.Proxied accepts plain HTTP. A value that already has a
// scheme is returned unchanged.
func EndpointURL(endpoint string) string {
	if strings.Contains(endpoint, "://") {
		return endpoint
	}
	if isLoopbackHost(endpoint) {
		return "http://" + endpoint
	}
	return "https://" + endpoint
}

// isLoopbackHost reports whether a bare host[:port] names this machine.
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func fipsState(on bool) aws.FIPSEndpointState {
	if on {
		return aws.FIPSEndpointStateEnabled
	}
	return aws.FIPSEndpointStateUnset
}

func dualStackState(on bool) aws.DualStackEndpointState {
	if on {
		return aws.DualStackEndpointStateEnabled
	}
	return aws.DualStackEndpointStateUnset
}

// IsLoopbackURL reports whether a URL's host names this machine (127.0.0.0/8,
// ::1, localhost): an emulator's control plane, never AWS's.
func IsLoopbackURL(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return false
	}
	return isLoopbackHost(u.Host)
}
