//go:build linux

package emulator

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
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

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/cliapi"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/netpolicy"
	"github.com/microvms/microvms/internal/testbin"
	"github.com/microvms/microvms/localvm"
)

// The network policy end to end (issue 48): a real confined guest whose
// only link is the policy's, stand-in HTTPS servers on loopback reached
// through the injected resolver and dialer (no packet leaves this machine).

// standIn is the upstream world a guest under a policy may reach: HTTPS
// servers on loopback, one per name, each recording the Authorization
// headers it got.
type standIn struct {
	roots   *x509.CertPool
	servers map[string]*httptest.Server
	mu      sync.Mutex
	got     map[string][]string
	held    chan string // a /hold request's name when its connection ended
}

func newStandIn(t *testing.T, names ...string) *standIn {
	t.Helper()
	s := &standIn{servers: map[string]*httptest.Server{}, got: map[string][]string{}, held: make(chan string, 8)}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stand-in CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	s.roots = x509.NewCertPool()
	s.roots.AddCert(caCert)
	for i, name := range names {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		leaf := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		name := name
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.got[name] = append(s.got[name], r.Header.Get("Authorization"))
			s.mu.Unlock()
			if r.URL.Path == "/hold" {
				// Held open until the connection ends.
				w.WriteHeader(200)
				w.Write([]byte("holding\n"))
				http.NewResponseController(w).Flush()
				<-r.Context().Done()
				s.held <- name
				return
			}
			fmt.Fprintf(w, "hello from %s", name)
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		s.servers[name] = srv
	}
	return s
}

func (s *standIn) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if _, ok := s.servers[host]; ok {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such stand-in", Name: host, IsNotFound: true}
}

// dial reaches a name's stand-in, whatever port the guest asked for, and
// nothing else.
func (s *standIn) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, _ := net.SplitHostPort(addr)
	srv, ok := s.servers[host]
	if !ok {
		return nil, &net.AddrError{Err: "no stand-in for this address", Addr: addr}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, srv.Listener.Addr().String())
}

func (s *standIn) auths(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got[name]...)
}

func (s *standIn) options() NetworkOptions {
	return NetworkOptions{Resolver: s, Dial: s.dial, RootCAs: s.roots}
}

// launchUnderPolicy registers l under a fresh launch id and launches a
// guest naming it.
func launchUnderPolicy(t *testing.T, s *Server, base string, l cliapi.NetworkLaunch) cp.GetMicrovmResponse {
	t.Helper()
	b := make([]byte, 16)
	rand.Read(b)
	id := hex.EncodeToString(b)
	raw, _ := json.Marshal(l)
	path := strings.Replace(taxonomy.EmulatorLaunchNetworkPath, "{launchId}", id, 1)
	if status, _, out := do(t, base, "PUT", path, string(raw), ""); status != 204 {
		t.Fatalf("registering the launch's network: %d %s", status, out)
	}
	arn := s.AddImage(fmt.Sprintf("net-%d", time.Now().UnixNano()))
	p := payload()
	body, _ := json.Marshal(cp.RunMicrovmRequest{ImageIdentifier: arn, RunHookPayload: &p})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/2025-09-09/microvms", strings.NewReader(string(body)))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(taxonomy.EmulatorLaunchNetworkHeader, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r cp.RunMicrovmResponse
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&r) != nil {
		t.Fatalf("RunMicrovm: %d", resp.StatusCode)
	}
	return waitState(t, base, r.MicrovmId, cp.MicrovmStateRUNNING)
}

