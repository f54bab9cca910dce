package main_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The network policy from the command line (issue 48). No packet leaves
// this machine: the guests only resolve names the policy refuses, which
// are answered without any upstream lookup.

// Catches: run --local that ignores --network-allow (a guest with no tun,
// the host's resolver, the real value in its environment), or a secret's
// value reaching the envelope, stderr or the ledger, or a run that does not
// report what the policy refused.
func TestRunLocalUnderNetworkPolicy(t *testing.T) {
	env, stateDir := lifecycleEnv(t)
	const value = "sk-cli-9f1c2e7a5b3d4c6e8a0b"
	secretFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(secretFile, []byte("file-secret-4a7d2c9e1b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env = append(env, "FROM_ENV=env-secret-7c1e9a3b5d")
	script := `cat /etc/resolv.conf; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' '; echo;` +
		` echo "$TOKEN $ENVKEY $FILEKEY"; echo "$SSL_CERT_FILE"; getent hosts denied.test || echo denied-name`
	inv := cli(t, env, "", "--json", "run", "--local", "--network-allow", "example.test", "--network-allow", "10.9.0.0/16:8080",
		"--secret", "TOKEN="+value+"@example.test", "--secret-env", "FROM_ENV@example.test", "--secret-file", "FILEKEY="+secretFile+"@example.test",
		"--exec", strings.Replace(script, "$ENVKEY", "$FROM_ENV", 1))
	m := envelope(t, inv)
	if inv.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", inv.code, inv.stdout, inv.stderr)
	}
	out := data(m)["stdout"].(string)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || lines[0] != "nameserver 10.0.2.2" || lines[1] != "lo tun0 " || lines[3] != "/etc/microvms/ca-bundle.pem" || lines[4] != "denied-name" {
		t.Fatalf("the guest saw:\n%s", out)
	}
	for _, p := range strings.Fields(lines[2]) {
		if !strings.HasPrefix(p, "mvp_") {
			t.Fatalf("a secret's variable holds %q, want a placeholder", p)
		}
	}
	if len(strings.Fields(lines[2])) != 3 {
		t.Fatalf("placeholders: %q", lines[2])
	}
	// The refusals come back with the run, read before the teardown that
	// takes `network show` away: catches a run that drops them, or reads
	// them after the MicroVM is gone.
	nw, _ := data(m)["network"].(map[string]any)
	if nw == nil || nw["enforced"] != true || nw["deniedCount"].(float64) < 1 || !strings.Contains(fmt.Sprint(nw["denied"]), "denied.test") {
		t.Fatalf("the run's network: %v", nw)
	}
	for _, v := range []string{value, "env-secret-7c1e9a3b5d", "file-secret-4a7d2c9e1b"} {
		if strings.Contains(inv.stdout+inv.stderr, v) {
			t.Fatalf("the run's output carries a secret's value")
		}
		filepath.WalkDir(stateDir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), v) {
					t.Fatalf("%s carries a secret's value", p)
				}
			}
			return nil
		})
	}
}

// Catches: a policy sent to AWS (or silently dropped there) instead of
// refused before any call with the finding that measured why.
func TestNetworkPolicyRefusedOnAWS(t *testing.T) {
	env := []string{"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=x"}
	for _, args := range [][]string{
		{"run", "--image", "arn:aws:lambda:us-east-1:123456789012:microvm-image:x", "--network-allow", "example.test", "--exec", "true"},
		{"run", "--image", "arn:aws:lambda:us-east-1:123456789012:microvm-image:x", "--secret", "K=v@example.test", "--exec", "true"},
		{"network", "show", "microvm-0123"},
		{"network", "set", "microvm-0123", "--allow", "example.test"},
	} {
		inv := cli(t, env, "", append([]string{"--json"}, args...)...)
		m := wantFailure(t, inv, taxonomy.KindInvalidArg, taxonomy.FindingEgressConnectorOrNone)
		if strings.Contains(inv.stdout+inv.stderr, "=v@") {
			t.Fatalf("%v: the refusal quotes the secret", args)
		}
		_ = m
	}
	// The flags themselves are checked before anything else.
	for _, args := range [][]string{
		{"run", "--local", "--network-allow", "bad host", "--exec", "true"},
		{"run", "--local", "--secret", "1BAD=v@example.test", "--exec", "true"},
		{"network", "set", "microvm-0123", "--local"},
		{"network", "show", "microvm-0123", "--allow", "a.test", "--local"},
	} {
		inv := cli(t, nil, "", append([]string{"--json"}, args...)...)
		wantFailure(t, inv, taxonomy.KindInvalidArg, "")
	}
}

