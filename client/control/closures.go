package control

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/microvms/microvms/client"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// refuse is a local refusal: InvalidArg, naming the finding that measured
// why the platform would answer the request badly.
func refuse(finding taxonomy.FindingID, format string, args ...any) *client.Error {
	return client.Errorf(taxonomy.KindInvalidArg, finding, format, args...)
}

// ---- clientToken ----------------------------------------------------------

// clientToken mints an idempotency token for one build or launch attempt.
// It is never derived from the caller's inputs alone and the caller cannot
// supply one: the service remembers a token forever, so a token that
// recurs after its image is deleted replays the old create as a no-op and
// wedges the new image in CREATING for hours. The random part makes each
// attempt's token new; the transport's retries reuse it, which is what the
// token is for.
func clientToken(rnd io.Reader, kind string) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(rnd, b[:]); err != nil {
		return "", client.Errorf(taxonomy.KindUnexpected, taxonomy.FindingClientTokenPermanent, "minting a %s clientToken: %w", kind, err)
	}
	tok := "microvms-" + kind + "-" + hex.EncodeToString(b[:])
	if len(tok) > taxonomy.MaxClientTokenLen {
		return "", client.Errorf(taxonomy.KindUnexpected, "", "clientToken of %d bytes exceeds %d", len(tok), taxonomy.MaxClientTokenLen)
	}
	return tok, nil
}

var defaultRandom io.Reader = rand.Reader

// ---- runHookPayload -------------------------------------------------------

// RunHookPayload is the string RunMicrovm delivers to the guest's run hook:
// agentd's bootstrap token and the launch environment, serialized once. The
// only way to make one is NewRunHookPayload, which enforces the ceiling.
type RunHookPayload struct{ s string }

// NewRunHookPayload serializes the agent token and launch env and refuses the
// result when it exceeds the platform's ceiling, counted in UTF-8 bytes over
// the whole string (the env included), 4096 inclusive. The refusal names the
// byte count, the ceiling and how much of it the env takes, because the env
// is the part a caller can shrink.
func NewRunHookPayload(agentToken string, env map[string]string) (RunHookPayload, error) {
	if agentToken == "" {
		return RunHookPayload{}, refuse(taxonomy.FindingRunHookPayloadWrapped, "runHookPayload needs an agent token; agentd refuses a bootstrap without one")
	}
	full, err := json.Marshal(protocol.RunHookPayload{AgentToken: agentToken, Env: env})
	if err != nil {
		return RunHookPayload{}, client.Errorf(taxonomy.KindUnexpected, "", "serializing runHookPayload: %w", err)
	}
	if len(full) > taxonomy.MaxRunHookPayloadBytes {
		bare, _ := json.Marshal(protocol.RunHookPayload{AgentToken: agentToken})
		envShare := len(full) - len(bare)
		return RunHookPayload{}, refuse(taxonomy.FindingRunHookPayloadCeiling,
			"runHookPayload is %d bytes, over the %d-byte ceiling (inclusive, UTF-8, the whole serialized string); the launch env accounts for %d of them across %d variables, so trim %d bytes from it (the model's prose says %d, but the service refuses above %d)",
			len(full), taxonomy.MaxRunHookPayloadBytes, envShare, len(env), len(full)-taxonomy.MaxRunHookPayloadBytes,
			taxonomy.DocumentedRunHookPayloadBytes, taxonomy.MaxRunHookPayloadBytes)
	}
	return RunHookPayload{s: string(full)}, nil
}

// Payload is the serialized string RunMicrovmInput.RunHookPayload carries.
// It holds the agent token: send it, never log or persist it.
func (p RunHookPayload) Payload() string { return p.s }

// Len is the payload's size in bytes.
func (p RunHookPayload) Len() int { return len(p.s) }

// IsZero reports whether p was never built.
func (p RunHookPayload) IsZero() bool { return p.s == "" }

// String redacts the token; the payload is a secret.
func (p RunHookPayload) String() string { return fmt.Sprintf("RunHookPayload(%d bytes)", len(p.s)) }

// GoString redacts the token under %#v too.
func (p RunHookPayload) GoString() string { return p.String() }

// LogValue redacts the token in structured logs.
func (p RunHookPayload) LogValue() slog.Value { return slog.StringValue(p.String()) }

// ---- network connectors ---------------------------------------------------

// Connectors are the network intents of a launch. They are rendered as the
// full connector ARNs for the request's region, never bare names: the service
// refuses "ALL_INGRESS" and wants the ARN. There is deliberately no shell
// intent: this client never requests SHELL_INGRESS.
type Connectors struct {
	// Ingress lets the endpoint reach the guest; without it nothing can.
	Ingress bool
	// InternetEgress lets the guest reach the internet; omitted, the VM has
	// no outbound network.
	InternetEgress bool
}

