//go:build linux

package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/microvms/microvms/localvm"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testbin"
	"github.com/microvms/microvms/internal/testvm"
)

// The tests below run real guests: agentd confined by AgentdLauncher,
// reached only through the emulator's endpoint proxy. They need what the
// launcher needs; a host without it is a failure here, not a skip, except
// for the refusal test, which makes such a host on purpose.

// isolated starts an emulator with confined guests.
func isolated(t *testing.T) (*Server, string) {
	t.Helper()
	if err := CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	return serve(t, Options{VMs: AgentdLauncher(agentdBin, nil)})
}

const egressARN = "arn:aws:lambda:us-east-1:aws:network-connector:aws-network-connector:INTERNET_EGRESS"

// launchGuest runs a MicroVM (with egress when asked) and waits for RUNNING.
func launchGuest(t *testing.T, s *Server, base string, egress bool) cp.GetMicrovmResponse {
	t.Helper()
	arn := s.AddImage(fmt.Sprintf("iso-%d", time.Now().UnixNano()))
	p := testvm.Payload()
	req := cp.RunMicrovmRequest{ImageIdentifier: arn, RunHookPayload: &p}
	if egress {
		req.EgressNetworkConnectors = &[]string{egressARN}
	}
	body, _ := json.Marshal(req)
	status, _, out := do(t, base, "POST", "/2025-09-09/microvms", string(body), auth)
	if status != 200 {
		t.Fatalf("RunMicrovm: %d %s", status, out)
	}
	var r cp.RunMicrovmResponse
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return waitState(t, base, r.MicrovmId, cp.MicrovmStateRUNNING)
}

// session is a client session through the MicroVM's endpoint proxy.
func session(t *testing.T, base string, vm cp.GetMicrovmResponse) *client.Session {
	t.Helper()
	minter := client.TokenMinterFunc(func(ctx context.Context, req client.MintRequest) (client.ProxyToken, error) {
		tok := mintToken(t, base, vm.MicrovmId, 60, `[{"allPorts":{}}]`)
		return client.NewProxyToken(map[string]string{taxonomy.ProxyAuthHeader: tok}), nil
	})
	sess, err := client.Proxied("http://"+vm.Endpoint, testvm.AgentToken, minter)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func terminate(t *testing.T, base, id string) {
	t.Helper()
	if status, _, out := do(t, base, "DELETE", "/2025-09-09/microvms/"+id, "", auth); status != 200 {
		t.Fatalf("terminate: %d %s", status, out)
	}
	waitState(t, base, id, cp.MicrovmStateTERMINATED)
}

// stateDirOf is the state directory on the host of the MicroVM id whose
// guest runs host process pid: the directory is handed to the guest's
// host uid, which no other guest shares (other test processes on the
// machine may run MicroVMs with the same id).
func stateDirOf(t *testing.T, id string, pid int) string {
	t.Helper()
	uid := hostUIDOf(t, pid)
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "emulator-*-"+id+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range m {
		var st syscall.Stat_t
		if syscall.Stat(d, &st) == nil && int(st.Uid) == uid {
			out = append(out, d)
		}
	}
	if len(out) != 1 {
		t.Fatalf("state directories of %s owned by uid %d: %v, want one", id, uid, out)
	}
	return out[0]
}

// hostUIDOf is the real uid of host process pid.
func hostUIDOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return uid
		}
	}
	t.Fatalf("no Uid line for %d", pid)
	return -1
}

// startSleeper starts a private copy of sleep in the guest, in a session of
// its own, and returns its host pid: the host can find exactly this
// process by its name.
func startSleeper(t *testing.T, sess *client.Session, prefix string) (string, int) {
	t.Helper()
	name := prefix + strconv.FormatInt(time.Now().UnixNano(), 36)
	testvm.MustSh(t, sess, "cp \"$(command -v sleep)\" /tmp/"+name+" && (setsid /tmp/"+name+" 1000 </dev/null >/dev/null 2>&1 &) ; sleep 0.2")
	pids := procsNamed(t, name)
	if len(pids) != 1 {
		t.Fatalf("processes named %s on the host: %v, want the guest's one", name, pids)
	}
	return name, pids[0]
}

