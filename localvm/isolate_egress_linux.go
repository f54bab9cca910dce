//go:build linux

package localvm

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// A guest with egress keeps its own network namespace; slirp4netns (the
// package of the same name), a user-mode network stack, gives that
// namespace a tap interface whose traffic leaves as ordinary sockets of the
// host. --disable-host-loopback refuses every connection to the host's
// 127.0.0.1 (the emulator's control plane, and anything else listening
// there), and nothing on the host is forwarded into the guest. slirp4netns
// runs sandboxed (its own mount namespace, its capabilities dropped) and
// under its own seccomp filter. Without it, egress is refused; it never
// falls back to the host's network namespace.
//
// pasta (passt) was the other candidate; it drops its privileges before it
// joins the target namespaces, so as root it cannot join a guest owned by
// another uid, and as that uid it cannot open a root-only /dev/net/tun.

const (
	egressTool    = "slirp4netns"
	egressPackage = "slirp4netns"
)

// CheckEgress reports whether this host can give a local guest egress:
// slirp4netns must be on PATH. The error is an *IsolationError naming the
// package.
func CheckEgress() error {
	_, err := egressPath()
	return err
}

func egressPath() (string, error) {
	p, err := exec.LookPath(egressTool)
	if err != nil {
		return "", isolationError(fmt.Sprintf("%s, the user-mode network a local guest's egress runs on (install the %s package: apt-get install %s, or dnf install %s)",
			egressTool, egressPackage, egressPackage, egressPackage), err)
	}
	// slirp4netns opens the tun device as this user; some hosts make it
	// root's alone (mode 0600), where egress cannot work.
	tun, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return "", isolationError("read-write access to /dev/net/tun, which slirp4netns needs for a guest's egress (most distributions make it mode 0666; here it is not open to this user)", err)
	}
	tun.Close()
	return p, nil
}

// startEgress attaches slirp4netns to the network namespace of pid (the
// guest's init) and returns once that namespace's interface is configured;
// stderr gets what slirp4netns says. stop ends it.
func startEgress(pid int, stderr io.Writer) (stop func(), err error) {
	path, err := egressPath()
	if err != nil {
		return nil, err
	}
	ready, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer ready.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	ns := "/proc/" + strconv.Itoa(pid) + "/ns/"
	cmd := exec.Command(path, "--configure", "--mtu=65520", "--disable-host-loopback",
		"--enable-sandbox", "--enable-seccomp", "--ready-fd=3", "--exit-fd=4",
		"--userns-path="+ns+"user", "--netns-type=path", ns+"net", "tap0")
	cmd.ExtraFiles = []*os.File{readyW, exitR}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		exitW.Close()
		return nil, fmt.Errorf("starting %s for the guest's egress: %w", egressTool, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop = func() {
		exitW.Close() // slirp4netns exits when its exit fd closes
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	// slirp4netns writes "1" on the ready fd once the interface is up; its
	// exit closes the pipe first. Bounded: it takes milliseconds.
	got := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := ready.Read(b)
		got <- err
	}()
	select {
	case err := <-got:
		if err == nil {
			return stop, nil
		}
		stop()
		return nil, fmt.Errorf("%s exited before the guest's network was up", egressTool)
	case <-time.After(10 * time.Second):
		stop()
		return nil, fmt.Errorf("%s did not configure the guest's network within ten seconds", egressTool)
	}
}
