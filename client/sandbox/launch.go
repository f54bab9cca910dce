package sandbox

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The launch and the proxy-token minter, on client/lambdamicrovms. The SDK
// mints the clientToken (crypto/rand, one per call, reused by its retries)
// and refuses the measured traps it owns (slash image ARNs, bare connector
// names, an oversized payload, a token over 60 minutes); the conversions from
// this package's durations to the wire's whole seconds and minutes are
// refused here, naming their findings.

// Options describe one launch.
type Options struct {
	// Image is the image's colon-form ARN; RunMicrovm takes no name.
	Image string
	// Version pins an image version; empty takes the latest active one.
	Version string
	// ImageName and LogGroup are what teardown may delete. ImageOwned says
	// this run built the image, so DeleteImage is allowed to remove it.
	ImageName, LogGroup string
	ImageOwned          bool

	ExecutionRoleARN string
	// AgentToken, when set, is the bearer agentd installs instead of one
	// Launch mints: for a caller that keeps tokens in its own store so
	// another process can Attach later. Empty (the usual case) mints 32
	// random bytes. Like a minted one it is never logged or persisted here.
	AgentToken string
	// Env is the launch environment, delivered once in the runHookPayload.
	Env         map[string]string
	Idle        *cplane.IdlePolicy
	MaxDuration time.Duration
	Connectors  cplane.Connectors
	// Port is agentd's port (default 9000); the proxy token is scoped to it.
	Port int

	Wait cplane.WaitOptions
	// SessionOptions are passed to client.Proxied (an HTTP client, retries).
	SessionOptions []client.Option
	// NoKeepAwake turns off the keep-awake pings. By default a VM with an
	// idle policy gets a GET /v1/health through its endpoint every
	// KeepAwakeEvery while a Run, an exec stream or a file transfer of this
	// sandbox is in flight, since the platform suspends a VM that gets no
	// inbound request for maxIdleDurationSeconds however busy its guest is
	// (finding idle-policy); nothing is sent while nothing is in flight.
	NoKeepAwake bool
	// KeepAwakeEvery is the keep-awake interval; zero is a quarter of the
	// VM's maxIdleDurationSeconds (client.KeepAwakeInterval).
	KeepAwakeEvery time.Duration
	// Warn, if set, receives warnings that refuse nothing: a command
	// timeout longer than the VM's maximum duration has left.
	Warn func(msg string)
	// Now is the clock the suspended window is measured on (default time.Now).
	Now func() time.Time
	// Ledger, if set, records the launch before it is sent.
	Ledger *ledger.Record
	// Logs deletes the build log group at teardown; nil names it as leaked.
	Logs LogGroupDeleter
	// Network, when set, launches the guest under a network policy with
	// secrets kept outside it (issue 48). Only an emulator on this machine
	// enforces one; on AWS the launch is refused before any call (finding
	// egress-connector-or-none).
	Network *Network
}

// LogGroupDeleter deletes a CloudWatch Logs group; *cloudwatchlogs.Client is
// one.
type LogGroupDeleter interface {
	DeleteLogGroup(ctx context.Context, in *cloudwatchlogs.DeleteLogGroupInput, optFns ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.DeleteLogGroupOutput, error)
}

