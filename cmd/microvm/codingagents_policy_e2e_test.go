package main_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/emulator"
)

// modelStandIn is a stand-in model API on loopback, served over HTTPS as
// the names it is given (a test CA signs its certificate), recording the
// Authorization header of every request. The emulator reaches it through
// its injected resolver and dialer, so no packet leaves this machine.
type modelStandIn struct {
	roots *x509.CertPool
	srv   *httptest.Server
	names map[string]bool
	mu    sync.Mutex
	auths []string
}

func newModelStandIn(t *testing.T, names ...string) *modelStandIn {
	t.Helper()
	m := &modelStandIn{names: map[string]bool{}}
	for _, n := range names {
		m.names[n] = true
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "model stand-in CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	m.roots = x509.NewCertPool()
	m.roots.AddCert(ca)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	m.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		m.mu.Lock()
		m.auths = append(m.auths, r.Host+" "+r.Header.Get("Authorization"))
		m.mu.Unlock()
		// The "model's answer": the line the stand-in agent writes.
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"content":"fixed by the model stand-in"}`)
	}))
	m.srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	m.srv.StartTLS()
	t.Cleanup(m.srv.Close)
	return m
}

func (m *modelStandIn) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if m.names[host] {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no stand-in", Name: host, IsNotFound: true}
}

func (m *modelStandIn) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, _ := net.SplitHostPort(addr)
	if !m.names[host] {
		return nil, &net.AddrError{Err: "no stand-in for this address", Addr: addr}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, m.srv.Listener.Addr().String())
}

func (m *modelStandIn) got() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.auths...)
}

// The example's own script (examples/coding-agents/run.sh), run as a user
// runs it against `microvm emulator`, with a stand-in agent in place of
// Claude Code and Codex: the agent calls the model over HTTPS with the
// placeholder in its environment and edits the uploaded repository. The
// stand-in model (posing as Bedrock's host) must receive the real token;
// the guest must hold only the placeholder; the patch must come back.
//
// Catches: a script that copies the token into the guest (the reference's
// way), a policy that lets the agent reach a host it does not list, a
// secret bound to the wrong host (the stand-in would get the placeholder),
// a repository not uploaded or a patch not brought back.
func TestCodingAgentsExampleUnderPolicy(t *testing.T) {
	const host = "bedrock-runtime.us-east-1.amazonaws.com"
	const token = "bedrock-bearer-5c2e9a71d3f04b68"
	model := newModelStandIn(t, host)
	_, url := testEmulator(t, emulator.Options{Network: emulator.NetworkOptions{Resolver: model, Dial: model.dial, RootCAs: model.roots}})
	env, stateDir := lifecycleEnv(t)

	repo := t.TempDir()
	gitIn := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.test"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("TODO: say what this does\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn("init", "-q")
	gitIn("add", "README")
	gitIn("commit", "-qm", "first")

	// The stand-in agent: what it reports about its own environment, then
	// a model call with the placeholder, then an edit from the answer; a
	// host the policy does not list must be refused.
	agent := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(agent, []byte(`#!/bin/sh
set -e
case "$AWS_BEARER_TOKEN_BEDROCK" in mvp_*) echo "placeholder-in-env" ;; *) echo "no placeholder: the token is in the guest"; exit 3 ;; esac
# the value searched for is put together here, so this file does not hold it
t1=`+token[:8]+`; t2=`+token[8:]+`
if grep -rqs "$t1$t2" /workspace /proc/self/environ; then echo "the token is in the guest"; exit 4; fi
answer=$(curl -sS -f --max-time 30 -H "Authorization: Bearer $AWS_BEARER_TOKEN_BEDROCK" -d '{"task":"fix"}' https://`+host+`/model/stand-in/invoke)
echo "$answer" | sed -n 's/.*"content":"\([^"]*\)".*/\1/p' > README
echo "$1" > TASK.txt
if curl -sS --max-time 10 https://example.com/ >/dev/null 2>&1; then echo "reached a host the policy does not list"; exit 5; fi
echo agent-done
`), 0o755); err != nil {
		t.Fatal(err)
	}

	patch := filepath.Join(t.TempDir(), "changes.patch")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../../examples/coding-agents/run.sh", repo, "fix the TODO")
	cmd.Env = append(append(append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, coverEnv()...), env...),
		"MICROVM="+bin, "AWS_ENDPOINT_URL="+url, "AWS_REGION=us-east-1", "BUILD=0",
		"AGENT_SCRIPT="+agent, "PATCH_OUT="+patch, "AWS_BEARER_TOKEN_BEDROCK="+token)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("run.sh: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "placeholder-in-env") || !strings.Contains(out.String(), "agent-done") {
		t.Fatalf("the stand-in agent did not finish:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	got := model.got()
	if len(got) != 1 || got[0] != host+" Bearer "+token {
		t.Fatalf("the stand-in model got %q, want the real token once", got)
	}
	p, err := os.ReadFile(patch)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-TODO: say what this does", "+fixed by the model stand-in", "+++ b/TASK.txt", "+fix the TODO"} {
		if !strings.Contains(string(p), want) {
			t.Fatalf("the patch lacks %q:\n%s", want, p)
		}
	}
	// The patch applies to the repository it came from.
	gitIn("apply", "--check", patch)
	// The token is in nothing the CLI printed or kept.
	if strings.Contains(out.String()+errb.String()+string(p), token) {
		t.Fatalf("the token is in the script's output or the patch")
	}
	filepath.WalkDir(stateDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(token)) {
				t.Fatalf("%s carries the token", path)
			}
		}
		return nil
	})
}
