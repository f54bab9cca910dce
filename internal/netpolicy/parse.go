package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/microvms/microvms/gen/cliapi"
)

// maxSpecLen bounds a rule or secret spec's text (a flag's value).
const maxSpecLen = 8192

// ParseRule reads one allow rule as a flag spells it: HOST[:PORTS] or
// CIDR[:PORTS], HOST an exact name or *.suffix, CIDR an IPv4 network or
// address, PORTS a comma-separated list (none: 443 and 80). The rule is
// checked as a policy would check it.
func ParseRule(spec string) (cliapi.NetworkRule, error) {
	var r cliapi.NetworkRule
	if len(spec) > maxSpecLen {
		return r, &PolicyError{"a rule is over " + strconv.Itoa(maxSpecLen) + " bytes"}
	}
	target, portList, hasPorts := strings.Cut(spec, ":")
	if hasPorts {
		var ports []int64
		for _, p := range strings.Split(portList, ",") {
			v, err := strconv.ParseInt(p, 10, 32)
			if err != nil {
				return r, &PolicyError{fmt.Sprintf("%q: %q is not a port", spec, p)}
			}
			ports = append(ports, v)
		}
		r.Ports = &ports
	}
	if _, err := netip.ParsePrefix(target); err == nil {
		r.Cidr = &target
	} else if _, err := netip.ParseAddr(target); err == nil {
		r.Cidr = &target
	} else {
		r.Host = &target
	}
	if _, err := compile(cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{r}}); err != nil {
		return cliapi.NetworkRule{}, err
	}
	return r, nil
}

// ParseSecret reads NAME=VALUE@HOST[,HOST...] (the last @ ends the value,
// which may hold one). A refusal never quotes the value.
func ParseSecret(spec string) (Secret, error) {
	if len(spec) > maxSpecLen {
		return Secret{}, &PolicyError{"a secret spec is over " + strconv.Itoa(maxSpecLen) + " bytes"}
	}
	name, rest, ok := strings.Cut(spec, "=")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 {
		return Secret{}, &PolicyError{"a secret is NAME=VALUE@HOST[,HOST...]"}
	}
	if !envName(name) {
		return Secret{}, &PolicyError{fmt.Sprintf("secret name %q is not an environment variable's name", name)}
	}
	s := NewSecret(name, rest[:at], strings.Split(rest[at+1:], ",")...)
	if _, err := newBindings([]Secret{s}); err != nil {
		return Secret{}, err
	}
	return s, nil
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
