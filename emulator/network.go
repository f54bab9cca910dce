package emulator

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/netpolicy"
)

// A local guest's network policy (issue 48). The AWS wire has no field for
// one, and the emulator checks that wire against the service's model, so
// the policy travels on the emulator's own routes, namespaced under
// /_microvms/ (taxonomy.EmulatorLaunchNetworkPath,
// taxonomy.EmulatorNetworkPath), which no AWS operation's path can be:
//
//   - before a launch the caller registers the policy and the secrets'
//     values under a launch id it minted; RunMicrovm names the id in the
//     taxonomy.EmulatorLaunchNetworkHeader header. RunMicrovm refuses an id
//     it does not hold, and the guest is started with the policy already
//     made (GuestSpec.Network): it never runs a moment without it.
//   - GET answers what is in force (netpolicy.Net.State); PUT replaces the
//     policy of a running guest.
//
// These routes are served outside gate, so they are never in Requests():
// the secrets' values travel only in the registering request's body, and
// nothing the emulator answers, logs or records carries them.

// NetworkOptions are where a guest's allowed connections go. The zero value
// is the host's resolver, dialer and trust store.
type NetworkOptions struct {
	// Resolver answers DNS for allowed names; nil is net.DefaultResolver.
	Resolver netpolicy.Resolver
	// Dial opens an upstream connection to "name:port" or "address:port";
	// nil dials through Resolver, never loopback or link-local addresses.
	// Tests map names to loopback stand-ins here, so no packet leaves the
	// machine.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// RootCAs verifies upstream TLS; nil is the host's trust store.
	RootCAs *x509.CertPool
}

// maxPendingLaunchNetworks bounds the registrations no RunMicrovm has
// claimed yet.
const maxPendingLaunchNetworks = 256

const networkRoutePrefix = "/_microvms/"

// networkRoutes serves the emulator's network routes and hands everything
// else to next.
func (s *Server) networkRoutes(next http.Handler) http.Handler {
	launchPrefix, _, _ := strings.Cut(taxonomy.EmulatorLaunchNetworkPath, "{")
	vmPrefix, vmSuffix, _ := strings.Cut(taxonomy.EmulatorNetworkPath, "{microvmId}")
	imagesPrefix, _, _ := strings.Cut(taxonomy.EmulatorImageBuildPath, "{")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if !strings.HasPrefix(p, networkRoutePrefix) {
			next.ServeHTTP(w, r)
			return
		}
		switch {
		case strings.HasPrefix(p, imagesPrefix):
			s.getLocalBuild(w, r, strings.TrimPrefix(p, imagesPrefix))
		case strings.HasPrefix(p, launchPrefix) && r.Method == http.MethodPut:
			s.putLaunchNetwork(w, r, strings.TrimPrefix(p, launchPrefix))
		case strings.HasPrefix(p, vmPrefix) && strings.HasSuffix(p, vmSuffix) && len(p) > len(vmPrefix)+len(vmSuffix):
			id := strings.TrimSuffix(strings.TrimPrefix(p, vmPrefix), vmSuffix)
			switch r.Method {
			case http.MethodGet:
				s.getNetwork(w, id)
			case http.MethodPut:
				s.putNetwork(w, r, id)
			default:
				writeError(w, http.StatusMethodNotAllowed, "ValidationException", ptr("GET or PUT"))
			}
		default:
			writeError(w, http.StatusNotFound, "UnknownOperationException", ptr(fmt.Sprintf("no operation serves %s %s", r.Method, r.URL.EscapedPath())))
		}
	})
}

func readNetworkBody(w http.ResponseWriter, r *http.Request, v any) bool {
	raw, err := io.ReadAll(io.LimitReader(r.Body, taxonomy.MaxNetworkRequestBytes+1))
	if err != nil || len(raw) > taxonomy.MaxNetworkRequestBytes {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr(fmt.Sprintf("the body is unreadable or over %d bytes", taxonomy.MaxNetworkRequestBytes)))
		return false
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// Never the body: it may carry a secret's value.
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("the body is not the declared JSON shape"))
		return false
	}
	return true
}