// Catches: network show or set that does not reach the emulator's routes,
// a set that does not replace the policy, or an envelope of another type.
func TestNetworkShowSet(t *testing.T) {
	_, url := testEmulator(t, emulator.Options{})
	env, _ := lifecycleEnv(t)
	env = append(env, "AWS_ENDPOINT_URL="+url, "AWS_REGION=us-east-1")
	run := func(args ...string) map[string]any {
		t.Helper()
		inv := cli(t, env, "", append([]string{"--json"}, args...)...)
		m := envelope(t, inv)
		if inv.code != 0 {
			t.Fatalf("microvm %v: exit %d\n%s\n%s", args, inv.code, inv.stdout, inv.stderr)
		}
		return m
	}
	kept := data(run("run", "--keep", "--network-allow", "a.example.test", "--secret", "K=kept-secret-3e5a@a.example.test"))
	id := kept["microvmId"].(string)
	defer run("terminate", id, "--wait")
	show := run("network", "show", id)
	if show["type"] != cliapi.TypeNetwork {
		t.Fatalf("type %v", show["type"])
	}
	nw := data(show)["network"].(map[string]any)
	if nw["enforced"] != true || nw["where"] != "emulator" || !strings.Contains(toJSON(t, nw), "a.example.test") || strings.Contains(toJSON(t, show), "kept-secret-3e5a") {
		t.Fatalf("network show: %v", nw)
	}
	set := run("network", "set", id, "--allow", "b.example.test:8443", "--allow", "10.1.0.0/16")
	got := toJSON(t, data(set)["network"].(map[string]any)["policy"])
	if !strings.Contains(got, "b.example.test") || strings.Contains(got, "a.example.test") || !strings.Contains(got, "8443") {
		t.Fatalf("network set: %s", got)
	}
	deny := run("network", "set", id, "--deny-all")
	if p := data(deny)["network"].(map[string]any)["policy"].(map[string]any)["allow"].([]any); len(p) != 0 {
		t.Fatalf("--deny-all left %v", p)
	}
	human := cli(t, env, "", "network", "show", id)
	if human.code != 0 || !strings.Contains(human.stdout, "allows nothing") || !strings.Contains(human.stdout, "secret K") {
		t.Fatalf("human network show: %d %q", human.code, human.stdout)
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exampleTest is an HTTPS stand-in for example.test on loopback, with a
// self-signed certificate written to a PEM file for
// MICROVM_NETWORK_UPSTREAM_CA; it records each request's X-Api-Key.
func exampleTest(t *testing.T) (addr, caFile string, keys func() []string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "example.test"}, DNSNames: []string{"example.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("X-Api-Key"))
		mu.Unlock()
		w.Write([]byte("stand-in example.test"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv.Listener.Addr().String(), caFile, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
}

// Catches: run --local --network-allow whose allowed host is unreachable,
// whose secret is not put in the bound host's requests, or which lets the
// guest reach a name the policy does not allow.
func TestRunLocalNetworkAllowReachesTheAllowedHost(t *testing.T) {
	env, _ := lifecycleEnv(t)
	addr, ca, keys := exampleTest(t)
	env = append(env, "MICROVM_NETWORK_RESOLVE=example.test="+addr+",other.test="+addr, "MICROVM_NETWORK_UPSTREAM_CA="+ca)
	const value = "sk-allowed-host-6b2e0d"
	inv := cli(t, env, "", "--json", "run", "--local", "--network-allow", "example.test", "--secret", "API_KEY="+value+"@example.test",
		"--exec", `curl -sS -f --max-time 20 -H "X-Api-Key: $API_KEY" https://example.test/ && echo && (curl -sS -f --max-time 10 https://other.test/ || echo other-refused)`)
	m := envelope(t, inv)
	if inv.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", inv.code, inv.stdout, inv.stderr)
	}
	if out := data(m)["stdout"].(string); out != "stand-in example.test\nother-refused\n" {
		t.Fatalf("the guest saw %q", out)
	}
	if got := keys(); len(got) != 1 || got[0] != value {
		t.Fatalf("the stand-in got %q, want the value once", got)
	}
	if strings.Contains(inv.stdout+inv.stderr, value) {
		t.Fatal("the run's output carries the secret's value")
	}
}

// Catches: doctor --local that does not say whether this host can give a
// guest a network under a policy.
func TestDoctorReportsNetworkPolicy(t *testing.T) {
	env, _ := lifecycleEnv(t)
	inv := cli(t, env, "", "--json", "doctor", "--local")
	m := envelope(t, inv)
	for _, c := range data(m)["checks"].([]any) {
		c := c.(map[string]any)
		if c["name"] == "local-network-policy" {
			if os.Geteuid() == 0 && c["ok"] != true {
				t.Fatalf("as root: %v", c)
			}
			return
		}
	}
	t.Fatalf("no local-network-policy check: %s", inv.stdout)
}
