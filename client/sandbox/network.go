package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/netpolicy"
)

// A sandbox's network policy and its secrets (issue 48). Lambda MicroVMs
// offers an egress connector or none (finding egress-connector-or-none):
// nothing on the platform can hold a guest to an allowlist or keep a
// credential out of it, and the VM itself is the only place left to enforce,
// where guest root could lift it. So a policy is enforced only by an
// emulator on this machine, outside the guest (internal/netpolicy), and on
// AWS every call here is refused before anything is sent.
//
// The policy reaches a launch through the emulator's own route
// (taxonomy.EmulatorLaunchNetworkPath), registered under a random launch id
// before RunMicrovm is sent, which names the id in a header only the
// emulator reads (taxonomy.EmulatorLaunchNetworkHeader): the emulator starts
// the guest under the policy from its first instruction, and refuses a
// RunMicrovm naming an id it does not hold, so no guest runs without the
// policy it was asked for. The AWS wire has no field for a policy (the
// emulator checks that wire against the service's model), and the SDK mints
// RunMicrovm's clientToken itself, shown to no caller, so that token cannot
// be the key.

// Network is a launch's network policy and the credentials bound to hosts.
type Network struct {
	// Policy is in force from the guest's first instruction: a connection
	// passes only when a rule allows it; an empty Allow denies everything.
	Policy cliapi.NetworkPolicy
	// Secrets are credentials bound to hosts: the guest holds a
	// placeholder, and HTTPS requests to a bound host get the value in
	// their headers on the way out, outside the guest.
	Secrets []Secret
}

// Secret is a credential bound to hosts. Its value is unexported, and every
// printed or marshalled form is redacted, so a Secret logged or wrapped by
// mistake shows no value.
type Secret struct {
	Name  string   // the environment variable the guest finds the placeholder in
	Hosts []string // exact names or *.suffix
	value string
}

// NewSecret binds value to hosts under name.
func NewSecret(name, value string, hosts ...string) Secret {
	return Secret{Name: name, Hosts: hosts, value: value}
}

func (s Secret) String() string {
	return fmt.Sprintf("%s=<redacted>@%s", s.Name, strings.Join(s.Hosts, ","))
}
func (s Secret) GoString() string { return "sandbox.Secret{" + s.String() + "}" }

// MarshalJSON never carries the value.
func (s Secret) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name  string   `json:"name"`
		Hosts []string `json:"hosts"`
	}{s.Name, s.Hosts})
}

// ParseNetworkRule reads one allow rule as a flag spells it:
// HOST[:PORTS] | *.SUFFIX[:PORTS] | CIDR[:PORTS], PORTS a comma-separated
// list (none: 443 and 80). A bad rule is InvalidArg.
func ParseNetworkRule(spec string) (cliapi.NetworkRule, error) {
	r, err := netpolicy.ParseRule(spec)
	if err != nil {
		return r, client.Errorf(taxonomy.KindInvalidArg, "", "network rule: %v", err)
	}
	return r, nil
}

