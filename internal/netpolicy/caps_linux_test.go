//go:build linux

package netpolicy

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const probeRole = "NETPOLICY_CAPS_PROBE"

// networkPowers tries what a guest would need to route around the tun:
// a raw IP socket, a packet socket, a tun of its own, and bringing an
// interface down. It answers what each got.
func networkPowers() map[string]error {
	out := map[string]error{}
	try := func(what string, domain, typ, proto int) {
		fd, err := unix.Socket(domain, typ, proto)
		if err == nil {
			unix.Close(fd)
		}
		out[what] = err
	}
	try("raw", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	try("packet", unix.AF_PACKET, unix.SOCK_RAW, 0)
	f, err := OpenTun("tunprobe")
	if err == nil {
		f.Close()
	}
	out["tun"] = err
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err == nil {
		ifr, _ := unix.NewIfreq("lo")
		ifr.SetUint16(0) // flags: down
		err = unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
		unix.Close(fd)
	}
	out["ifdown"] = err
	return out
}

func probeReport(m map[string]error) string {
	var b strings.Builder
	for _, k := range []string{"raw", "packet", "tun", "ifdown"} {
		fmt.Fprintf(&b, "%s=%v\n", k, m[k])
	}
	return b.String()
}

// TestGuestHoldsNoNetworkCapability checks the claim the seam rests on: a
// network namespace made with the guest init's user namespace (as
// guestCloneFlags does) is that namespace's to configure, and a process in
// a user namespace nested inside it (as the guest's daemon and commands
// run, nestedAttr) holds neither CAP_NET_RAW nor CAP_NET_ADMIN over it, even
// as its root. The outer probe doing the same things succeeds, so the
// inner refusals are the nesting's, not the host's. Catches: a runtime that
// starts guest commands in the init's own user namespace.
func TestGuestHoldsNoNetworkCapability(t *testing.T) {
	switch os.Getenv(probeRole) {
	case "inner":
		fmt.Print(probeReport(networkPowers()))
		return
	case "outer":
		fmt.Print("outer\n" + probeReport(networkPowers()))
		cmd := exec.Command(os.Args[0], "-test.run=^TestGuestHoldsNoNetworkCapability$")
		cmd.Env = append(os.Environ(), probeRole+"=inner")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}}
		out, err := cmd.CombinedOutput()
		fmt.Print("inner\n" + string(out))
		if err != nil {
			fmt.Printf("inner failed: %v\n", err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("mapping the probe's root onto host root needs root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGuestHoldsNoNetworkCapability$", "-test.v")
	cmd.Env = append(os.Environ(), probeRole+"=outer")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}}
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	outer, inner, ok := strings.Cut(out, "inner\n")
	if !ok {
		t.Fatalf("no inner report:\n%s", out)
	}
	for _, k := range []string{"raw", "packet", "tun", "ifdown"} {
		if !strings.Contains(outer, k+"=<nil>") {
			t.Fatalf("the init's namespace could not %s, so the inner refusals prove nothing:\n%s", k, out)
		}
		if !lineHas(inner, k+"=", "operation not permitted") {
			t.Errorf("a nested guest process was not refused %s:\n%s", k, inner)
		}
	}
}

// lineHas reports whether a line of s starts with prefix and contains sub.
func lineHas(s, prefix, sub string) bool {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) && strings.Contains(l, sub) {
			return true
		}
	}
	return false
}
