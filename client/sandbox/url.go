package sandbox

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// PortURL is how to reach one port inside a MicroVM from outside: the VM's
// endpoint and the headers its proxy wants. The platform routes by header,
// not by URL (finding auth-token-header-map): every port of a VM shares one
// endpoint URL, and X-aws-proxy-port says which one a request is for, so the
// URL alone opens nothing. A browser, which cannot add headers, needs
// `microvm forward` (Forwarder) in between.
type PortURL struct {
	MicrovmID string
	Port      int
	// URL is the endpoint as a URL: https://<endpoint>/, or http:// for a
	// loopback endpoint (the emulator's).
	URL string
	// Headers are the token's header map as CreateMicrovmAuthToken returned
	// it (X-aws-proxy-auth) plus X-aws-proxy-port naming Port. They are
	// credentials: String never prints them.
	Headers http.Header
	// Subprotocols are the same credentials in the form a browser's
	// WebSocket can send, which sets no header: offer all three to
	// new WebSocket(wsURL, subprotocols) (finding websocket-subprotocols).
	// They hold the token too.
	Subprotocols []string
	// ExpiresAt is this process's clock when the mint was sent plus the
	// lifetime asked for. The platform's reply carries no expiry, and its
	// clock starts when it mints, after the request left, so the token
	// lives at least this long (assumed: the platform's lifetime is the
	// expirationInMinutes it was given, finding endpoint-auth).
	ExpiresAt time.Time
	// Lifetime is the expirationInMinutes the token was minted with.
	Lifetime time.Duration
}

// String names the target and the header keys, never their values.
func (u PortURL) String() string {
	keys := slices.Sorted(maps.Keys(u.Headers))
	return fmt.Sprintf("PortURL{%s port %d %s headers %v and subprotocols: REDACTED, expires %s}", u.MicrovmID, u.Port, u.URL, keys, u.ExpiresAt.UTC().Format(time.RFC3339))
}

// GoString is String, so %#v cannot print the token either.
func (u PortURL) GoString() string { return u.String() }

// URLOptions shape one PortURL.
type URLOptions struct {
	// Expires is the token's lifetime: whole minutes from 1 to
	// taxonomy.MaxAuthTokenMinutes, as the model's expirationInMinutes
	// takes them (finding endpoint-auth). Zero is the ceiling.
	Expires time.Duration
	// Now is the clock ExpiresAt is read from (default time.Now).
	Now func() time.Time
}

// tokenMinutes checks a lifetime against the model's expirationInMinutes:
// whole minutes, 1..MaxAuthTokenMinutes; zero is the ceiling.
func tokenMinutes(d time.Duration) (int, error) {
	if d == 0 {
		return taxonomy.MaxAuthTokenMinutes, nil
	}
	ceiling := time.Duration(taxonomy.MaxAuthTokenMinutes) * time.Minute
	if d < time.Minute || d > ceiling || d%time.Minute != 0 {
		return 0, refuse(taxonomy.FindingEndpointAuth,
			"a proxy token lives whole minutes from 1m to %s (CreateMicrovmAuthToken's expirationInMinutes), not %s", ceiling, d)
	}
	return int(d / time.Minute), nil
}

// checkPort refuses a port the model's PortNumber does not admit.
func checkPort(port int) error {
	if port < 1 || port > 65535 {
		return refuse(taxonomy.FindingAllowedPortsUnion, "port %d is outside 1..65535, the ports a proxy token can name", port)
	}
	return nil
}

// MintURL is PortURL for port of the MicroVM id, for a caller holding no
// Sandbox (the CLI, by id): one GetMicrovm, which must say RUNNING and give
// the endpoint, then one CreateMicrovmAuthToken whose allowedPorts is
// exactly [{"port": port}], never a range or allPorts, so the token opens
// that port and nothing else, the daemon's included (finding
// allowed-ports-union). A bad port or lifetime is refused before any call.
func MintURL(ctx context.Context, c *lambdamicrovms.Client, id string, port int, o URLOptions) (PortURL, error) {
	if err := checkPort(port); err != nil {
		return PortURL{}, err
	}
	minutes, err := tokenMinutes(o.Expires)
	if err != nil {
		return PortURL{}, err
	}
	if id == "" {
		return PortURL{}, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingEndpointAuth, "a port URL needs the MicroVM id its proxy token is minted for")
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	g, err := c.GetMicrovm(ctx, &lambdamicrovms.GetMicrovmInput{MicrovmIdentifier: aws.String(id)})
	if err != nil {
		return PortURL{}, cplane.SDKError("GetMicrovm", err)
	}
	if err := takesTraffic(id, g); err != nil {
		return PortURL{}, err
	}
	sent := now()
	out, err := c.CreateMicrovmAuthToken(ctx, &lambdamicrovms.CreateMicrovmAuthTokenInput{
		MicrovmIdentifier:   aws.String(id),
		AllowedPorts:        []types.PortSpecification{&types.PortSpecificationMemberPort{Value: int32(port)}},
		ExpirationInMinutes: aws.Int32(int32(minutes)),
	})
	if err != nil {
		return PortURL{}, cplane.SDKError("CreateMicrovmAuthToken", err)
	}
	if out.AuthToken[taxonomy.ProxyAuthHeader] == "" {
		return PortURL{}, client.Errorf(taxonomy.KindPlatform, taxonomy.FindingAuthTokenHeaderMap,
			"CreateMicrovmAuthToken returned no %s header (keys: %v); the reply is a header map and this client reads that entry",
			taxonomy.ProxyAuthHeader, slices.Sorted(maps.Keys(out.AuthToken)))
	}
	h := http.Header{}
	for k, v := range out.AuthToken {
		h.Set(k, v)
	}
	// Ours, not the mint's: the port this URL is for.
	h.Set(taxonomy.ProxyPortHeader, strconv.Itoa(port))
	base := cplane.EndpointURL(aws.ToString(g.Endpoint))
	if base[len(base)-1] != '/' {
		base += "/"
	}
	life := time.Duration(minutes) * time.Minute
	subprotocols := []string{taxonomy.WebSocketSubprotocol,
		taxonomy.WebSocketAuthPrefix + h.Get(taxonomy.ProxyAuthHeader),
		taxonomy.WebSocketPortPrefix + strconv.Itoa(port)}
	return PortURL{MicrovmID: id, Port: port, URL: base, Headers: h, Subprotocols: subprotocols, ExpiresAt: sent.Add(life), Lifetime: life}, nil
}