func connectorARN(region client.Region, name string) string {
	part := partitionOf(region.String()).name
	return fmt.Sprintf("arn:%s:lambda:%s:aws:network-connector:aws-network-connector:%s", part, region, name)
}

func (c Connectors) ingress(region client.Region) *[]string {
	if !c.Ingress {
		return nil
	}
	return &[]string{connectorARN(region, "ALL_INGRESS")}
}

func egress(region client.Region, internet bool) *[]string {
	if !internet {
		return nil
	}
	return &[]string{connectorARN(region, "INTERNET_EGRESS")}
}

// ---- image references ------------------------------------------------------

var imageNameRE = regexp.MustCompile(`^[a-zA-Z0-9-_]+$`)

// colonImageARN is the only image ARN spelling the service accepts.
var colonImageARN = regexp.MustCompile(`^arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:(\d{12}|aws):microvm-image:[a-zA-Z0-9-_]+$`)

// ImageRef names an image: by name, or by its ARN in the colon form.
type ImageRef struct{ id string }

// ParseImageRef accepts an image name or a colon-form image ARN. The slash
// form (…:microvm-image/<name>) is refused: the service answers it with an
// AccessDeniedException about a resource that exists and is permitted, which
// sends a reader to widen an IAM policy that was never too narrow.
func ParseImageRef(s string) (ImageRef, error) {
	switch {
	case strings.Contains(s, ":microvm-image/"):
		fixed := strings.Replace(s, ":microvm-image/", ":microvm-image:", 1)
		return ImageRef{}, refuse(taxonomy.FindingImageARNColon,
			"image ARN %q uses a slash before the name; the service answers that form with a misleading AccessDeniedException. Use %q", s, fixed)
	case strings.HasPrefix(s, "arn:"):
		if !colonImageARN.MatchString(s) {
			return ImageRef{}, refuse(taxonomy.FindingImageARNColon, "%q is not an image ARN of the form arn:aws:lambda:<region>:<account>:microvm-image:<name>", s)
		}
	case s == "" || len(s) > taxonomy.MaxImageNameLen || !imageNameRE.MatchString(s):
		return ImageRef{}, refuse(taxonomy.FindingImageARNColon, "%q is neither an image name (1..%d of [a-zA-Z0-9-_]) nor a colon-form image ARN", s, taxonomy.MaxImageNameLen)
	}
	return ImageRef{id: s}, nil
}

// String is the identifier sent on the wire.
func (r ImageRef) String() string { return r.id }

// IsARN reports whether r is an ARN rather than a bare name.
func (r ImageRef) IsARN() bool { return strings.HasPrefix(r.id, "arn:") }

func (r ImageRef) check() error {
	if r.id == "" {
		return refuse(taxonomy.FindingImageARNColon, "no image named; build an ImageRef with ParseImageRef")
	}
	return nil
}

// ---- image versions --------------------------------------------------------

// CheckImageVersion validates an image version string: non-empty, at most
// 2048 bytes, no whitespace. Versions are otherwise free text ("1.0" on a
// custom image, "1" on the managed base), so nothing more is assumed.
func CheckImageVersion(v string) error {
	if v == "" {
		return refuse(taxonomy.FindingImageVersionForm, "image version is empty")
	}
	if len(v) > taxonomy.MaxImageVersionLen {
		return refuse(taxonomy.FindingImageVersionForm, "image version is %d bytes, over the %d-byte limit", len(v), taxonomy.MaxImageVersionLen)
	}
	if i := strings.IndexFunc(v, unicode.IsSpace); i >= 0 {
		return refuse(taxonomy.FindingImageVersionForm, "image version %q contains whitespace at byte %d", v, i)
	}
	return nil
}

// SameBaseVersion reports whether a baseImageVersion read back from an image
// version names the one requested. The service normalises a pin of "1" to
// "1.0" on the way back, so string equality would call every pinned build
// drifted.
func SameBaseVersion(requested, readBack string) bool {
	norm := func(s string) string {
		for strings.HasSuffix(s, ".0") {
			s = strings.TrimSuffix(s, ".0")
		}
		return s
	}
	return requested == readBack || norm(requested) == norm(readBack)
}

// ---- launch duration -------------------------------------------------------

func checkMaxDuration(d time.Duration) (*int, error) {
	if d == 0 {
		return nil, nil
	}
	sec := d / time.Second
	if d%time.Second != 0 || sec < taxonomy.MinDurationSec || sec > taxonomy.MaxDurationSec {
		return nil, refuse(taxonomy.FindingMaxDuration, "maximum duration %s is not a whole number of seconds in %d..%d (8 hours)", d, taxonomy.MinDurationSec, taxonomy.MaxDurationSec)
	}
	n := int(sec)
	return &n, nil
}

// ---- endpoint auth tokens ---------------------------------------------------

// PortScope is one entry of a token's allowedPorts: a single port, an
// inclusive range, or every port. On the wire it is the union's member name
// as the only key, never a discriminator field.
type PortScope struct{ spec cp.PortSpecification }