func networkState(t *testing.T, base, id string) cliapi.NetworkState {
	t.Helper()
	status, _, out := do(t, base, "GET", strings.Replace(taxonomy.EmulatorNetworkPath, "{microvmId}", id, 1), "", "")
	if status != 200 {
		t.Fatalf("network state: %d %s", status, out)
	}
	var st cliapi.NetworkState
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func setPolicy(t *testing.T, base, id string, p cliapi.NetworkPolicy) (int, string) {
	t.Helper()
	raw, _ := json.Marshal(p)
	status, _, out := do(t, base, "PUT", strings.Replace(taxonomy.EmulatorNetworkPath, "{microvmId}", id, 1), string(raw), "")
	return status, out
}

func hostRule(host string, ports ...int64) cliapi.NetworkRule {
	r := cliapi.NetworkRule{Host: &host}
	if len(ports) > 0 {
		r.Ports = &ports
	}
	return r
}

// secretScan searches, from inside the guest, every file outside the
// read-only system directories (bound from the host: nothing of the
// emulator's can be written there), every /proc/*/environ and cmdline and
// every readable region of every /proc/*/mem for the value PFX+SFX, never
// holding the two halves together. It prints what it read and found.
const secretScan = `import os
p=os.environ['PFX'].encode(); s=os.environ['SFX'].encode()
def hit(b):
    i=b.find(p)
    while i>=0:
        if b[i+len(p):i+len(p)+len(s)]==s: return True
        i=b.find(p,i+1)
    return False
found=[]; files=0; mems=0; procs=0
skip={'proc','sys','dev','usr','bin','sbin','lib','lib32','lib64','libx32'}
for root,dirs,fs in os.walk('/'):
    if root=='/': dirs[:]=[d for d in dirs if d not in skip]
    for f in fs:
        fp=os.path.join(root,f)
        try:
            if os.path.islink(fp) or not os.path.isfile(fp): continue
            with open(fp,'rb') as h: b=h.read(64<<20)
            files+=1
            if hit(b): found.append(fp)
        except Exception: pass
for pid in os.listdir('/proc'):
    if not pid.isdigit(): continue
    procs+=1
    for n in ('environ','cmdline'):
        try:
            if hit(open('/proc/%s/%s'%(pid,n),'rb').read()): found.append('/proc/%s/%s'%(pid,n))
        except Exception: pass
    try:
        mf=open('/proc/%s/mem'%pid,'rb',0)
        read=0
        for line in open('/proc/%s/maps'%pid):
            a,perm=line.split()[:2]
            if perm[0]!='r': continue
            lo,hi=[int(x,16) for x in a.split('-')]
            if hi-lo>(512<<20): continue
            try:
                mf.seek(lo); b=mf.read(hi-lo)
            except Exception: continue
            read+=1
            if hit(b): found.append('/proc/%s/mem'%pid)
        if read: mems+=1
    except Exception: pass
print('files=%d procs=%d mems=%d found=%s'%(files,procs,mems,sorted(set(found))))
`

// dnsQuery sends one query of type QT for name QN to the policy's name
// server and prints its rcode and answer count.
const dnsQuery = `import os,socket,struct
qn=os.environ['QN']; qt=int(os.environ['QT'])
q=struct.pack('>HHHHHH',4848,0x0100,1,0,0,0)+b''.join(bytes([len(l)])+l.encode() for l in qn.split('.'))+b'\x00'+struct.pack('>HH',qt,1)
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(5)
for i in range(3):
    try:
        s.sendto(q,('10.0.2.2',53)); r=s.recv(1500); break
    except socket.timeout: r=None
if r is None: print('rcode=timeout an=0')
else: print('rcode=%d an=%d'%(r[3]&15, struct.unpack('>H',r[6:8])[0]))
`

func TestNetworkPolicyHostileGuest(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	up := newStandIn(t, "api.allowed.test", "other.allowed.test")
	s, base := serve(t, Options{VMs: AgentdLauncher(agentdBin, nil), Network: up.options()})
	value := "sk-live-" + randomHexT(t, 20)
	pfx, sfx := value[:len(value)/2], value[len(value)/2:]
	vm := launchUnderPolicy(t, s, base, cliapi.NetworkLaunch{
		Policy:  cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{hostRule("api.allowed.test"), hostRule("other.allowed.test")}},
		Secrets: []cliapi.SecretValue{{Name: "SECRET_TOKEN", Value: value, Hosts: []string{"api.allowed.test"}}},
	})
	defer terminate(t, base, vm.MicrovmId)
	sess := session(t, base, vm)

	// The guest's side: its resolver, its links, its trust store, its
	// environment.
	if out := mustSh(t, sess, "cat /etc/resolv.conf"); out != "nameserver 10.0.2.2" {
		t.Fatalf("resolv.conf = %q", out)
	}
	links := mustSh(t, sess, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '")
	if links != "lo tun0" {
		t.Fatalf("the guest's links are %q, want only lo and tun0", links)
	}
	placeholder := mustSh(t, sess, `printf %s "$SECRET_TOKEN"`)
	if !strings.HasPrefix(placeholder, "mvp_") || strings.Contains(placeholder, pfx) {
		t.Fatalf("the guest's SECRET_TOKEN is %q, want a placeholder", placeholder)
	}
	if out := mustSh(t, sess, `echo "$SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE"; grep -c 'BEGIN CERTIFICATE' /etc/microvms/ca-bundle.pem`); !strings.HasPrefix(out, "/etc/microvms/ca-bundle.pem /etc/microvms/ca-bundle.pem /etc/microvms/ca-bundle.pem") {
		t.Fatalf("CA variables: %q", out)
	}

	// The allowed host, with the secret bound to it, over the system trust
	// store (curl reads /etc/ssl/certs/ca-certificates.crt).
	for i := 0; i < 2; i++ {
		if out := mustSh(t, sess, `curl -sS -f --max-time 20 -H "Authorization: Bearer $SECRET_TOKEN" https://api.allowed.test/`); out != "hello from api.allowed.test" {
			t.Fatalf("the allowed host answered %q", out)
		}
	}
	for _, a := range up.auths("api.allowed.test") {
		if a != "Bearer "+value {
			t.Fatalf("the bound host got Authorization %q, want the real value", a)
		}
	}
	if out := mustSh(t, sess, `curl -sS -f --max-time 20 -H "Authorization: Bearer $SECRET_TOKEN" https://other.allowed.test/`); out != "hello from other.allowed.test" {
		t.Fatalf("the other allowed host answered %q", out)
	}
	if got := up.auths("other.allowed.test"); len(got) != 1 || got[0] != "Bearer "+placeholder {
		t.Fatalf("the unbound host got %q, want the placeholder unchanged", got)
	}
	bound := len(up.auths("api.allowed.test"))

	// Each of these works on today's --egress; under the policy each is
	// refused.
	hostile := []struct{ name, script string }{
		{"a direct connection to an address not allowed", `curl -sS --max-time 10 http://93.184.216.34/`},
		{"the gateway's other ports", `curl -sS --max-time 10 http://10.0.2.2:8080/`},
		{"IPv6", `curl -6 -sS --max-time 10 'http://[2606:4700:4700::1111]/'`},
		{"UDP", `python3 -c 'import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.settimeout(3);s.sendto(b"x",("8.8.8.8",53));s.recv(10)'`},
		{"a raw socket", `python3 -c 'import socket;socket.socket(socket.AF_INET,socket.SOCK_RAW,socket.IPPROTO_ICMP)'`},
		{"a packet socket", `python3 -c 'import socket;socket.socket(socket.AF_PACKET,socket.SOCK_RAW,0)'`},
		{"DNS for a denied name", `getent hosts denied.test`},
		{"TLS whose SNI is allowed and whose Host is not", `curl -sS -f --max-time 10 -H 'Host: denied.test' https://api.allowed.test/`},
		{"no proxy variable", `env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY curl --noproxy '*' -sS --max-time 10 https://93.184.216.34/`},
		{"/etc/hosts edited", `cp /etc/hosts /tmp/hosts.saved; echo '93.184.216.34 api.allowed.test' > /etc/hosts; curl -sS -f --max-time 10 https://api.allowed.test/; rc=$?; cp /tmp/hosts.saved /etc/hosts; exit $rc`},
		{"CONNECT to an allowed host on a port not allowed", `curl -sS -f --max-time 10 -p -x http://api.allowed.test:80 https://api.allowed.test:8443/`},
		{"an allowed host on a port not allowed", `curl -sS -f --max-time 10 https://api.allowed.test:8443/`},
	}
	for _, h := range hostile {
		if code, out := sh(t, sess, h.script); code == 0 {
			t.Errorf("%s: exited 0 under the policy: %s", h.name, out)
		}
	}
	for _, q := range []struct{ name, typ string }{{"denied.test", "1"}, {"api.allowed.test", "16"}, {"c2VjcmV0.exfil.test", "16"}, {"api.allowed.test", "255"}} {
		out := mustSh(t, sess, "QN="+q.name+" QT="+q.typ+" python3 -c \"$(cat <<'PY'\n"+dnsQuery+"PY\n)\"")
		if out == "rcode=0 an=1" || !strings.HasSuffix(out, "an=0") {
			t.Errorf("DNS %s type %s was answered: %s", q.name, q.typ, out)
		}
	}
	if n := len(up.auths("api.allowed.test")); n != bound {
		t.Errorf("the bound host got %d more requests while the guest was refused", n-bound)
	}
	st := networkState(t, base, vm.MicrovmId)
	protos := map[string]bool{}
	for _, d := range st.Denied {
		protos[d.Proto] = true
	}
	// IPv6 never reaches the link: the guest has no IPv6 address or route
	// (curl -6 fails in the guest's own stack), and what would be sent is
	// dropped there (netpolicy's own tests count it).
	for _, p := range []string{"tcp", "udp", "dns"} {
		if !protos[p] {
			t.Errorf("no %s refusal listed: %+v", p, st.Denied)
		}
	}
	if !st.Enforced || st.Where != "emulator" || len(st.Secrets) != 1 || st.Secrets[0].Placeholder != placeholder {
		t.Errorf("network state: %+v", st)
	}
	raw, _ := json.Marshal(st)
	if strings.Contains(string(raw), pfx) {
		t.Fatal("the network state carries the secret's value")
	}
	for _, r := range s.Requests() {
		if strings.Contains(string(r.Body), pfx) || strings.Contains(fmt.Sprint(r.Header), pfx) {
			t.Fatalf("the emulator's request log carries the secret's value: %s %s", r.Method, r.Path)
		}
	}
	t.Logf("refused: %d connections and lookups, %d listed", st.DeniedCount, len(st.Denied))

	// The secret's value is nowhere the guest can read.
	out := mustSh(t, sess, "PFX="+pfx+" SFX="+sfx+" python3 -c \"$(cat <<'PY'\n"+secretScan+"PY\n)\"")
	if !strings.HasSuffix(out, "found=[]") {
		t.Fatalf("the guest found the secret's value: %s", out)
	}
	t.Logf("guest search: %s", out)
}

func randomHexT(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// A policy change mid-run closes an open connection to a host it removes
// before the change is answered, and the next connection is refused.
func TestNetworkPolicyChangeClosesRemovedHost(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	up := newStandIn(t, "api.allowed.test", "other.allowed.test")
	s, base := serve(t, Options{VMs: AgentdLauncher(agentdBin, nil), Network: up.options()})
	vm := launchUnderPolicy(t, s, base, cliapi.NetworkLaunch{
		Policy:  cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{hostRule("api.allowed.test"), hostRule("other.allowed.test")}},
		Secrets: []cliapi.SecretValue{},
	})
	defer terminate(t, base, vm.MicrovmId)
	sess := session(t, base, vm)

	held := make(chan struct {
		code int
		out  string
	}, 1)
	go func() {
		code, out := sh(t, sess, `curl -sS -N --max-time 60 https://other.allowed.test/hold`)
		held <- struct {
			code int
			out  string
		}{code, out}
	}()
	for i := 0; len(up.auths("other.allowed.test")) == 0; i++ {
		if i > 3000 { // bounded: about thirty seconds
			t.Fatal("the guest's held request never reached the stand-in")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if status, out := setPolicy(t, base, vm.MicrovmId, cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{hostRule("api.allowed.test")}}); status != 200 {
		t.Fatalf("set policy: %d %s", status, out)
	}
	answered := time.Since(start)
	select {
	case name := <-up.held:
		if name != "other.allowed.test" {
			t.Fatalf("the stand-in saw %s's connection end", name)
		}
	case <-time.After(30 * time.Second): // bounded, not a timing claim
		t.Fatal("the held connection to the removed host stayed open")
	}
	upstreamClosed := time.Since(start)
	var guestSaw time.Duration
	select {
	case r := <-held:
		guestSaw = time.Since(start)
		if r.code == 0 {
			t.Fatalf("the guest's held request ended cleanly: %s", r.out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the guest's held connection stayed open")
	}
	t.Logf("policy change answered after %v; the removed host's connection closed upstream after %v, in the guest after %v", answered, upstreamClosed, guestSaw)
	if code, out := sh(t, sess, `curl -sS -f --max-time 10 https://other.allowed.test/`); code == 0 {
		t.Fatalf("the removed host is still reachable: %s", out)
	}
	if out := mustSh(t, sess, `curl -sS -f --max-time 20 https://api.allowed.test/`); out != "hello from api.allowed.test" {
		t.Fatalf("the host the policy kept answered %q", out)
	}
	st := networkState(t, base, vm.MicrovmId)
	why := map[string]bool{}
	for _, d := range st.Denied {
		why[d.Why] = true
	}
	if !why["policy-changed"] || !why["host-not-allowed"] {
		t.Fatalf("refusals %+v, want policy-changed and host-not-allowed", st.Denied)
	}
	if st.Policy == nil || len(st.Policy.Allow) != 1 {
		t.Fatalf("policy in force: %+v", st.Policy)
	}
}

// The routes' refusals: a launch naming an id nothing registered never
// starts, a policy cannot be added to a MicroVM launched without one, and
// a bad policy is refused before anything changes.
func TestNetworkRoutesRefuse(t *testing.T) {
	s, base := serve(t, Options{})
	arn := s.AddImage("net-refusals")
	p := payload()
	body, _ := json.Marshal(cp.RunMicrovmRequest{ImageIdentifier: arn, RunHookPayload: &p})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/2025-09-09/microvms", strings.NewReader(string(body)))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(taxonomy.EmulatorLaunchNetworkHeader, "0123456789abcdef0123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || len(s.LiveMicrovms()) != 0 {
		t.Fatalf("RunMicrovm naming an unregistered launch network: %d, %d live", resp.StatusCode, len(s.LiveMicrovms()))
	}
	for _, bad := range []string{`{"policy":{"allow":[{"host":"bad host.test"}]},"secrets":[]}`, `{"policy":{"allow":[]},"secrets":[{"name":"1X","value":"v","hosts":["a.test"]}]}`, `not json`} {
		path := strings.Replace(taxonomy.EmulatorLaunchNetworkPath, "{launchId}", "0123456789abcdef0123", 1)
		if status, _, out := do(t, base, "PUT", path, bad, ""); status != 400 || strings.Contains(out, `"v"`) {
			t.Fatalf("registering %s: %d %s", bad, status, out)
		}
	}
	status, _, out := do(t, base, "POST", "/2025-09-09/microvms", string(body), auth)
	if status != 200 {
		t.Fatalf("RunMicrovm: %d %s", status, out)
	}
	var r cp.RunMicrovmResponse
	json.Unmarshal([]byte(out), &r)
	if st := networkState(t, base, r.MicrovmId); st.Enforced || st.Where != "none" {
		t.Fatalf("a MicroVM launched without a policy: %+v", st)
	}
	if status, out := setPolicy(t, base, r.MicrovmId, cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{}}); status != 409 {
		t.Fatalf("adding a policy after launch: %d %s", status, out)
	}
	if status, _, _ := do(t, base, "GET", strings.Replace(taxonomy.EmulatorNetworkPath, "{microvmId}", "microvm-nope", 1), "", ""); status != 404 {
		t.Fatalf("an unknown MicroVM's network: %d", status)
	}
	for _, r := range s.Requests() {
		if strings.HasPrefix(r.Path, "/_microvms/") {
			t.Fatalf("a network route was recorded: %s", r.Path)
		}
	}
}

// As an ordinary user: a guest under a policy where /dev/net/tun is open
// to that user, else a refusal naming it.
func TestNetworkPolicyRootless(t *testing.T) {
	if os.Getenv("EMULATOR_NETWORK_ROOTLESS_CHILD") == "1" {
		if err := CheckNetworkPolicy(); err != nil {
			if !strings.Contains(err.Error(), "/dev/net/tun") {
				t.Fatalf("the refusal does not name /dev/net/tun: %v", err)
			}
			up := newStandIn(t, "api.allowed.test")
			s, base := serve(t, Options{VMs: AgentdLauncher(agentdBin, nil), Network: up.options()})
			vm := launchRefused(t, s, base)
			if !strings.Contains(vm, "/dev/net/tun") {
				t.Fatalf("the launch died %q, want the missing /dev/net/tun named", vm)
			}
			fmt.Println("rootless-network-refused")
			return
		}
		up := newStandIn(t, "api.allowed.test")
		s, base := serve(t, Options{VMs: AgentdLauncher(agentdBin, nil), Network: up.options()})
		vm := launchUnderPolicy(t, s, base, cliapi.NetworkLaunch{Policy: cliapi.NetworkPolicy{Allow: []cliapi.NetworkRule{hostRule("api.allowed.test")}}, Secrets: []cliapi.SecretValue{}})
		defer terminate(t, base, vm.MicrovmId)
		sess := session(t, base, vm)
		if out := mustSh(t, sess, `curl -sS -f --max-time 20 https://api.allowed.test/`); out != "hello from api.allowed.test" {
			t.Fatalf("the allowed host answered %q", out)
		}
		if code, out := sh(t, sess, `curl -sS --max-time 10 http://93.184.216.34/`); code == 0 {
			t.Fatalf("a denied address answered: %s", out)
		}
		fmt.Println("rootless-network-checked")
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to become an unprivileged user")
	}
	rerunAsNobody(t, "TestNetworkPolicyRootless", "rootless-network-", "EMULATOR_NETWORK_ROOTLESS_CHILD=1")
}

// launchRefused launches under an empty policy and answers the stateReason
// of the launch that died.
func launchRefused(t *testing.T, s *Server, base string) string {
	t.Helper()
	b := make([]byte, 16)
	rand.Read(b)
	id := hex.EncodeToString(b)
	path := strings.Replace(taxonomy.EmulatorLaunchNetworkPath, "{launchId}", id, 1)
	if status, _, out := do(t, base, "PUT", path, `{"policy":{"allow":[]},"secrets":[]}`, ""); status != 204 {
		t.Fatalf("registering: %d %s", status, out)
	}
	arn := s.AddImage(fmt.Sprintf("net-%d", time.Now().UnixNano()))
	p := payload()
	body, _ := json.Marshal(cp.RunMicrovmRequest{ImageIdentifier: arn, RunHookPayload: &p})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/2025-09-09/microvms", strings.NewReader(string(body)))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(taxonomy.EmulatorLaunchNetworkHeader, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r cp.RunMicrovmResponse
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&r) != nil {
		t.Fatalf("RunMicrovm: %d", resp.StatusCode)
	}
	g := waitState(t, base, r.MicrovmId, cp.MicrovmStateTERMINATED)
	if g.StateReason == nil {
		return ""
	}
	return *g.StateReason
}

// Catches: a sandbox CA not appended to an image's own bundles (or
// appended twice to one file two paths lead to), an absolute symlink in
// the image resolved on the host (the host's bundle written), and a guest
// under a policy whose resolv.conf is the image's.
func TestImageRootGetsTheSandboxCA(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	hostBundle, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	image := filepath.Join(t.TempDir(), "image")
	for _, d := range []string{"etc/ssl/certs", "etc/pki/tls/certs"} {
		if err := os.MkdirAll(filepath.Join(image, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(image, "etc/ssl/certs/ca-certificates.crt"), []byte("IMAGE BUNDLE"), 0o644)
	os.Symlink("certs/ca-certificates.crt", filepath.Join(image, "etc/ssl/cert.pem"))
	os.Symlink("/etc/ssl/certs/ca-certificates.crt", filepath.Join(image, "etc/pki/tls/certs/ca-bundle.crt"))
	os.WriteFile(filepath.Join(image, "etc/resolv.conf"), []byte("nameserver 192.0.2.53\n"), 0o644)
	n, err := netpolicy.New(netpolicy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := AgentdLauncher(testbin.Agentd(t), nil)(t.Context(), GuestSpec{MicrovmID: "microvm-image-ca", HookPort: taxonomy.DefaultAgentPort, RootDir: image, Network: n})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	body, _ := json.Marshal(map[string]string{"runHookPayload": payload()})
	if reason := postRunHook(t.Context(), g.RoundTripper(proxyTransport), "127.0.0.1:9000", body, 10*time.Second); reason != "" {
		t.Fatal(reason)
	}
	sess, err := client.Direct("http://127.0.0.1:9000", agentToken, client.WithHTTPClient(&http.Client{Transport: g.RoundTripper(proxyTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		var b bytes.Buffer
		if _, err := sess.ReadFile(t.Context(), p, &b, client.LineRange{}); err != nil {
			t.Fatalf("reading %s in the guest: %v", p, err)
		}
		return b.String()
	}
	ca := string(n.CACertPEM())
	want := "IMAGE BUNDLE\n" + ca
	for _, p := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/cert.pem", "/etc/pki/tls/certs/ca-bundle.crt", localvm.GuestCABundlePath} {
		if got := read(p); got != want {
			t.Errorf("%s in the guest is %q, want the image's bundle and the CA once", p, got)
		}
	}
	if got := read("/etc/resolv.conf"); got != "nameserver 10.0.2.2\n" {
		t.Errorf("resolv.conf %q", got)
	}
	if b, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); !bytes.Equal(b, hostBundle) {
		t.Fatal("the host's bundle changed")
	}
	if b, _ := os.ReadFile(filepath.Join(image, "etc/ssl/certs/ca-certificates.crt")); string(b) != "IMAGE BUNDLE" {
		t.Fatalf("the image's bundle changed: %q", b)
	}
}