// ParseNetworkRules reads each spec as ParseNetworkRule does; no specs is
// an empty list (a policy allowing nothing), never nil.
func ParseNetworkRules(specs []string) ([]cliapi.NetworkRule, error) {
	rules := []cliapi.NetworkRule{}
	for _, spec := range specs {
		r, err := ParseNetworkRule(spec)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// ParseSecret reads NAME=VALUE@HOST[,HOST...] (the last @ ends the value,
// which may hold one). A refusal never quotes the value.
func ParseSecret(spec string) (Secret, error) {
	if _, err := netpolicy.ParseSecret(spec); err != nil {
		return Secret{}, client.Errorf(taxonomy.KindInvalidArg, "", "secret: %v", err)
	}
	name, rest, _ := strings.Cut(spec, "=")
	at := strings.LastIndexByte(rest, '@')
	return NewSecret(name, rest[:at], strings.Split(rest[at+1:], ",")...), nil
}

// ParseSecretEnv reads NAME@HOST[,HOST...], the value taken from the
// caller's environment variable NAME (getenv; nil is os.Getenv). An unset
// or empty variable is InvalidArg.
func ParseSecretEnv(spec string, getenv func(string) string) (Secret, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	name, hosts, ok := strings.Cut(spec, "@")
	if !ok {
		return Secret{}, client.Errorf(taxonomy.KindInvalidArg, "", "secret from the environment: want NAME@HOST[,HOST...], got %q", spec)
	}
	v := getenv(name)
	if v == "" {
		return Secret{}, client.Errorf(taxonomy.KindInvalidArg, "", "secret from the environment: %s is not set", name)
	}
	return ParseSecret(name + "=" + v + "@" + hosts)
}

// ParseSecretFile reads NAME=PATH@HOST[,HOST...], the value the file's
// contents with one trailing newline dropped.
func ParseSecretFile(spec string) (Secret, error) {
	name, rest, ok := strings.Cut(spec, "=")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 {
		return Secret{}, client.Errorf(taxonomy.KindInvalidArg, "", "secret from a file: want NAME=PATH@HOST[,HOST...], got %q", spec)
	}
	f, err := os.Open(rest[:at])
	if err != nil {
		return Secret{}, client.Errorf(taxonomy.KindInvalidArg, "", "secret from a file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
	if err != nil {
		return Secret{}, client.Errorf(taxonomy.KindInvalidArg, "", "secret from a file: %w", err)
	}
	if len(b) > 64<<10 {
		return Secret{}, client.Errorf(taxonomy.KindInvalidArg, "", "secret from a file: %s is over 64 KiB", rest[:at])
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return Secret{}, client.Errorf(taxonomy.KindInvalidArg, "", "secret from a file: %s is empty", rest[:at])
	}
	return ParseSecret(name + "=" + v + "@" + rest[at+1:])
}

// CheckNetwork refuses a network policy the control plane c cannot enforce:
// any control plane but an emulator on this machine (finding
// egress-connector-or-none). Nothing is sent.
func CheckNetwork(c *lambdamicrovms.Client) error {
	_, err := emulatorBase(c)
	return err
}

// CheckNetworkEndpoint is CheckNetwork for a control plane known only by
// its configured URL ("" is AWS's own), for a caller that refuses before it
// opens anything.
func CheckNetworkEndpoint(endpoint string) error {
	if endpoint == "" || !cplane.IsLoopbackURL(endpoint) {
		return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingEgressConnectorOrNone,
			"a network policy or secret is enforced only by a local emulator (--local): on Lambda MicroVMs egress is one internet connector or none, and inside the VM guest root could lift any policy")
	}
	return nil
}

func emulatorBase(c *lambdamicrovms.Client) (string, error) {
	base := ""
	if c != nil {
		base = aws.ToString(c.Options().BaseEndpoint)
	}
	if err := CheckNetworkEndpoint(base); err != nil {
		return "", err
	}
	return strings.TrimSuffix(base, "/"), nil
}

// networkCall sends one request to the emulator's network routes and
// decodes a 2xx answer into out (nil for none).
func networkCall(ctx context.Context, c *lambdamicrovms.Client, method, path string, body, out any) error {
	base, err := emulatorBase(c)
	if err != nil {
		return err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return client.Errorf(taxonomy.KindUnexpected, "", "encoding the network request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return client.Errorf(taxonomy.KindUnexpected, "", "network request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	var hc interface {
		Do(*http.Request) (*http.Response, error)
	} = http.DefaultClient
	if h := c.Options().HTTPClient; h != nil {
		hc = h
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return client.Errorf(taxonomy.KindTimeout, "", "network request: %w", ctx.Err())
		}
		return client.Errorf(taxonomy.KindRetryable, "", "network request to the emulator: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, taxonomy.MaxNetworkRequestBytes+1))
	if err != nil {
		return client.Errorf(taxonomy.KindRetryable, "", "reading the emulator's network answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(raw, &e)
		kind := taxonomy.KindPlatform
		switch resp.StatusCode {
		case http.StatusBadRequest:
			kind = taxonomy.KindInvalidArg
		case http.StatusNotFound, http.StatusConflict:
			kind = taxonomy.KindPrecondition
		}
		msg := e.Message
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return client.Errorf(kind, "", "emulator network route: %s (HTTP %d)", msg, resp.StatusCode)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return client.Errorf(taxonomy.KindPlatform, "", "decoding the emulator's network answer: %w", err)
		}
	}
	return nil
}

// registerLaunchNetwork hands the launch's policy and secrets to the
// emulator under a fresh launch id and answers the RunMicrovm option that
// names it.
func registerLaunchNetwork(ctx context.Context, c *lambdamicrovms.Client, n *Network) (func(*lambdamicrovms.Options), error) {
	if len(n.Secrets) > taxonomy.MaxNetworkSecrets {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "a sandbox holds at most %d secrets (MAX_NETWORK_SECRETS), not %d", taxonomy.MaxNetworkSecrets, len(n.Secrets))
	}
	if len(n.Policy.Allow) > taxonomy.MaxNetworkRules {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "a network policy holds at most %d rules (MAX_NETWORK_RULES), not %d", taxonomy.MaxNetworkRules, len(n.Policy.Allow))
	}
	if _, err := emulatorBase(c); err != nil {
		return nil, err
	}
	id, err := newAgentToken()
	if err != nil {
		return nil, client.Errorf(taxonomy.KindUnexpected, "", "minting a launch id: %w", err)
	}
	body := cliapi.NetworkLaunch{Policy: n.Policy, Secrets: []cliapi.SecretValue{}}
	if body.Policy.Allow == nil {
		body.Policy.Allow = []cliapi.NetworkRule{}
	}
	for _, s := range n.Secrets {
		body.Secrets = append(body.Secrets, cliapi.SecretValue{Name: s.Name, Value: s.value, Hosts: s.Hosts})
	}
	path := strings.Replace(taxonomy.EmulatorLaunchNetworkPath, "{launchId}", id, 1)
	if err := networkCall(ctx, c, http.MethodPut, path, body, nil); err != nil {
		return nil, err
	}
	return func(o *lambdamicrovms.Options) {
		o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue(taxonomy.EmulatorLaunchNetworkHeader, id))
	}, nil
}

func networkPath(id string) string {
	return strings.Replace(taxonomy.EmulatorNetworkPath, "{microvmId}", url.PathEscape(id), 1)
}

// Network is what is in force for the MicroVM: its policy, its secrets'
// bindings (never their values), the refusals. On AWS it is refused before
// any call (finding egress-connector-or-none).
func (h *Handle) Network(ctx context.Context) (cliapi.NetworkState, error) {
	var st cliapi.NetworkState
	err := networkCall(ctx, h.cp, http.MethodGet, networkPath(h.id), nil, &st)
	return st, err
}

// SetNetworkPolicy replaces the MicroVM's policy: new connections are
// checked against p at once, and open ones p does not allow are closed
// before the call returns. A MicroVM launched without a policy cannot be
// given one (its network was fixed at launch); on AWS it is refused before
// any call (finding egress-connector-or-none).
func (h *Handle) SetNetworkPolicy(ctx context.Context, p cliapi.NetworkPolicy) error {
	if p.Allow == nil {
		p.Allow = []cliapi.NetworkRule{}
	}
	if len(p.Allow) > taxonomy.MaxNetworkRules {
		return client.Errorf(taxonomy.KindInvalidArg, "", "a network policy holds at most %d rules (MAX_NETWORK_RULES), not %d", taxonomy.MaxNetworkRules, len(p.Allow))
	}
	return networkCall(ctx, h.cp, http.MethodPut, networkPath(h.id), p, nil)
}

// Network is what is in force for the sandbox (Handle.Network).
func (s *Sandbox) Network(ctx context.Context) (cliapi.NetworkState, error) {
	return Open(s.cp, s.id).Network(ctx)
}

// SetNetworkPolicy replaces the sandbox's policy (Handle.SetNetworkPolicy).
func (s *Sandbox) SetNetworkPolicy(ctx context.Context, p cliapi.NetworkPolicy) error {
	return Open(s.cp, s.id).SetNetworkPolicy(ctx, p)
}
