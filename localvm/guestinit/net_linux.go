//go:build linux

package guestinit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/microvms/microvms/internal/netpolicy/guestlink"
	"golang.org/x/sys/unix"
)

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
func setupGuestNetwork(root string, cfg *NetConfig) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tun, err := guestTun()
	if err != nil {
		return err
	}
	defer tun.Close()
	if err := guestlink.ConfigureGuestLink(TunName); err != nil {
		return err
	}
	if err := writeFileReplacing(filepath.Join(root, "etc/resolv.conf"), "nameserver "+guestlink.GatewayAddr.String()+"\n", 0o644); err != nil {
		return fmt.Errorf("writing the guest's resolv.conf: %w", err)
	}
	if err := installCA(root, cfg.CAPEM); err != nil {
		return fmt.Errorf("installing the sandbox CA: %w", err)
	}
	if err := unix.Sendmsg(FDNet, []byte{0}, unix.UnixRights(int(tun.Fd())), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("handing the tun to the emulator: %w", err)
	}
	return unix.Close(FDNet)
}

// guestTun is the init's tun: the /dev/net/tun the emulator opened inside
// this namespace and offered on FDNet, attached here, or else (the
// emulator could not enter the namespace: a rootless one) one the init
// opens itself, which needs /dev/net/tun open to the guest's uid.
func guestTun() (*os.File, error) {
	msg := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(4*4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(FDNet, msg, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the emulator's tun offer: %w", err)
	}
	fds := ReceivedFDs(oob[:oobn])
	if n != 1 || msg[0] != 0 || len(fds) != 1 {
		closeAll(fds)
		return guestlink.OpenTun(TunName)
	}
	f := os.NewFile(uintptr(fds[0]), "/dev/net/tun")
	if err := guestlink.AttachTun(f, TunName); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// installCA appends pem to each system bundle the guest's root has and
// writes CABundlePath (the first bundle, then pem). Paths resolve
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
	f, err := open(CABundlePath, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(bundle)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