// Catches: a guest whose writes reach the host's /tmp or /etc (no private
// root, or the host's directories bound writable), a terminate that leaves
// the writes behind, a guest that can read the host's home or /root (the
// host's tree still reachable after the pivot), and the host's /proc shown
// to the guest.
func TestGuestFilesystemIsItsOwn(t *testing.T) {
	s, base := isolated(t)
	vm := launchGuest(t, s, base, false)
	sess := session(t, base, vm)
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)

	// Secrets the host holds where a guest must not look.
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	var secrets []string
	dirs := []string{home}
	if os.Geteuid() == 0 {
		dirs = append(dirs, "/root")
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, "emulator-isolation-secret-"+nonce)
		if err := os.WriteFile(p, []byte("host secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
		secrets = append(secrets, p)
	}
	for _, p := range secrets {
		if code, out := testvm.Sh(t, sess, "cat "+p); code == 0 || strings.Contains(out, "host secret") {
			t.Errorf("the guest read the host's %s: %d %q", p, code, out)
		}
	}
	if out := testvm.MustSh(t, sess, "ls -A /root /home | tr '\\n' ' '"); strings.Contains(out, "emulator-isolation-secret") {
		t.Errorf("the guest's /root or /home lists the host's files: %s", out)
	}

	// Writes stay in the guest.
	files := []string{"/tmp/x-" + nonce, "/etc/x-" + nonce}
	for _, f := range files {
		testvm.MustSh(t, sess, "echo guest > "+f)
		if got := testvm.MustSh(t, sess, "cat "+f); got != "guest" {
			t.Fatalf("the guest reads back %q from %s", got, f)
		}
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the guest's %s appeared on the host (%v)", f, err)
		}
	}
	// The host's system directories are bound read-only: guest root is not
	// host root, and a write to /usr is refused, never landing on the host.
	if code, out := testvm.Sh(t, sess, "echo guest > /usr/x-"+nonce); code == 0 || !strings.Contains(out, "Read-only file system") {
		t.Errorf("a guest write to /usr: %d %q, want a read-only refusal", code, out)
	}
	if _, err := os.Stat("/usr/x-" + nonce); !errors.Is(err, os.ErrNotExist) {
		os.Remove("/usr/x-" + nonce)
		t.Errorf("a guest write to /usr reached the host's /usr (%v)", err)
	}
	// The writable layer is a tmpfs in the guest's own mount namespace: its
	// files are nowhere on the host's disk, not even in the state directory.
	_, sleeper := startSleeper(t, sess, "fs-")
	state := stateDirOf(t, vm.MicrovmId, sleeper)
	_ = filepath.WalkDir(state, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), nonce) {
			t.Errorf("the guest's write is on the host's disk at %s", p)
		}
		return nil
	})

	// Its own /proc: PID 1 is the guest's init, and only a handful of
	// processes exist.
	if got := testvm.MustSh(t, sess, "tr '\\0' ' ' < /proc/1/cmdline"); !strings.Contains(got, localvm.GuestInitArg0) {
		t.Errorf("the guest's PID 1 is %q, want its init", got)
	}
	if n, _ := strconv.Atoi(testvm.MustSh(t, sess, "ls /proc | grep -c '^[0-9]'")); n == 0 || n > 10 {
		t.Errorf("the guest sees %d processes in /proc, want its own few", n)
	}
	// No host sockets: the guest's /run and /var/run are its own.
	if code, _ := testvm.Sh(t, sess, "test -e /var/run/docker.sock || test -e /run/docker.sock"); code == 0 {
		t.Error("a Docker socket is visible in the guest")
	}
	// Catches the init handing its lifeline to the emulator (fd 3, a pipe)
	// down to the daemon and so to every guest command. The guest cannot
	// read the init's descriptors at all (it is not dumpable), so the host
	// compares them.
	if code, out := testvm.Sh(t, sess, "readlink /proc/1/fd/3"); code == 0 {
		t.Errorf("the guest reads its init's descriptors: %s", out)
	}
	init := testvm.GuestInitOf(t, localvm.GuestInitArg0)
	lifeline, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", init))
	if err != nil || !strings.HasPrefix(lifeline, "pipe:") {
		t.Fatalf("the init's fd 3 is %q (%v), want its lifeline pipe", lifeline, err)
	}
	mine := fmt.Sprintf("%d", os.Getpid())
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, f := range fds {
		if pid := strings.Split(f, "/")[2]; pid == mine || pid == strconv.Itoa(init) {
			continue
		}
		if l, _ := os.Readlink(f); l == lifeline {
			t.Errorf("the init's lifeline reached %s", f)
		}
	}
	if code, out := testvm.Sh(t, sess, "test ! -e /etc/shadow && test ! -e /etc/ssh"); code != 0 {
		t.Errorf("the guest's /etc carries the host's secrets: %s", out)
	}

	terminate(t, base, vm.MicrovmId)
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("terminate left the state directory %s (%v)", state, err)
	}
}

