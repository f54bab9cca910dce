package netpolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
	"golang.org/x/net/dns/dnsmessage"
)

func hostRule(h string, ports ...int64) cliapi.NetworkRule {
	r := cliapi.NetworkRule{Host: &h}
	if len(ports) > 0 {
		r.Ports = &ports
	}
	return r
}

func cidrRuleOf(c string, ports ...int64) cliapi.NetworkRule {
	r := cliapi.NetworkRule{Cidr: &c}
	if len(ports) > 0 {
		r.Ports = &ports
	}
	return r
}

// Catches: a suffix rule matching its bare suffix or a look-alike, default
// ports other than 443 and 80, a CIDR rule ignoring its ports.
func TestPolicyMatching(t *testing.T) {
	c, err := compile(cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{
		hostRule("Pypi.org."), hostRule("*.githubusercontent.com", 443), cidrRuleOf("203.0.113.0/24", 5432),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		port uint16
		want bool
	}{
		{"pypi.org", 443, true}, {"pypi.org", 80, true}, {"pypi.org", 22, false},
		{"evilpypi.org", 443, false}, {"files.pypi.org", 443, false},
		{"raw.githubusercontent.com", 443, true}, {"a.b.githubusercontent.com", 443, true},
		{"githubusercontent.com", 443, false}, {"raw.githubusercontent.com", 80, false},
		{"xgithubusercontent.com", 443, false},
	} {
		if got := c.allowName(tc.name, tc.port); got != tc.want {
			t.Errorf("allowName(%s, %d) = %v", tc.name, tc.port, got)
		}
	}
	if !c.allowAddr(netip.MustParseAddr("203.0.113.9"), 5432) || c.allowAddr(netip.MustParseAddr("203.0.113.9"), 443) ||
		c.allowAddr(netip.MustParseAddr("203.0.114.9"), 5432) {
		t.Error("CIDR rule matched wrongly")
	}
	if (*compiled)(nil).allowName("pypi.org", 443) || (*compiled)(nil).nameAllowed("pypi.org") {
		t.Error("no policy allowed something")
	}
}

// Catches: a malformed or unenforceable rule taking effect.
func TestPolicyRefusals(t *testing.T) {
	h, c := "a.test", "10.9.0.0/16"
	many := make([]cliapi.NetworkRule, taxonomy.MaxNetworkRules+1)
	for i := range many {
		many[i] = hostRule("a.test")
	}
	for name, p := range map[string][]cliapi.NetworkRule{
		"both":           {{Host: &h, Cidr: &c}},
		"neither":        {{}},
		"ipv6":           {cidrRuleOf("2001:db8::/32")},
		"synthetic":      {cidrRuleOf("198.19.0.0/16")},
		"guest net":      {cidrRuleOf("10.0.2.0/30")},
		"port 0":         {hostRule("a.test", 0)},
		"port too large": {hostRule("a.test", 65536)},
		"bad name":       {hostRule("a test")},
		"bare star":      {hostRule("*")},
		"too many":       many,
	} {
		if _, err := compile(cliapi.NetworkPolicy{Allow: p}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Catches: a secret's value in any printed, marshalled or error form, or a
// placeholder that carries it.
func TestSecretNeverPrinted(t *testing.T) {
	const v = "sk-live-4848-value"
	s := NewSecret("KEY", v, "api.test")
	j, _ := json.Marshal([]Secret{s})
	n, err := New(Config{Secrets: []Secret{s}})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(n.State())
	_, bad := New(Config{Secrets: []Secret{NewSecret("KEY", v, "not a host")}})
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%+v %#v %s", s, s, s), string(j), string(st),
		fmt.Sprintf("%+v", n.GuestEnv()), fmt.Sprint(bad)} {
		if strings.Contains(out, v) {
			t.Fatalf("the value is in %q", out)
		}
	}
	if bad == nil {
		t.Fatal("a binding to a malformed host was accepted")
	}
}

type fixedResolver []netip.Addr

func (r fixedResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r, nil
}

func query(name string, typ dnsmessage.Type) []byte {
	b, _ := (&dnsmessage.Message{Header: dnsmessage.Header{ID: 7},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}}}).Pack()
	return b
}

func FuzzAnswerDNS(f *testing.F) {
	f.Add(query("a.test.", dnsmessage.TypeA))
	f.Add(query("b.test.", dnsmessage.TypeTXT))
	f.Add(query("x.a.test.", dnsmessage.TypeAAAA))
	f.Add([]byte{})
	n, err := New(Config{Policy: cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{hostRule("a.test")}},
		Resolver: fixedResolver{netip.MustParseAddr("192.0.2.1")}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		out := n.answerDNS(context.Background(), q)
		if out == nil {
			return
		}
		if len(q) > maxDNSQuery {
			t.Fatal("an over-long query was answered")
		}
		var m dnsmessage.Message
		if err := m.Unpack(out); err != nil {
			t.Fatalf("our answer does not parse: %v", err)
		}
		if !m.Header.Response || len(out) > maxDNSQuery+64 {
			t.Fatalf("answer: response=%v, %d bytes", m.Header.Response, len(out))
		}
		for _, a := range m.Answers {
			name := strings.ToLower(strings.TrimSuffix(a.Header.Name.String(), "."))
			r, ok := a.Body.(*dnsmessage.AResource)
			if !ok || name != "a.test" || !SyntheticNet.Contains(netip.AddrFrom4(r.A)) {
				t.Fatalf("answered %v for %q", a.Body, name)
			}
		}
	})
}

// Catches: the default dialer reaching the host's own loopback (the
// emulator's control plane) or a cloud's metadata endpoint because an
// allowed name resolves there.
func TestDefaultDialRefusesHostAddresses(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "169.254.169.254", "0.0.0.0", "224.0.0.1"} {
		n, err := New(Config{Resolver: fixedResolver{netip.MustParseAddr(a)}})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := n.dial(context.Background(), "tcp", "allowed.test:443"); err == nil {
			c.Close()
			t.Errorf("a name resolving to %s was dialled", a)
		}
		if c, err := n.dial(context.Background(), "tcp", a+":443"); err == nil {
			c.Close()
			t.Errorf("%s was dialled directly", a)
		}
	}
}

// Catches: the denied list keeping more than its bound, losing the count,
// or keeping a guest-chosen host of any length.
func TestDeniedListBounded(t *testing.T) {
	d := &deniedLog{now: time.Now}
	for i := 0; i < taxonomy.NetworkDeniedListed+10; i++ {
		d.add(fmt.Sprintf("h%d", i)+strings.Repeat("x", 1000*(i%2)), 443, "tcp", whyHost)
	}
	count, last := d.snapshot()
	if count != int64(taxonomy.NetworkDeniedListed+10) || len(last) != taxonomy.NetworkDeniedListed {
		t.Fatalf("count %d, kept %d", count, len(last))
	}
	if !strings.HasPrefix(last[0].Host, "h10") || !strings.HasPrefix(last[len(last)-1].Host, fmt.Sprintf("h%d", taxonomy.NetworkDeniedListed+9)) {
		t.Fatalf("not oldest first: %s .. %s", last[0].Host, last[len(last)-1].Host)
	}
	for _, e := range last {
		if len(e.Host) > maxDeniedHost {
			t.Fatalf("kept a %d-byte host", len(e.Host))
		}
	}
}
