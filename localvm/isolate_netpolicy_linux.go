//go:build linux

package localvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/internal/netpolicy"
)

// A guest under a network policy (issue 48; GuestSpec.Network). Its network
// namespace gets no slirp4netns: the init, which holds CAP_NET_ADMIN over
// that namespace (the guest's own processes, nested one user namespace
// deeper, hold none), makes a tun device there, gives it the guest's
// address and default route, and passes the tun's descriptor to the
// emulator over its own socket pair (fdNet); the emulator serves it with
// netpolicy.Net.Serve until the guest ends. All of it happens before the
// init lets the daemon start, so no guest program runs before its only
// link is the policy's. The init also writes the resolver (the policy's
// gateway) and the sandbox's CA into the guest's root.

// fdNet is the init's end of the socket pair the tun's descriptor leaves
// by; present only for a guest under a policy.
const fdNet = 7

// guestNetConfig is what the init needs to set a policy's network up.
type guestNetConfig struct {
	CAPEM []byte // the sandbox CA's certificate, for the guest's trust store
}

// caBundlePaths are the system trust bundles distributions read (Debian,
// Ubuntu, Alpine; Fedora, RHEL, Amazon Linux; openSUSE; Alpine's cert.pem).
// Each one the image has gets the CA appended, once per file.
var caBundlePaths = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// setupGuestNetwork is the init's half, before the daemon starts: the tun,
// its link, the resolver, the trust store, and the tun's descriptor sent
// to the emulator.
func setupGuestNetwork(root string, cfg *guestNetConfig) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tun, err := guestTun()
	if err != nil {
		return err
	}
	defer tun.Close()
	if err := netpolicy.ConfigureGuestLink(GuestTunName); err != nil {
		return err
	}
	if err := writeFileReplacing(filepath.Join(root, "etc/resolv.conf"), "nameserver "+netpolicy.GatewayAddr.String()+"\n", 0o644); err != nil {
		return fmt.Errorf("writing the guest's resolv.conf: %w", err)
	}
	if err := installCA(root, cfg.CAPEM); err != nil {
		return fmt.Errorf("installing the sandbox CA: %w", err)
	}
	if err := unix.Sendmsg(fdNet, []byte{0}, unix.UnixRights(int(tun.Fd())), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("handing the tun to the emulator: %w", err)
	}
	return unix.Close(fdNet)
}

// guestTun is the init's tun: the /dev/net/tun the emulator opened inside
// this namespace and offered on fdNet, attached here, or else (the
// emulator could not enter the namespace: a rootless one) one the init
// opens itself, which needs /dev/net/tun open to the guest's uid.
func guestTun() (*os.File, error) {
	msg := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(4*4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(fdNet, msg, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the emulator's tun offer: %w", err)
	}
	fds := receivedFDs(oob[:oobn])
	if n != 1 || msg[0] != 0 || len(fds) != 1 {
		closeAll(fds)
		return netpolicy.OpenTun(GuestTunName)
	}
	f := os.NewFile(uintptr(fds[0]), "/dev/net/tun")
	if err := netpolicy.AttachTun(f, GuestTunName); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// offerTun is the emulator's first word on fdNet: a /dev/net/tun opened
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

// installCA appends pem to each system bundle the guest's root has and
// writes GuestCABundlePath (the first bundle, then pem). Paths resolve
// inside root (RESOLVE_IN_ROOT): an image's symlinked bundle reaches the
// image's file, never the host's.
func installCA(root string, pem []byte) error {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	open := func(p string, flags uint64, mode uint64) (*os.File, error) {
		fd, err := unix.Openat2(dir, p, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return nil, err
		}
		return os.NewFile(uintptr(fd), p), nil
	}
	var system []byte
	type fileID struct{ dev, ino uint64 }
	done := map[fileID]bool{}
	for _, p := range caBundlePaths {
		f, err := open(p, unix.O_RDWR|unix.O_APPEND, 0)
		if err != nil {
			continue // absent, or not the guest's to write
		}
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || done[fileID{st.Dev, st.Ino}] {
			f.Close()
			continue
		}
		done[fileID{st.Dev, st.Ino}] = true
		b, err := io.ReadAll(io.LimitReader(f, 64<<20))
		if err == nil && system == nil {
			system = b
		}
		if err == nil {
			sep := []byte{}
			if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
				sep = []byte("\n")
			}
			_, err = f.Write(append(sep, pem...))
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	etc, err := open("/etc", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer etc.Close()
	if err := unix.Mkdirat(int(etc.Fd()), "microvms", 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	bundle := append(system, pem...)
	if len(system) > 0 && !bytes.HasSuffix(system, []byte("\n")) {
		bundle = append(append(system, '\n'), pem...)
	}
	_ = unix.Unlinkat(int(etc.Fd()), "microvms/ca-bundle.pem", 0)
	f, err := open(GuestCABundlePath, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(bundle)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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
			fds := receivedFDs(oob[:oobn])
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
