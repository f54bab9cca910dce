//go:build linux

package localvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/internal/netpolicy"
	"github.com/microvms/microvms/localvm/guestinit"
)

// A guest under a network policy (issue 48; GuestSpec.Network). Its network
// namespace gets no slirp4netns: the init, which holds CAP_NET_ADMIN over
// that namespace (the guest's own processes, nested one user namespace
// deeper, hold none), makes a tun device there, gives it the guest's
// address and default route, and passes the tun's descriptor to the
// emulator over its own socket pair (guestinit.FDNet); the emulator serves it with
// netpolicy.Net.Serve until the guest ends. All of it happens before the
// init lets the daemon start, so no guest program runs before its only
// link is the policy's. The init also writes the resolver (the policy's
// gateway) and the sandbox's CA into the guest's root.

// offerTun is the emulator's first word on guestinit.FDNet: a /dev/net/tun opened
// inside the network namespace of the guest's init (leader), for a host
// whose tun device only root may open, or, when this process cannot enter
// that namespace (a rootless emulator), a word that the init opens its own.
func offerTun(conn, leader int) error {
	f, err := openTunIn(leader)
	if err != nil {
		return unix.Sendmsg(conn, []byte{1}, nil, nil, unix.MSG_NOSIGNAL)
	}
	defer f.Close()
	return unix.Sendmsg(conn, []byte{0}, unix.UnixRights(int(f.Fd())), nil, unix.MSG_NOSIGNAL)
}

// openTunIn opens /dev/net/tun on a thread joined to pid's network
// namespace: the kernel makes the device, once attached, in the namespace
// the file was opened in. The thread is never handed back (its goroutine
// ends locked), so no other goroutine runs in the guest's namespace.
func openTunIn(pid int) (*os.File, error) {
	type res struct {
		f   *os.File
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- res{nil, err}
			return
		}
		defer unix.Close(ns)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread() // still in this process's own namespace
			ch <- res{nil, err}
			return
		}
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		ch <- res{os.NewFile(uintptr(fd), "/dev/net/tun"), nil}
	}()
	r := <-ch
	return r.f, r.err
}

// receiveTun is the emulator's half: it waits, bounded, for the init to
// send the tun's descriptor on conn. The init is the emulator's own code
// and nothing of the guest has run yet, but the answer is still checked: a
// single descriptor, a character device.
func receiveTun(conn int, exited <-chan struct{}, limit time.Duration) (*os.File, error) {
	f := os.NewFile(uintptr(conn), "guest-net")
	defer f.Close()
	type got struct {
		fd  int
		err error
	}
	ch := make(chan got, 1)
	go func() {
		msg := make([]byte, 16)
		oob := make([]byte, unix.CmsgSpace(4*4))
		for {
			n, oobn, _, _, err := unix.Recvmsg(conn, msg, oob, unix.MSG_CMSG_CLOEXEC)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				ch <- got{-1, err}
				return
			}
			fds := guestinit.ReceivedFDs(oob[:oobn])
			if n != 1 || msg[0] != 0 || len(fds) != 1 {
				closeAll(fds)
				ch <- got{-1, errors.New("the init did not send the guest's tun")}
				return
			}
			ch <- got{fds[0], nil}
			return
		}
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var err error
	select {
	case g := <-ch:
		if g.err != nil {
			return nil, g.err
		}
		var st unix.Stat_t
		if err := unix.Fstat(g.fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			unix.Close(g.fd)
			return nil, errors.New("the init sent something other than a tun device")
		}
		return os.NewFile(uintptr(g.fd), "guest-tun"), nil
	case <-exited:
		err = errors.New("the guest exited before its network was up")
	case <-timer.C:
		err = fmt.Errorf("the guest's network was not up within %s", limit)
	}
	// Unblocks the reader (its Recvmsg ends once the socket is shut), and
	// waits for it: conn is closed only after.
	_ = unix.Shutdown(conn, unix.SHUT_RDWR)
	if g := <-ch; g.err == nil {
		unix.Close(g.fd)
	}
	return nil, err
}

// serveNetwork serves the guest's tun under n until stop, which waits for
// Serve to end and closes the tun.
func serveNetwork(n *netpolicy.Net, tun *os.File) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Serve(ctx, tun)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			tun.Close()
		})
	}
}

// CheckNetworkPolicy reports whether this host can give a local guest a
// network under a policy: root opens the guest's tun inside its namespace;
// any other user's guest opens its own, which needs /dev/net/tun open to
// that user. The error is an *IsolationError.
func CheckNetworkPolicy() error {
	if os.Geteuid() == 0 {
		return nil
	}
	tun, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return isolationError("read-write access to /dev/net/tun, which a rootless emulator's guest under a network policy opens for its only link (most distributions make it mode 0666; here it is not open to this user)", err)
	}
	tun.Close()
	return nil
}
