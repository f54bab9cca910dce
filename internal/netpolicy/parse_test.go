package netpolicy

import (
	"fmt"
	"strings"
	"testing"
)

// Catches: a port list ignored, a CIDR read as a host, a value quoted in
// a refusal, or a value cut at its own @.
func TestParseSpecs(t *testing.T) {
	r, err := ParseRule("*.pypi.org:443,8443")
	if err != nil || r.Host == nil || *r.Host != "*.pypi.org" || r.Ports == nil || len(*r.Ports) != 2 || (*r.Ports)[1] != 8443 {
		t.Fatalf("host rule: %+v, %v", r, err)
	}
	r, err = ParseRule("203.0.113.0/24:5432")
	if err != nil || r.Cidr == nil || *r.Cidr != "203.0.113.0/24" || r.Host != nil {
		t.Fatalf("cidr rule: %+v, %v", r, err)
	}
	for _, bad := range []string{"", "a.test:", "a.test:x", "a.test:70000", "2001:db8::1", "a b", "198.18.0.1"} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("rule %q accepted", bad)
		}
	}
	s, err := ParseSecret("TOKEN=p@ss@api.test,*.api.test")
	if err != nil || s.Name != "TOKEN" || s.value != "p@ss" || len(s.Hosts) != 2 {
		t.Fatalf("secret: %v, %v", s, err)
	}
	for _, bad := range []string{"TOKEN=hunter2", "1X=hunter2@a.test", "TOKEN=hunter2@", "TOKEN=hunter2@not a host", "=hunter2@a.test", "TOKEN=@a.test"} {
		_, err := ParseSecret(bad)
		if err == nil {
			t.Errorf("secret %q accepted", bad)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the refusal of %q quotes the value: %v", bad, err)
		}
	}
}

func FuzzParseSpecs(f *testing.F) {
	for _, s := range []string{"a.test:443", "*.a.test", "10.0.0.0/8:22", "K=v@a.test", "K=v@@a.test,b.test"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		if r, err := ParseRule(spec); err == nil && (r.Host == nil) == (r.Cidr == nil) {
			t.Fatalf("%q: a rule with both or neither of host and cidr", spec)
		}
		s, err := ParseSecret(spec)
		if err != nil {
			if v := spec[strings.IndexByte(spec, '=')+1:]; len(v) > 8 && strings.Contains(err.Error(), v) {
				t.Fatalf("a refusal quotes the value: %v", err)
			}
			return
		}
		if s.value == "" || len(s.Hosts) == 0 {
			t.Fatalf("%q parsed to a secret without a value or a host", spec)
		}
		// Every printed form is the same whatever the value.
		other := NewSecret(s.Name, s.value+"x", s.Hosts...)
		j1, _ := s.MarshalJSON()
		j2, _ := other.MarshalJSON()
		if s.String() != other.String() || fmt.Sprintf("%#v", s) != fmt.Sprintf("%#v", other) || string(j1) != string(j2) {
			t.Fatalf("%q: a printed form depends on the value", spec)
		}
	})
}