// Catches: a guest sharing the host's UTS namespace or machine-id, identity
// repair switched off in the emulator, and (the one that matters) a repair
// that reaches the host's /etc/machine-id or hostname.
func TestGuestIdentityIsItsOwnAndTheHostsIsUntouched(t *testing.T) {
	hostID, err := os.ReadFile("/etc/machine-id")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	hostName, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	s, base := isolated(t)
	vm := launchGuest(t, s, base, false)
	sess := session(t, base, vm)

	h, err := sess.Health(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !h.IdentityRepaired || h.IdentityDegraded {
		t.Errorf("identity repair in the guest: repaired %v degraded %v, want it to run and succeed", h.IdentityRepaired, h.IdentityDegraded)
	}
	name := testvm.MustSh(t, sess, "hostname")
	// microvm-<12 hex> is identity repair's name; the init's own is the
	// MicroVM id, so this also catches repair not running.
	if name == hostName || !regexp.MustCompile(`^microvm-[0-9a-f]{12}$`).MatchString(name) {
		t.Errorf("guest hostname %q (host %q): want its own, from identity repair", name, hostName)
	}
	guestID := testvm.MustSh(t, sess, "cat /etc/machine-id")
	if len(guestID) != 32 || guestID == strings.TrimSpace(string(hostID)) {
		t.Errorf("guest machine-id %q (host %q): want its own", guestID, strings.TrimSpace(string(hostID)))
	}
	terminate(t, base, vm.MicrovmId)

	afterID, err := os.ReadFile("/etc/machine-id")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	afterName, _ := os.Hostname()
	if !bytes.Equal(hostID, afterID) || afterName != hostName {
		t.Fatalf("the host's identity changed: machine-id %q -> %q, hostname %q -> %q", hostID, afterID, hostName, afterName)
	}
}

// Catches: a terminate that kills the daemon but not what the guest left
// running in a session of its own (the old session-id sweep misses a
// setsid grandchild), and a state directory left behind.
func TestTerminateLeavesNoGuestProcess(t *testing.T) {
	s, base := isolated(t)
	vm := launchGuest(t, s, base, false)
	sess := session(t, base, vm)
	name := "sleeper-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// A private copy of sleep, so the host can find exactly this process.
	testvm.MustSh(t, sess, "cp \"$(command -v sleep)\" /tmp/"+name+" && (setsid /tmp/"+name+" 1000 </dev/null >/dev/null 2>&1 &) ; sleep 0.2")
	pids := procsNamed(t, name)
	if len(pids) != 1 {
		t.Fatalf("processes named %s on the host: %v, want the guest's one", name, pids)
	}
	terminate(t, base, vm.MicrovmId)
	for i := 0; i < 500; i++ { // bounded: about five seconds
		if len(procsNamed(t, name)) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the guest's setsid grandchild %v outlived terminate", procsNamed(t, name))
}

// procsNamed lists live host processes whose comm is name.
func procsNamed(t *testing.T, name string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err == nil && strings.TrimSpace(string(b)) == name[:min(len(name), 15)] && procState(pid) != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// Catches: a suspend or resume that restarts the guest (its writes would be
// gone) or loses its state directory.
func TestSuspendResumeKeepsTheGuestsFiles(t *testing.T) {
	s, base := isolated(t)
	vm := launchGuest(t, s, base, false)
	sess := session(t, base, vm)
	testvm.MustSh(t, sess, "echo kept > /tmp/kept && echo kept > /root/kept")
	if status, _, out := do(t, base, "POST", "/2025-09-09/microvms/"+vm.MicrovmId+"/suspend", "", auth); status != 200 {
		t.Fatalf("suspend: %d %s", status, out)
	}
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateSUSPENDED)
	if status, _, out := do(t, base, "POST", "/2025-09-09/microvms/"+vm.MicrovmId+"/resume", "", auth); status != 200 {
		t.Fatalf("resume: %d %s", status, out)
	}
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	if got := testvm.MustSh(t, sess, "cat /tmp/kept /root/kept"); got != "kept\nkept" {
		t.Fatalf("after resume the guest reads %q", got)
	}
}

// BenchmarkLaunchToRunning measures RunMicrovm to RUNNING, polling
// GetMicrovm every millisecond: "isolated" is a confined guest (namespaces,
// overlay root, agentd listening, run hook answered), and "unisolated" the
// old plain host process, the baseline measured in the same run.
// Terminate is outside the timing.
func BenchmarkLaunchToRunning(b *testing.B) {
	if err := CheckIsolation(); err != nil {
		b.Skip(err)
	}
	var logs io.Writer
	if os.Getenv("EMULATOR_BENCH_LOGS") != "" {
		logs = os.Stderr
	}
	b.Run("isolated", func(b *testing.B) { benchLaunch(b, AgentdLauncher(agentdBin, logs)) })
	b.Run("unisolated", func(b *testing.B) { benchLaunch(b, UnsafeUnisolatedAgentdLauncher(agentdBin, logs)) })
}

func benchLaunch(b *testing.B, l Launcher) {
	s := New(Options{VMs: l})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	arn := s.AddImage("bench")
	p := testvm.Payload()
	body, _ := json.Marshal(cp.RunMicrovmRequest{ImageIdentifier: arn, RunHookPayload: &p})
	call := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	for b.Loop() {
		status, out := call("POST", "/2025-09-09/microvms", string(body))
		if status != 200 {
			b.Fatalf("RunMicrovm: %d %s", status, out)
		}
		var r cp.RunMicrovmResponse
		_ = json.Unmarshal(out, &r)
		for i := 0; ; i++ {
			if i > 20000 { // bounded: about twenty seconds
				b.Fatal("never RUNNING")
			}
			_, out := call("GET", "/2025-09-09/microvms/"+r.MicrovmId, "")
			var g cp.GetMicrovmResponse
			_ = json.Unmarshal(out, &g)
			if g.State == cp.MicrovmStateRUNNING {
				break
			}
			if g.State == cp.MicrovmStateTERMINATED {
				b.Fatalf("launch died: %s", deref(g.StateReason))
			}
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		call("DELETE", "/2025-09-09/microvms/"+r.MicrovmId, "")
		b.StartTimer()
	}
}

// Catches: an image root that is written through (the image's files changed
// by a guest, so the next MicroVM of the image starts from its
// predecessor's leftovers), an image root ignored in favour of the host's
// directories, and the host's tree reachable from an image guest. The
// image is one marker file and a static agentd, reached the way the
// emulator reaches any guest.
func TestImageRootIsTheLowerLayer(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	dir := t.TempDir()
	static := testbin.Agentd(t) // CGO off: static, so it runs under any image root
	image := filepath.Join(dir, "image")
	if err := os.MkdirAll(filepath.Join(image, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(image, "image-marker"), []byte("from the image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := AgentdLauncher(static, nil)(t.Context(), GuestSpec{MicrovmID: "microvm-image-root", HookPort: taxonomy.DefaultAgentPort, RootDir: image})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	if g.Dial == nil {
		t.Fatal("a guest without egress must be reached from inside its network namespace")
	}
	body, _ := json.Marshal(map[string]string{"runHookPayload": testvm.Payload()})
	if reason := postRunHook(t.Context(), g.RoundTripper(proxyTransport), "127.0.0.1:9000", body, 10*time.Second); reason != "" {
		t.Fatal(reason)
	}
	sess, err := client.Direct("http://127.0.0.1:9000", testvm.AgentToken, client.WithHTTPClient(&http.Client{Transport: g.RoundTripper(proxyTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := sess.ReadFile(t.Context(), "/image-marker", &got, client.LineRange{}); err != nil || got.String() != "from the image\n" {
		t.Fatalf("reading the image's file in the guest: %q %v", got.String(), err)
	}
	if err := sess.WriteFile(t.Context(), "/image-marker", strings.NewReader("guest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sess.WriteFile(t.Context(), "/tmp/new", strings.NewReader("guest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(image, "image-marker")); string(b) != "from the image\n" {
		t.Errorf("the guest wrote through to the image: %q", b)
	}
	if _, err := os.Stat(filepath.Join(image, "tmp", "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a guest file appeared in the image (%v)", err)
	}
	// The host's tree is not under an image root either.
	var host bytes.Buffer
	if _, err := sess.ReadFile(t.Context(), "/usr/bin/env", &host, client.LineRange{}); err == nil {
		t.Error("the host's /usr/bin/env is readable in a guest built from an image")
	}
}

// Catches: a terminate of a suspended (frozen) guest that hangs or leaves
// the frozen processes and the state directory behind.
func TestTerminateWhileSuspendedLeavesNothing(t *testing.T) {
	s, base := isolated(t)
	vm := launchGuest(t, s, base, false)
	sess := session(t, base, vm)
	name, sleeper := startSleeper(t, sess, "frozen-")
	state := stateDirOf(t, vm.MicrovmId, sleeper)
	if status, _, out := do(t, base, "POST", "/2025-09-09/microvms/"+vm.MicrovmId+"/suspend", "", auth); status != 200 {
		t.Fatalf("suspend: %d %s", status, out)
	}
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateSUSPENDED)
	pids := procsNamed(t, name)
	if len(pids) != 1 {
		t.Fatalf("processes named %s on the host: %v, want the guest's one", name, pids)
	}
	// A stop is delivered when the process is next scheduled.
	waitProc(t, pids[0], "stopped", func(s string) bool { return s == "T" })
	terminate(t, base, vm.MicrovmId)
	for i := 0; i < 500 && len(procsNamed(t, name)) > 0; i++ { // bounded: about five seconds
		time.Sleep(10 * time.Millisecond)
	}
	if p := procsNamed(t, name); len(p) != 0 {
		t.Fatalf("the frozen guest's process %v outlived terminate", p)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("terminate left the state directory %s (%v)", state, err)
	}
}

// Catches: a host descriptor inherited without close-on-exec (here a
// directory of the host's) reaching the guest, where /proc/<pid>/fd/N
// would lead out of its root; a writable /proc/sys or SysRq trigger (host
// kernel settings); and capabilities that let guest root reach
// the host (a device node for its disk, files opened by handle) left in
// the guest's bounding set.
func TestGuestHoldsNoHostDescriptorAndNoEscapeCapabilities(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "escape-marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0) // no O_CLOEXEC: inherited by children
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	s, base := isolated(t)
	vm := launchGuest(t, s, base, false)
	sess := session(t, base, vm)
	if out := testvm.MustSh(t, sess, `for f in /proc/[0-9]*/fd/*; do [ -e "$f/escape-marker" ] && echo "open: $f"; done; true`); out != "" {
		t.Errorf("a guest process holds the host's directory: %s", out)
	}

	// Probed with test -w (access(2) answers EROFS), never by writing: a
	// broken guard would otherwise change this machine's kernel settings.
	for _, p := range []string{"/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches"} {
		if code, _ := testvm.Sh(t, sess, "test -w "+p); code == 0 {
			t.Errorf("the guest can write the host kernel's %s", p)
		}
	}
	if code, out := testvm.Sh(t, sess, "mknod /tmp/disk b 1 0"); code == 0 {
		t.Errorf("guest root made a block device node: %s", out)
	}
	bnd := testvm.MustSh(t, sess, "grep CapBnd /proc/self/status | cut -f2")
	caps, err := strconv.ParseUint(bnd, 16, 64)
	if err != nil {
		t.Fatalf("CapBnd %q: %v", bnd, err)
	}
	for _, c := range []uint{2 /* CAP_DAC_READ_SEARCH */, 16 /* CAP_SYS_MODULE */, 25 /* CAP_SYS_TIME */, 27 /* CAP_MKNOD */} {
		if caps&(1<<c) != 0 {
			t.Errorf("capability %d is in the guest's bounding set %s", c, bnd)
		}
	}
	if caps&(1<<21) == 0 { // CAP_SYS_ADMIN: identity repair's sethostname and bind mount
		t.Errorf("CAP_SYS_ADMIN was dropped; identity repair needs it (bounding set %s)", bnd)
	}
}