// takesTraffic refuses a MicroVM whose endpoint forwards nothing: only a
// RUNNING one with an endpoint does.
func takesTraffic(id string, g *lambdamicrovms.GetMicrovmOutput) error {
	switch g.State {
	case types.MicrovmStateRunning:
		if aws.ToString(g.Endpoint) == "" {
			return client.Errorf(taxonomy.KindPlatform, taxonomy.FindingEndpointBareHost, "MicroVM %s is RUNNING but GetMicrovm reported no endpoint", id)
		}
		return nil
	case types.MicrovmStateSuspended, types.MicrovmStateSuspending:
		return refuse(taxonomy.FindingSuspendIsFreeze, "MicroVM %s is %s and a suspended VM answers nothing; resume it before asking for a port URL", id, g.State)
	}
	reason := ""
	if r := aws.ToString(g.StateReason); r != "" {
		reason = " (" + r + ")"
	}
	return client.Errorf(taxonomy.KindInvalidArg, "", "MicroVM %s is %s%s; only a RUNNING MicroVM's ports can be reached", id, g.State, reason)
}

// URL is a PortURL for port inside this sandbox's MicroVM: a token minted
// for exactly that port (see MintURL), living o.Expires. The sandbox's own
// session token is not touched, and the daemon's port is not in the new
// token's scope.
func (s *Sandbox) URL(ctx context.Context, port int, o URLOptions) (PortURL, error) {
	if _, err := s.runningSession(); err != nil {
		return PortURL{}, err
	}
	if o.Now == nil {
		o.Now = s.now
	}
	return MintURL(ctx, s.api(), s.id, port, o)
}

// Check sends one GET for u.URL with u's headers through hc (nil is
// http.DefaultClient) and tells the endpoint's refusals apart, as the
// platform answers them (finding allowed-ports-union): a 403 "Access to port
// denied" is a token for other ports and any other 403 one the endpoint
// does not take (expired, or another MicroVM's), both ERR_CREDENTIALS; a 502
// is a port the token opens with nothing answering there, ERR_PRECONDITION.
// Any other status is the guest server's own answer, returned with no
// error: a 404 still proves the port is served.
func (u PortURL) Check(ctx context.Context, hc *http.Client) (int, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.URL, nil)
	if err != nil {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "checking %s: %v", u.URL, err)
	}
	req.Header = u.Headers.Clone()
	resp, err := hc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return 0, client.Errorf(taxonomy.KindInterrupted, "", "checking %s: %v", u.URL, ctxErr).WithCause(err)
		}
		return 0, client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingEndpointBareHost, "nothing answers at %s: %v", u.URL, err).WithCause(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	said := strings.TrimSpace(string(b))
	switch resp.StatusCode {
	case http.StatusForbidden:
		if strings.Contains(said, "Access to port denied") {
			return resp.StatusCode, client.Errorf(taxonomy.KindCredentials, taxonomy.FindingAllowedPortsUnion,
				"the endpoint refused the token for port %s (403 %q): it was minted for other ports; mint one for this port", u.Headers.Get(taxonomy.ProxyPortHeader), said)
		}
		return resp.StatusCode, client.Errorf(taxonomy.KindCredentials, taxonomy.FindingEndpointAuth,
			"the endpoint refused the token (403 %q): expired (it was good until about %s) or not minted for MicroVM %s; mint a fresh one",
			said, u.ExpiresAt.UTC().Format(time.RFC3339), u.MicrovmID)
	case http.StatusBadGateway:
		return resp.StatusCode, client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingAllowedPortsUnion,
			"the token opens port %d but nothing answers there (502 %q): start a server in the guest listening on it", u.Port, said)
	}
	return resp.StatusCode, nil
}
