package sandbox

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// exampleCom is an HTTPS stand-in for example.com on loopback (httptest's
// certificate names it), reached only through the emulator's injected
// resolver and dialer: no packet leaves this machine.
type exampleCom struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string // each request's X-Api-Key
}

func newExampleCom(t *testing.T) *exampleCom {
	e := &exampleCom{}
	e.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.got = append(e.got, r.Header.Get("X-Api-Key"))
		e.mu.Unlock()
		fmt.Fprint(w, "stand-in for example.com")
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *exampleCom) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "example.com" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no stand-in", Name: host, IsNotFound: true}
}

func (e *exampleCom) options() emulator.NetworkOptions {
	roots := x509.NewCertPool()
	roots.AddCert(e.srv.Certificate())
	return emulator.NetworkOptions{Resolver: e, RootCAs: roots, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, _ := net.SplitHostPort(addr); host != "example.com" {
			return nil, &net.AddrError{Err: "no stand-in", Addr: addr}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, e.srv.Listener.Addr().String())
	}}
}

func (e *exampleCom) keys() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

// Catches: a Launch that drops Options.Network (the guest reaches nothing,
// or holds the value), Network or SetNetworkPolicy not reaching the
// emulator, and a policy change that does not take.
func TestSandboxUnderNetworkPolicy(t *testing.T) {
	up := newExampleCom(t)
	f := newFixture(t, emulator.Options{VMs: emulator.AgentdLauncher(agentdHost, nil), WallClock: true, Network: up.options()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const value = "key-5d1f8b2a9c7e3f40"
	sb, err := Launch(ctx, f.cp, Options{Image: f.emu.AddImage("net-sandbox"), Wait: fast, Network: &Network{
		Policy:  cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{{Host: aws.String("example.com")}}},
		Secrets: []Secret{NewSecret("API_KEY", value, "example.com")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.Background(), TeardownOptions{})
	curl := `curl -sS -f --max-time 20 -H "X-Api-Key: $API_KEY" https://example.com/`
	r, err := sb.Run(ctx, []string{curl}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	if err != nil || r.ExitCode == nil || *r.ExitCode != 0 || r.Stdout != "stand-in for example.com" {
		t.Fatalf("the allowed host: %v %+v", err, r)
	}
	if got := up.keys(); len(got) != 1 || got[0] != value {
		t.Fatalf("the stand-in got %q, want the value", got)
	}
	st, err := sb.Network(ctx)
	if err != nil || !st.Enforced || len(st.Secrets) != 1 || !strings.HasPrefix(st.Secrets[0].Placeholder, "mvp_") {
		t.Fatalf("Network: %v %+v", err, st)
	}
	if err := sb.SetNetworkPolicy(ctx, cliapi.NetworkPolicy{}); err != nil {
		t.Fatal(err)
	}
	r, err = sb.Run(ctx, []string{curl}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	if err != nil || r.ExitCode == nil || *r.ExitCode == 0 {
		t.Fatalf("after a deny-all policy: %v %+v", err, r)
	}
	if st, _ := sb.Network(ctx); st.Policy == nil || len(st.Policy.Allow) != 0 || st.DeniedCount == 0 {
		t.Fatalf("after a deny-all policy: %+v", st)
	}
	for _, req := range f.emu.Requests() {
		if strings.Contains(string(req.Body), value) || strings.Contains(fmt.Sprint(req.Header), value) {
			t.Fatalf("the emulator recorded the value in %s %s", req.Method, req.Path)
		}
	}
}

type noCalls struct{ t *testing.T }

func (n noCalls) Do(r *http.Request) (*http.Response, error) {
	n.t.Errorf("a request was sent: %s %s", r.Method, r.URL)
	return nil, errors.New("no calls")
}

// Catches: a policy or secret sent to AWS, silently dropped there, or
// refused without the finding (or with another exit than a local refusal's).
func TestNetworkRefusedOnAWSBeforeAnyCall(t *testing.T) {
	c := lambdamicrovms.New(lambdamicrovms.Options{Region: "us-east-1", Credentials: creds, HTTPClient: noCalls{t}})
	ctx := context.Background()
	want := func(what string, err error) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindInvalidArg || ce.Finding() != taxonomy.FindingEgressConnectorOrNone {
			t.Fatalf("%s on AWS: %v, want InvalidArg naming %s", what, err, taxonomy.FindingEgressConnectorOrNone)
		}
	}
	_, err := Launch(ctx, c, Options{Image: "arn:aws:lambda:us-east-1:123456789012:microvm-image:x", Network: &Network{Secrets: []Secret{NewSecret("K", "v", "example.com")}}})
	want("Launch", err)
	_, err = Open(c, "microvm-1").Network(ctx)
	want("Network", err)
	want("SetNetworkPolicy", Open(c, "microvm-1").SetNetworkPolicy(ctx, cliapi.NetworkPolicy{}))
	want("CheckNetworkEndpoint", CheckNetworkEndpoint("https://lambda-microvms.us-east-1.amazonaws.com"))
	if err := CheckNetworkEndpoint("http://127.0.0.1:4566"); err != nil {
		t.Fatalf("a loopback endpoint refused: %v", err)
	}
}

// Catches: a Secret whose printed, Go-syntax or JSON form shows its value,
// and a parser whose refusal quotes it.
func TestSecretsNeverPrintTheirValue(t *testing.T) {
	const v = "hunter2-value"
	s := NewSecret("K", v, "a.example.test")
	raw, _ := json.Marshal(s)
	for _, form := range []string{s.String(), fmt.Sprintf("%v %+v %#v %s", s, s, s, s), string(raw), fmt.Sprint([]Secret{s})} {
		if strings.Contains(form, v) {
			t.Fatalf("a Secret printed its value: %s", form)
		}
	}
	for _, spec := range []string{"1K=" + v + "@a.example.test", "K=" + v, "K=" + v + "@bad host"} {
		if _, err := ParseSecret(spec); err == nil || strings.Contains(err.Error(), v) || client.KindOf(err) != taxonomy.KindInvalidArg {
			t.Fatalf("ParseSecret(%q) = %v", spec, err)
		}
	}
	got, err := ParseSecret("K=a@b@c.example.test,d.example.test")
	if err != nil || got.value != "a@b" || strings.Join(got.Hosts, " ") != "c.example.test d.example.test" {
		t.Fatalf("ParseSecret: %#v %v", got, err)
	}
	got, err = ParseSecretEnv("FROM@x.example.test", func(k string) string { return map[string]string{"FROM": "env-v"}[k] })
	if err != nil || got.value != "env-v" || got.Name != "FROM" {
		t.Fatalf("ParseSecretEnv: %v", err)
	}
	if _, err := ParseSecretEnv("UNSET@x.example.test", func(string) string { return "" }); err == nil {
		t.Fatal("ParseSecretEnv took an unset variable")
	}
	p := filepath.Join(t.TempDir(), "k")
	os.WriteFile(p, []byte("file-v\n"), 0o600)
	got, err = ParseSecretFile("F=" + p + "@x.example.test")
	if err != nil || got.value != "file-v" {
		t.Fatalf("ParseSecretFile: %q %v", got.value, err)
	}
	if _, err := ParseNetworkRule("example.com:443,8443"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseNetworkRule("2001:db8::/32"); err == nil {
		t.Fatal("an IPv6 rule was taken")
	}
}
