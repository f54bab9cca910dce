//go:build linux

package guestlink

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenTun creates the tun device name (IFF_TUN|IFF_NO_PI) in the network
// namespace of the calling thread and answers its descriptor, for Serve.
// The caller locks its goroutine to a thread inside the guest's network
// namespace and needs CAP_NET_ADMIN over it: the guest's init, or the
// emulator joined to it (setns). The guest's own processes, in a user
// namespace nested inside the one owning that network namespace, hold no
// such capability, so they cannot reconfigure the link, open another tun
// or a raw socket there (TestGuestHoldsNoNetworkCapability).
//
// The runtime then gives the device GuestAddr/GuestPrefix, brings it up,
// routes the default through GatewayAddr, writes GatewayAddr as the only
// name server in the guest's resolv.conf, and installs CACertPEM in the
// guest's trust store.
func OpenTun(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/net/tun: %w", err)
	}
	f := os.NewFile(uintptr(fd), "/dev/net/tun:"+name)
	if err := AttachTun(f, name); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// AttachTun creates the tun device name (IFF_TUN|IFF_NO_PI) on f, an open
// /dev/net/tun. The device is made in the network namespace f was opened
// in (the kernel takes it at open), which need not be the caller's: a host
// whose /dev/net/tun is root's alone has the emulator open it inside the
// guest's namespace and the guest's init attach it. The caller needs
// CAP_NET_ADMIN over that namespace.
func AttachTun(f *os.File, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(int(f.Fd()), unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("creating the tun device %s: %w", name, err)
	}
	return nil
}
