//go:build linux

package localvm

// Egress: a local guest reaches outward through slirp4netns, never the
// host's loopback.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/internal/testvm"
)

// Catches: a guest without egress that can reach anything outside itself;
// an egress guest that shares the host's network namespace or is handed
// the host's loopback (it would reach the emulator's control plane and
// every loopback service: the listener on 127.0.0.1 here); and an egress
// launch that is not given a way out at all (it must reach a listener in a
// network namespace this test made, over a veth pair: the only non-loopback
// address a test may dial).
func TestGuestEgressReachesOutButNeverTheHostsLoopback(t *testing.T) {
	if err := CheckEgress(); err != nil {
		t.Skip(err)
	}
	loopback := listenCounting(t, "tcp", "127.0.0.1:0")
	outside, outsideAddr := outsideListener(t)
	dial := func(addr string) string {
		host, port, _ := net.SplitHostPort(addr)
		return "bash -c 'exec 3<>/dev/tcp/" + host + "/" + port + "'"
	}

	_, closed := directGuest(t, GuestSpec{})
	for _, addr := range []string{loopback.addr, outsideAddr} {
		if code, out := testvm.Sh(t, closed, dial(addr)); code == 0 {
			t.Errorf("a guest without egress connected to %s: %s", addr, out)
		}
	}

	_, sess := directGuest(t, GuestSpec{Egress: true})
	if code, out := testvm.Sh(t, sess, dial(loopback.addr)); code == 0 {
		t.Errorf("a guest with egress reached the host's loopback listener %s: %s", loopback.addr, out)
	}
	if outsideAddr != "" {
		if code, out := testvm.Sh(t, sess, dial(outsideAddr)); code != 0 {
			t.Errorf("a guest with egress could not reach %s: %d %s", outsideAddr, code, out)
		}
		select {
		case <-outside:
		case <-time.After(10 * time.Second):
			t.Error("the outside listener never saw the egress guest's connection")
		}
	}
	select {
	case <-loopback.accepted:
		t.Error("the host's loopback listener accepted a connection from a guest")
	default:
	}
}

type countingListener struct {
	addr     string
	accepted chan struct{}
}

func listenCounting(t *testing.T, network, addr string) countingListener {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return countingListener{addr: l.Addr().String(), accepted: acceptAll(l)}
}

func acceptAll(l net.Listener) chan struct{} {
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- struct{}{}:
			default:
			}
			c.Close()
		}
	}()
	return accepted
}

// outsideListener makes a network namespace of the test's own, joined to
// the host's by a veth pair on a private /30, and listens inside it: an
// address "outside" the host that a test may dial. It needs root and ip(8);
// without them it returns "" and the caller checks only refusals.
func outsideListener(t *testing.T) (chan struct{}, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, ""
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, ""
	}
	n := strconv.Itoa(os.Getpid() % 100000)
	ns, hostIf, nsIf := "mvtest-"+n, "mvh"+n, "mvg"+n
	// 10.213.x.y/30 from the pid: two concurrent test processes never share
	// a subnet.
	third, fourth := (os.Getpid()/64)%256, (os.Getpid()%64)*4
	hostAddr := fmt.Sprintf("10.213.%d.%d", third, fourth+1)
	nsAddr := fmt.Sprintf("10.213.%d.%d", third, fourth+2)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command(ip, "netns", "del", ns).Run() })
	run("link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	t.Cleanup(func() { _ = exec.Command(ip, "link", "del", hostIf).Run() })
	run("link", "set", nsIf, "netns", ns)
	run("addr", "add", hostAddr+"/30", "dev", hostIf)
	run("link", "set", hostIf, "up")
	run("-n", ns, "addr", "add", nsAddr+"/30", "dev", nsIf)
	run("-n", ns, "link", "set", nsIf, "up")
	run("-n", ns, "link", "set", "lo", "up")
	nsFile, err := os.Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsFile.Close()
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread that enters the namespace is never handed back.
		runtime.LockOSThread()
		if err := unix.Setns(int(nsFile.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		l, err := net.Listen("tcp", nsAddr+":0")
		ch <- result{l, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.l.Close() })
	return acceptAll(r.l), r.l.Addr().String()
}

// Catches: an egress launch that falls back to the host's network (or to
// no network at all, silently) when slirp4netns is missing, instead of refusing
// with the package to install.
func TestEgressWithoutSlirpIsRefusedNamingThePackage(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := AgentdLauncher(agentdBin, nil)(t.Context(), GuestSpec{MicrovmID: "mv-no-slirp", HookPort: 9000, Egress: true})
	var ie *IsolationError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "slirp4netns") {
		t.Fatalf("an egress launch without slirp4netns: %v, want an *IsolationError naming the slirp4netns package", err)
	}
}
