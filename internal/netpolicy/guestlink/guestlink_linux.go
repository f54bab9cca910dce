//go:build linux

package guestlink

import (
	"encoding/binary"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// ConfigureGuestLink gives the tun device name, in the calling thread's
// network namespace, the guest's side of the link: GuestAddr/GuestPrefix,
// up, and the default route through GatewayAddr, and brings the loopback
// up. Like OpenTun it needs CAP_NET_ADMIN over that namespace and a locked
// thread inside it. It speaks rtnetlink itself, so the guest's image needs
// no iproute2. The guest's resolv.conf (nameserver GatewayAddr) and trust
// store (CACertPEM) are the runtime's to write.
func ConfigureGuestLink(name string) error {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return err
	}
	for _, dev := range []string{"lo", name} {
		if err := linkUp(dev); err != nil {
			return err
		}
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("rtnetlink: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("rtnetlink: %w", err)
	}
	guest, gw := GuestAddr.As4(), GatewayAddr.As4()

	addr := make([]byte, unix.SizeofIfAddrmsg)
	addr[0], addr[1] = unix.AF_INET, byte(GuestPrefix)
	binary.NativeEndian.PutUint32(addr[4:], uint32(ifc.Index))
	addr = append(addr, rtattr(unix.IFA_LOCAL, guest[:])...)
	addr = append(addr, rtattr(unix.IFA_ADDRESS, guest[:])...)
	if err := rtRequest(fd, unix.RTM_NEWADDR, addr); err != nil {
		return fmt.Errorf("the guest's address on %s: %w", name, err)
	}

	route := make([]byte, unix.SizeofRtMsg)
	route[0] = unix.AF_INET // family; dst_len 0: the default route
	route[4], route[5], route[6], route[7] = unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST
	var oif [4]byte
	binary.NativeEndian.PutUint32(oif[:], uint32(ifc.Index))
	route = append(route, rtattr(unix.RTA_GATEWAY, gw[:])...)
	route = append(route, rtattr(unix.RTA_OIF, oif[:])...)
	if err := rtRequest(fd, unix.RTM_NEWROUTE, route); err != nil {
		return fmt.Errorf("the guest's default route: %w", err)
	}
	return nil
}

func linkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading %s's flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing %s up: %w", name, err)
	}
	return nil
}

func rtattr(typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	b := make([]byte, (l+3)&^3)
	binary.NativeEndian.PutUint16(b[0:], uint16(l))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[unix.SizeofRtAttr:], data)
	return b
}

// rtRequest sends one rtnetlink request that creates something and waits
// for its acknowledgement.
func rtRequest(fd int, typ uint16, body []byte) error {
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	msg = append(msg, body...)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	k, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	b := buf[:k]
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			break
		}
		if binary.NativeEndian.Uint16(b[4:]) == unix.NLMSG_ERROR && l >= unix.SizeofNlMsghdr+4 {
			if e := int32(binary.NativeEndian.Uint32(b[unix.SizeofNlMsghdr:])); e != 0 {
				return unix.Errno(-e)
			}
			return nil
		}
		if a := (l + 3) &^ 3; a < len(b) {
			b = b[a:]
		} else {
			break
		}
	}
	return fmt.Errorf("no acknowledgement from the kernel")
}
