package netpolicy

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Secret is a credential bound to hosts. Its value is unexported and every
// printed or marshalled form of a Secret is redacted, so a Secret logged by
// mistake, or an error wrapping one, shows no value.
type Secret struct {
	Name  string   // the env variable the guest finds the placeholder in
	Hosts []string // exact names or *.suffix
	value string
}

// NewSecret binds value to hosts under name.
func NewSecret(name, value string, hosts ...string) Secret {
	return Secret{Name: name, Hosts: append([]string(nil), hosts...), value: value}
}

func (s Secret) String() string {
	return fmt.Sprintf("secret %s@%s [value redacted]", s.Name, strings.Join(s.Hosts, ","))
}
func (s Secret) GoString() string { return s.String() }

// MarshalJSON never carries the value.
func (s Secret) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name  string   `json:"name"`
		Hosts []string `json:"hosts"`
	}{s.Name, s.Hosts})
}

// binding is a Secret with its placeholder.
type binding struct {
	Secret
	placeholder string
}

func newBindings(secrets []Secret) ([]binding, error) {
	if len(secrets) > taxonomy.MaxNetworkSecrets {
		return nil, &PolicyError{fmt.Sprintf("%d secrets, over MAX_NETWORK_SECRETS (%d)", len(secrets), taxonomy.MaxNetworkSecrets)}
	}
	out := make([]binding, 0, len(secrets))
	for _, s := range secrets {
		if s.Name == "" || len(s.Hosts) == 0 || s.value == "" {
			return nil, &PolicyError{fmt.Sprintf("secret %q: a binding needs a name, a value and at least one host", s.Name)}
		}
		for _, h := range s.Hosts {
			if !validName(strings.TrimPrefix(strings.ToLower(h), "*.")) {
				return nil, &PolicyError{fmt.Sprintf("secret %q: %q is not a host name", s.Name, h)}
			}
		}
		var b [24]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		// Opaque, and long enough that no header carries it by chance.
		out = append(out, binding{s, "mvp_" + hex.EncodeToString(b[:])})
	}
	return out, nil
}

func (b binding) shape() cliapi.SecretBinding {
	return cliapi.SecretBinding{Name: b.Name, Hosts: append([]string(nil), b.Hosts...), Placeholder: b.placeholder}
}
