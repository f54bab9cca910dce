package netpolicy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// defaultPorts are the ports a rule allows when it names none.
var defaultPorts = []int64{443, 80}

// compiled is a validated policy, fast to match. A nil *compiled means no
// policy was set; Serve is never started without one, so nil denies.
type compiled struct {
	exact    map[string]map[uint16]bool
	suffixes []suffixRule
	cidrs    []cidrRule
	source   cliapi.NetworkPolicy
}

type suffixRule struct {
	suffix string // ".example.com"
	ports  map[uint16]bool
}

type cidrRule struct {
	prefix netip.Prefix
	ports  map[uint16]bool
}

// PolicyError is a policy refused before it takes effect.
type PolicyError struct{ Msg string }

func (e *PolicyError) Error() string { return "network policy: " + e.Msg }

// compile validates p. A rule names exactly one of host and cidr.
func compile(p cliapi.NetworkPolicy) (*compiled, error) {
	if len(p.Allow) > taxonomy.MaxNetworkRules {
		return nil, &PolicyError{fmt.Sprintf("%d rules, over MAX_NETWORK_RULES (%d)", len(p.Allow), taxonomy.MaxNetworkRules)}
	}
	c := &compiled{exact: map[string]map[uint16]bool{}, source: p}
	for i, r := range p.Allow {
		ports, err := rulePorts(r.Ports)
		if err != nil {
			return nil, &PolicyError{fmt.Sprintf("rule %d: %v", i, err)}
		}
		hasHost, hasCIDR := r.Host != nil && *r.Host != "", r.Cidr != nil && *r.Cidr != ""
		switch {
		case hasHost == hasCIDR:
			return nil, &PolicyError{fmt.Sprintf("rule %d: name exactly one of host and cidr", i)}
		case hasHost:
			h := strings.ToLower(strings.TrimSuffix(*r.Host, "."))
			if s, ok := strings.CutPrefix(h, "*."); ok {
				if !validName(s) {
					return nil, &PolicyError{fmt.Sprintf("rule %d: %q is not a host name pattern", i, *r.Host)}
				}
				c.suffixes = append(c.suffixes, suffixRule{"." + s, ports})
				continue
			}
			if !validName(h) {
				return nil, &PolicyError{fmt.Sprintf("rule %d: %q is not a host name", i, *r.Host)}
			}
			merge(c.exact, h, ports)
		default:
			pfx, err := parseCIDR(*r.Cidr)
			if err != nil {
				return nil, &PolicyError{fmt.Sprintf("rule %d: %v", i, err)}
			}
			if pfx.Overlaps(SyntheticNet) || pfx.Overlaps(guestNet) {
				return nil, &PolicyError{fmt.Sprintf("rule %d: %s overlaps the guest's own network (%s, %s)", i, pfx, guestNet, SyntheticNet)}
			}
			c.cidrs = append(c.cidrs, cidrRule{pfx, ports})
		}
	}
	return c, nil
}

func merge(m map[string]map[uint16]bool, k string, ports map[uint16]bool) {
	if m[k] == nil {
		m[k] = map[uint16]bool{}
	}
	for p := range ports {
		m[k][p] = true
	}
}

func rulePorts(ps *[]int64) (map[uint16]bool, error) {
	list := defaultPorts
	if ps != nil && len(*ps) > 0 {
		list = *ps
	}
	m := map[uint16]bool{}
	for _, p := range list {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("port %d is not in 1..65535", p)
		}
		m[uint16(p)] = true
	}
	return m, nil
}

func parseCIDR(s string) (netip.Prefix, error) {
	var pfx netip.Prefix
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return pfx, fmt.Errorf("%q is not a CIDR", s)
		}
		pfx = p.Masked()
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return pfx, fmt.Errorf("%q is not an address", s)
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if !pfx.Addr().Is4() {
		return pfx, fmt.Errorf("%s is not IPv4; a guest under a policy has no IPv6", s)
	}
	return pfx, nil
}

// validName reports whether s is a lower-case DNS name of letters, digits,
// hyphens and underscores in dot-separated labels.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// nameAllowed reports whether some rule allows name (any port).
func (c *compiled) nameAllowed(name string) bool {
	if c == nil {
		return false
	}
	if _, ok := c.exact[name]; ok {
		return true
	}
	for _, s := range c.suffixes {
		if strings.HasSuffix(name, s.suffix) {
			return true
		}
	}
	return false
}

// allowName reports whether a TCP flow to name:port is allowed.
func (c *compiled) allowName(name string, port uint16) bool {
	if c == nil {
		return false
	}
	if c.exact[name][port] {
		return true
	}
	for _, s := range c.suffixes {
		if strings.HasSuffix(name, s.suffix) && s.ports[port] {
			return true
		}
	}
	return false
}

// allowAddr reports whether a TCP flow to a real address is allowed by a
// CIDR rule.
func (c *compiled) allowAddr(a netip.Addr, port uint16) bool {
	if c == nil {
		return false
	}
	for _, r := range c.cidrs {
		if r.prefix.Contains(a) && r.ports[port] {
			return true
		}
	}
	return false
}

// hostMatches reports whether name matches a binding's host pattern.
func hostMatches(pattern, name string) bool {
	pattern = strings.ToLower(strings.TrimSuffix(pattern, "."))
	if s, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+s)
	}
	return pattern == name
}