func validLaunchID(id string) bool {
	if len(id) < 16 || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// newNet makes a guest's network from a registration: the policy checked,
// the secrets bound. The error never carries a value.
func (s *Server) newNet(l cliapi.NetworkLaunch) (*netpolicy.Net, error) {
	if len(l.Secrets) > taxonomy.MaxNetworkSecrets {
		return nil, fmt.Errorf("at most %d secrets (MAX_NETWORK_SECRETS)", taxonomy.MaxNetworkSecrets)
	}
	secrets := make([]netpolicy.Secret, 0, len(l.Secrets))
	for _, sv := range l.Secrets {
		// The name becomes a guest environment variable; the value a
		// header's bytes.
		if !envName(sv.Name) {
			return nil, fmt.Errorf("secret name %q is not an environment variable's name", sv.Name)
		}
		if sv.Value == "" || strings.ContainsAny(sv.Value, "\x00\r\n") {
			return nil, fmt.Errorf("secret %s: the value is empty or holds NUL, CR or LF", sv.Name)
		}
		secrets = append(secrets, netpolicy.NewSecret(sv.Name, sv.Value, sv.Hosts...))
	}
	o := s.opt.Network
	return netpolicy.New(netpolicy.Config{Policy: l.Policy, Secrets: secrets, Resolver: o.Resolver, Dial: o.Dial, RootCAs: o.RootCAs})
}

func (s *Server) putLaunchNetwork(w http.ResponseWriter, r *http.Request, id string) {
	if !validLaunchID(id) {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("a launch id is 16 to 128 letters, digits, '-' or '_'"))
		return
	}
	var l cliapi.NetworkLaunch
	if !readNetworkBody(w, r, &l) {
		return
	}
	// Checked now, so a bad policy is refused before the launch is sent.
	if _, err := s.newNet(l); err != nil {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("network policy: "+err.Error()))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.launchNets[id]; !ok && len(s.launchNets) >= maxPendingLaunchNetworks {
		writeError(w, http.StatusTooManyRequests, "ThrottlingException", ptr(fmt.Sprintf("%d launch networks wait for their RunMicrovm", maxPendingLaunchNetworks)))
		return
	}
	s.launchNets[id] = l
	w.WriteHeader(http.StatusNoContent)
}

// claimLaunchNetwork is RunMicrovm's half, called with s.mu held: the
// network the request's header names, made. ok is false when RunMicrovm
// must refuse (already answered).
func (s *Server) claimLaunchNetwork(w http.ResponseWriter, r *http.Request) (n *netpolicy.Net, id string, ok bool) {
	id = r.Header.Get(taxonomy.EmulatorLaunchNetworkHeader)
	if id == "" {
		return nil, "", true
	}
	l, found := s.launchNets[id]
	if !found {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("emulator: no network policy is registered under the launch id in "+taxonomy.EmulatorLaunchNetworkHeader))
		return nil, "", false
	}
	n, err := s.newNet(l)
	if err != nil {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("network policy: "+err.Error()))
		return nil, "", false
	}
	return n, id, true
}

func (s *Server) vmNet(w http.ResponseWriter, id string) (*netpolicy.Net, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm := s.vms[id]
	if vm == nil {
		notFound(w, "MicroVM", id)
		return nil, false
	}
	return vm.net, true
}

func (s *Server) getNetwork(w http.ResponseWriter, id string) {
	n, ok := s.vmNet(w, id)
	if !ok {
		return
	}
	if n == nil {
		writeJSON(w, http.StatusOK, cliapi.NetworkState{Where: "none", Secrets: []cliapi.SecretBinding{}, Denied: []cliapi.DeniedConnection{}})
		return
	}
	writeJSON(w, http.StatusOK, n.State())
}

