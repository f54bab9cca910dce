package localvm

import (
	"maps"

	"github.com/microvms/microvms/internal/netpolicy"
	"github.com/microvms/microvms/localvm/guestinit"
)

// GuestCABundlePath is where a guest under a network policy finds its trust
// store whole: the image's system bundle (when it has one) followed by the
// sandbox's own CA, which terminates TLS to allowed names
// (internal/netpolicy). SSL_CERT_FILE, NODE_EXTRA_CA_CERTS and
// REQUESTS_CA_BUNDLE name it; the system bundles the image has get the CA
// appended too, for programs that read only those.
const GuestCABundlePath = guestinit.CABundlePath

// GuestTunName is the guest's one link besides the loopback under a policy.
const GuestTunName = guestinit.TunName

// NetworkEnv is what a guest's environment gets under the network n: each
// secret's name with its placeholder (never the value) and the variables
// that point TLS libraries at GuestCABundlePath. The launcher gives it to
// the daemon; the emulator adds it to the launch environment every command
// gets.
func NetworkEnv(n *netpolicy.Net) map[string]string {
	env := maps.Clone(n.GuestEnv())
	if env == nil {
		env = map[string]string{}
	}
	for _, k := range []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE"} {
		env[k] = GuestCABundlePath
	}
	return env
}