// runInput is the RunMicrovm request of one launch, region naming the
// connector ARNs.
func runInput(region string, image string, o Options, payload cplane.RunHookPayload) (*lambdamicrovms.RunMicrovmInput, error) {
	in := &lambdamicrovms.RunMicrovmInput{ImageIdentifier: aws.String(image)}
	if o.Version != "" {
		if err := cplane.CheckImageVersion(o.Version); err != nil {
			return nil, err
		}
		in.ImageVersion = aws.String(o.Version)
	}
	if d := o.MaxDuration; d != 0 {
		sec := d / time.Second
		if d%time.Second != 0 || sec < taxonomy.MinDurationSec || sec > taxonomy.MaxDurationSec {
			return nil, refuse(taxonomy.FindingMaxDuration, "maximum duration %s is not a whole number of seconds in %d..%d (8 hours)", d, taxonomy.MinDurationSec, taxonomy.MaxDurationSec)
		}
		in.MaximumDurationInSeconds = aws.Int32(int32(sec))
	}
	if p := o.Idle; p != nil {
		if p.MaxIdle%time.Second != 0 || p.MaxIdle < taxonomy.MinIdleDurationSec*time.Second || p.SuspendedFor < 0 || p.SuspendedFor%time.Second != 0 {
			return nil, refuse(taxonomy.FindingIdlePolicy, "idle policy needs whole seconds: max idle at least %ds, suspended window at least 0", taxonomy.MinIdleDurationSec)
		}
		in.IdlePolicy = &types.IdlePolicy{
			MaxIdleDurationSeconds:   aws.Int32(int32(p.MaxIdle / time.Second)),
			SuspendedDurationSeconds: aws.Int32(int32(p.SuspendedFor / time.Second)),
			AutoResumeEnabled:        aws.Bool(p.AutoResume),
		}
	}
	if !payload.IsZero() {
		in.RunHookPayload = aws.String(payload.Payload())
	}
	if o.ExecutionRoleARN != "" {
		in.ExecutionRoleArn = aws.String(o.ExecutionRoleARN)
	}
	if o.Connectors.Ingress {
		in.IngressNetworkConnectors = []string{lambdamicrovms.ConnectorARN(region, "ALL_INGRESS")}
	}
	if o.Connectors.InternetEgress {
		in.EgressNetworkConnectors = []string{lambdamicrovms.ConnectorARN(region, "INTERNET_EGRESS")}
	}
	return in, nil
}

// ProxyMinter is the client.TokenMinter of a proxied session with the
// MicroVM microvmID: each mint is one CreateMicrovmAuthToken for exactly the
// ports and minutes the session asks for, never every port. The returned
// token is the minted header map without X-aws-proxy-port, since the session
// names the port on each request. Nothing is sent until the session's first
// request needs a token.
func ProxyMinter(api *lambdamicrovms.Client, microvmID string) client.TokenMinter {
	return client.TokenMinterFunc(func(ctx context.Context, req client.MintRequest) (client.ProxyToken, error) {
		in, err := tokenInput(microvmID, req)
		if err != nil {
			return client.ProxyToken{}, err
		}
		out, err := api.CreateMicrovmAuthToken(ctx, in)
		if err != nil {
			return client.ProxyToken{}, cplane.SDKError("CreateMicrovmAuthToken", err)
		}
		return proxyToken(out.AuthToken)
	})
}

// tokenInput is the CreateMicrovmAuthToken request of one mint: one port
// scope per asked-for port, the expiry in whole minutes within 1..60.
func tokenInput(microvmID string, req client.MintRequest) (*lambdamicrovms.CreateMicrovmAuthTokenInput, error) {
	if len(req.Ports) == 0 {
		return nil, refuse(taxonomy.FindingAllowedPortsUnion, "a proxy token needs at least one port scope")
	}
	in := &lambdamicrovms.CreateMicrovmAuthTokenInput{MicrovmIdentifier: aws.String(microvmID)}
	for _, p := range req.Ports {
		if p < 1 || p > 65535 {
			return nil, refuse(taxonomy.FindingAllowedPortsUnion, "port %d is outside 1..65535", p)
		}
		in.AllowedPorts = append(in.AllowedPorts, &types.PortSpecificationMemberPort{Value: int32(p)})
	}
	if req.Minutes < 1 || req.Minutes > taxonomy.MaxAuthTokenMinutes {
		return nil, refuse(taxonomy.FindingEndpointAuth, "token expiry of %d minutes is not in 1..%d", req.Minutes, taxonomy.MaxAuthTokenMinutes)
	}
	in.ExpirationInMinutes = aws.Int32(int32(req.Minutes))
	return in, nil
}

// proxyToken checks the minted header map carries X-aws-proxy-auth (the
// reply is a header map, finding auth-token-header-map) and drops any
// X-aws-proxy-port in it.
func proxyToken(minted map[string]string) (client.ProxyToken, error) {
	if minted[taxonomy.ProxyAuthHeader] == "" {
		keys := slices.Sorted(maps.Keys(minted))
		return client.ProxyToken{}, client.Errorf(taxonomy.KindPlatform, taxonomy.FindingAuthTokenHeaderMap,
			"CreateMicrovmAuthToken returned no %s header (keys: %v); the reply is a header map and this client reads that entry", taxonomy.ProxyAuthHeader, keys)
	}
	h := maps.Clone(minted)
	delete(h, taxonomy.ProxyPortHeader)
	return client.NewProxyToken(h), nil
}