func (s *Server) putNetwork(w http.ResponseWriter, r *http.Request, id string) {
	var p cliapi.NetworkPolicy
	if !readNetworkBody(w, r, &p) {
		return
	}
	n, ok := s.vmNet(w, id)
	if !ok {
		return
	}
	if n == nil {
		writeError(w, http.StatusConflict, "ConflictException", ptr("MicroVM "+id+" was launched without a network policy; its network was fixed at launch (launch it with one, even an empty one, to change it later)"))
		return
	}
	if err := n.SetPolicy(p); err != nil {
		var pe *netpolicy.PolicyError
		if errors.As(err, &pe) {
			writeError(w, http.StatusBadRequest, "ValidationException", ptr("network policy: "+err.Error()))
			return
		}
		writeError(w, http.StatusInternalServerError, "InternalServerException", ptr(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, n.State())
}

// withNetworkEnv adds env to the launch environment a run hook payload
// carries (its "env" object, which agentd gives every command), over the
// caller's entries of the same names: a secret's name must hold its
// placeholder, never a value the caller also put there. A payload that is
// not such an object is sent as it is; the daemon's own environment still
// has env (the launcher puts it there).
func withNetworkEnv(payload string, env map[string]string) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(payload), &obj) != nil || obj == nil {
		return payload
	}
	merged := map[string]string{}
	if raw, ok := obj["env"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &merged) != nil {
			return payload
		}
	}
	for k, v := range env {
		merged[k] = v
	}
	raw, err := json.Marshal(merged)
	if err != nil {
		return payload
	}
	obj["env"] = raw
	out, err := json.Marshal(obj)
	if err != nil {
		return payload
	}
	return string(out)
}

func envName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// NetworkResolveEnv names the environment variable that points allowed
// names at addresses of the caller's choosing, as curl's --resolve does:
// "NAME=HOST:PORT[,NAME=HOST:PORT...]". A guest's lookup of NAME is
// answered (with a synthetic address, as always) and each of its
// connections to NAME, whatever the port, is dialled to HOST:PORT; every
// other name goes to this host's resolver. For stand-in servers on this
// machine (tests, a model API's stand-in); a guest cannot set it.
const NetworkResolveEnv = "MICROVM_NETWORK_RESOLVE"

// NetworkUpstreamCAEnv names a PEM file of certificates upstream TLS is
// also verified against (beside this host's trust store): a stand-in
// server's own CA.
const NetworkUpstreamCAEnv = "MICROVM_NETWORK_UPSTREAM_CA"

// NetworkOptionsFromEnv reads NetworkResolveEnv and NetworkUpstreamCAEnv;
// with neither set it answers the zero NetworkOptions (this host's own).
func NetworkOptionsFromEnv(getenv func(string) string) (NetworkOptions, error) {
	var o NetworkOptions
	if spec := getenv(NetworkResolveEnv); spec != "" {
		to := map[string]string{}
		for _, item := range strings.Split(spec, ",") {
			name, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
			if _, _, err := net.SplitHostPort(addr); !ok || name == "" || err != nil {
				return o, fmt.Errorf("%s: %q is not NAME=HOST:PORT", NetworkResolveEnv, item)
			}
			to[strings.ToLower(name)] = addr
		}
		r := pinnedResolver{to: to}
		o.Resolver = r
		o.Dial = r.dial
	}
	if path := getenv(NetworkUpstreamCAEnv); path != "" {
		pem, err := os.ReadFile(path)
		if err != nil {
			return o, fmt.Errorf("%s: %w", NetworkUpstreamCAEnv, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return o, fmt.Errorf("%s: %s holds no PEM certificate", NetworkUpstreamCAEnv, path)
		}
		o.RootCAs = pool
	}
	return o, nil
}

// pinnedResolver answers the pinned names from its table and every other
// name from this host's resolver; its dial reaches a pinned name's address
// and dials the rest through netpolicy's guarded default.
type pinnedResolver struct{ to map[string]string }

func (p pinnedResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if addr, ok := p.to[strings.ToLower(host)]; ok {
		h, _, _ := net.SplitHostPort(addr)
		if a, err := netip.ParseAddr(h); err == nil {
			return []netip.Addr{a}, nil
		}
		return net.DefaultResolver.LookupNetIP(ctx, network, h)
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}

func (p pinnedResolver) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	if to, ok := p.to[strings.ToLower(host)]; ok {
		return d.DialContext(ctx, network, to)
	}
	return netpolicy.GuardedDialer(net.DefaultResolver)(ctx, network, addr)
}