// Port scopes a token to one port.
func Port(n int) PortScope { return PortScope{cp.PortSpecification{Port: &n}} }

// PortRange scopes a token to start..end inclusive.
func PortRange(start, end int) PortScope {
	return PortScope{cp.PortSpecification{Range: &cp.PortRange{StartPort: start, EndPort: end}}}
}

// AllPorts scopes a token to every port. A leak of such a token reaches
// every listener, so it is never a default.
func AllPorts() PortScope { return PortScope{cp.PortSpecification{AllPorts: &cp.Unit{}}} }

func (p PortScope) covers(port int) bool {
	switch s := p.spec; {
	case s.AllPorts != nil:
		return true
	case s.Port != nil:
		return *s.Port == port
	case s.Range != nil:
		return s.Range.StartPort <= port && port <= s.Range.EndPort
	}
	return false
}

func (p PortScope) check() error {
	s := p.spec
	n := 0
	for _, set := range []bool{s.Port != nil, s.Range != nil, s.AllPorts != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return refuse(taxonomy.FindingAllowedPortsUnion, "a port scope must be exactly one of Port, PortRange or AllPorts")
	}
	valid := func(p int) bool { return p >= 1 && p <= 65535 }
	if s.Port != nil && !valid(*s.Port) {
		return refuse(taxonomy.FindingAllowedPortsUnion, "port %d is outside 1..65535", *s.Port)
	}
	if r := s.Range; r != nil && (!valid(r.StartPort) || !valid(r.EndPort) || r.StartPort > r.EndPort) {
		return refuse(taxonomy.FindingAllowedPortsUnion, "port range %d..%d is not an ordered range within 1..65535", r.StartPort, r.EndPort)
	}
	return nil
}

// TokenRequest is what a proxy token is minted for.
type TokenRequest struct {
	// Ports the token may reach; at least one. The proxy enforces the scope.
	Ports []PortScope
	// Expiry is at most 60 minutes, in whole minutes.
	Expiry time.Duration
}

func (r TokenRequest) wire() (cp.CreateMicrovmAuthTokenRequest, error) {
	var out cp.CreateMicrovmAuthTokenRequest
	if len(r.Ports) == 0 {
		return out, refuse(taxonomy.FindingAllowedPortsUnion, "a proxy token needs at least one port scope")
	}
	for _, p := range r.Ports {
		if err := p.check(); err != nil {
			return out, err
		}
		out.AllowedPorts = append(out.AllowedPorts, p.spec)
	}
	min := r.Expiry / time.Minute
	if r.Expiry%time.Minute != 0 || min < 1 || min > taxonomy.MaxAuthTokenMinutes {
		return out, refuse(taxonomy.FindingEndpointAuth, "token expiry %s is not a whole number of minutes in 1..%d", r.Expiry, taxonomy.MaxAuthTokenMinutes)
	}
	out.ExpirationInMinutes = int(min)
	return out, nil
}

// AuthToken is a minted proxy token: the header map the service returned,
// and the scope it was minted for.
type AuthToken struct {
	headers map[string]string
	scope   []PortScope
	// Expires is when the token stops working, by the client's clock.
	Expires time.Time
}

func newAuthToken(headers map[string]string, req TokenRequest, now time.Time) (AuthToken, error) {
	if headers[taxonomy.ProxyAuthHeader] == "" {
		keys := make([]string, 0, len(headers))
		for k := range headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return AuthToken{}, client.Errorf(taxonomy.KindPlatform, taxonomy.FindingAuthTokenHeaderMap,
			"CreateMicrovmAuthToken returned no %s header (keys: %v); the reply is a header map and this client reads that entry", taxonomy.ProxyAuthHeader, keys)
	}
	return AuthToken{headers: headers, scope: slices.Clone(req.Ports), Expires: now.Add(req.Expiry)}, nil
}

// Headers are the request headers for one call through the endpoint to port:
// every entry of the minted header map plus X-aws-proxy-port. A port outside
// the token's scope is refused here rather than answered 403 by the proxy.
func (t AuthToken) Headers(port int) (map[string]string, error) {
	if !slices.ContainsFunc(t.scope, func(p PortScope) bool { return p.covers(port) }) {
		return nil, refuse(taxonomy.FindingAllowedPortsUnion, "port %d is outside this token's scope; the proxy would answer 403 Access to port denied", port)
	}
	out := make(map[string]string, len(t.headers)+1)
	for k, v := range t.headers {
		out[k] = v
	}
	out[taxonomy.ProxyPortHeader] = fmt.Sprint(port)
	return out, nil
}

// String redacts the token.
func (t AuthToken) String() string {
	return fmt.Sprintf("AuthToken(%d headers, expires %s)", len(t.headers), t.Expires.Format(time.RFC3339))
}
