package netpolicy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/internal/netpolicy/guestlink"
)

// The guest's side of the link. The runtime gives the guest's tun GuestAddr
// in guestNet, a default route through GatewayAddr, and GatewayAddr as its
// only name server.
var (
	guestNet     = netip.MustParsePrefix("10.0.2.0/24")
	GatewayAddr  = guestlink.GatewayAddr
	GuestAddr    = guestlink.GuestAddr
	GuestPrefix  = guestlink.GuestPrefix
	SyntheticNet = netip.MustParsePrefix("198.18.0.0/15") // RFC 2544's benchmarking range: routed nowhere real
)

// DefaultMTU is the tun's MTU unless Config says otherwise.
const DefaultMTU = 1500

// Resolver resolves names upstream; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config is what a guest's network is served under.
type Config struct {
	// Policy is the policy in force from the start.
	Policy cliapi.NetworkPolicy
	// Secrets are the credentials bound to hosts.
	Secrets []Secret
	// Resolver answers for allowed names; nil is net.DefaultResolver.
	Resolver Resolver
	// Dial opens an upstream connection to "name:port" or "address:port";
	// nil dials through Resolver, refusing loopback, link-local,
	// multicast and unspecified addresses (the host's own services and a
	// cloud's metadata endpoint are never a guest's to reach).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// RootCAs verifies upstream TLS; nil is the host's trust store.
	RootCAs *x509.CertPool
	// MTU of the guest's link; 0 is DefaultMTU.
	MTU uint32
	// Now is the clock of the denied list; nil is time.Now.
	Now func() time.Time
}

// Net is one guest's network: its policy, its CA, its secrets, its
// refusals. It is served by Serve (a tun) or ServeLink (any link endpoint).
type Net struct {
	cfg      Config
	policy   atomic.Pointer[compiled]
	resolver Resolver
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	ca       *authority
	bindings []binding
	synth    *synthetic
	denied   *deniedLog

	mu    sync.Mutex
	flows map[*flow]struct{}
}

// New validates cfg and makes the guest's CA. The policy is in force at once.
func New(cfg Config) (*Net, error) {
	pol, err := compile(cfg.Policy)
	if err != nil {
		return nil, err
	}
	bs, err := newBindings(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	ca, err := newAuthority()
	if err != nil {
		return nil, err
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := &Net{cfg: cfg, ca: ca, bindings: bs, synth: newSynthetic(),
		denied: &deniedLog{now: cfg.Now}, flows: map[*flow]struct{}{}}
	n.resolver = cfg.Resolver
	if n.resolver == nil {
		n.resolver = net.DefaultResolver
	}
	n.dial = cfg.Dial
	if n.dial == nil {
		n.dial = GuardedDialer(n.resolver)
	}
	n.policy.Store(pol)
	return n, nil
}

// CACertPEM is the sandbox CA's certificate, for the guest's trust store
// (its system bundle, SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
// REQUESTS_CA_BUNDLE). Its key never leaves this Net.
func (n *Net) CACertPEM() []byte { return n.ca.certPEM() }

// GuestEnv is what the guest's environment gets for the secrets: each
// binding's name with its placeholder, never the value.
func (n *Net) GuestEnv() map[string]string {
	m := make(map[string]string, len(n.bindings))
	for _, b := range n.bindings {
		m[b.Name] = b.placeholder
	}
	return m
}

// SetPolicy replaces the policy: new connections are checked against p at
// once, and every open connection p does not allow is closed and counted
// (why policy-changed) before SetPolicy returns.
func (n *Net) SetPolicy(p cliapi.NetworkPolicy) error {
	pol, err := compile(p)
	if err != nil {
		return err
	}
	n.policy.Store(pol)
	n.mu.Lock()
	var gone []*flow
	for f := range n.flows {
		if !f.allowedBy(pol) {
			gone = append(gone, f)
		}
	}
	n.mu.Unlock()
	for _, f := range gone {
		n.denied.add(f.label(), f.port, "tcp", whyChanged)
		f.close()
	}
	return nil
}

// State is the "network show" answer.
func (n *Net) State() cliapi.NetworkState {
	count, last := n.denied.snapshot()
	pol := n.policy.Load().source
	secrets := make([]cliapi.SecretBinding, 0, len(n.bindings))
	for _, b := range n.bindings {
		secrets = append(secrets, b.shape())
	}
	return cliapi.NetworkState{Enforced: true, Where: "emulator", Policy: &pol, Secrets: secrets,
		DeniedCount: count, Denied: last}
}

// forbiddenUpstream reports whether an upstream address is one a guest may
// never reach whatever the policy says.
func forbiddenUpstream(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsMulticast() ||
		a.IsUnspecified() || a.IsInterfaceLocalMulticast()
}

// GuardedDialer is the dial Config.Dial defaults to: names resolved
// through r (nil is net.DefaultResolver), and never a loopback,
// link-local, multicast or unspecified address. A runtime that pins some
// names itself dials the rest through it.
func GuardedDialer(r Resolver) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return guardedDial(ctx, r, network, addr)
	}
}

func guardedDial(ctx context.Context, r Resolver, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = r.LookupNetIP(ctx, "ip4", host); err != nil {
		return nil, err
	}
	var d net.Dialer
	var errs []error
	for _, a := range addrs {
		if forbiddenUpstream(a) {
			errs = append(errs, fmt.Errorf("%s is %s's address, and a guest never reaches a loopback, link-local or multicast address", a, host))
			continue
		}
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), 0).Addr().String()+":"+port)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%s has no IPv4 address", host)
	}
	return nil, errors.Join(errs...)
}

func (n *Net) open() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.flows)
}
