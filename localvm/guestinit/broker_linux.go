//go:build linux

package guestinit

import (
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// serveBroker is the init's side: it answers dial requests on ctl until the
// channel closes. Each request is served on its own goroutine so a slow
// connect holds up nobody else.
func serveBroker(ctl int) {
	for {
		req := make([]byte, BrokerRequestLen+1)
		oob := make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, err := unix.Recvmsg(ctl, req, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || (n == 0 && oobn == 0) {
			return // the emulator is gone
		}
		fds := ReceivedFDs(oob[:oobn])
		if n != BrokerRequestLen || len(fds) != 1 {
			closeAll(fds)
			continue
		}
		go answerDial(fds[0], int(binary.BigEndian.Uint16(req)))
	}
}

func answerDial(reply, port int) {
	defer unix.Close(reply)
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		_ = unix.Sendmsg(reply, append([]byte{1}, err.Error()...), nil, nil, unix.MSG_NOSIGNAL)
		return
	}
	defer c.Close()
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		_ = unix.Sendmsg(reply, append([]byte{1}, err.Error()...), nil, nil, unix.MSG_NOSIGNAL)
		return
	}
	defer f.Close()
	_ = unix.Sendmsg(reply, []byte{0}, unix.UnixRights(int(f.Fd())), nil, unix.MSG_NOSIGNAL)
}

func ReceivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		// ParseUnixRights indexes past a payload that is not whole
		// descriptors (found by FuzzBrokerReply); the kernel never builds
		// one, but nothing here trusts the bytes.
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS || len(m.Data)%4 != 0 {
			continue
		}
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// BrokerRequestLen is a request's size: the guest port, big-endian.
const BrokerRequestLen = 2

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
