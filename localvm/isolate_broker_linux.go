//go:build linux

package localvm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/microvms/microvms/localvm/guestinit"
	"golang.org/x/sys/unix"
)

// The emulator reaches a guest's ports through the guest's init: it sends
// the init a port number and one end of a fresh socket pair; the init, which
// lives in the guest's network namespace, connects to 127.0.0.1:port there
// and passes the connected socket back over that pair. The emulator then
// owns a TCP connection into the guest without ever entering the guest's
// namespaces, which an unprivileged emulator could not do (setns into a
// network namespace needs CAP_SYS_ADMIN in the caller's own namespace), and
// the guest has no listener on the host at all.
//
// The guest may answer with anything: a hostile init can only hand back a
// socket of its own, which reaches nothing but that guest. The emulator
// accepts only a stream socket and never reads the request channel.

// brokerDial asks the init behind ctl for a connection to guest port port.
func brokerDial(ctx context.Context, ctl int, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("guest port %d is out of range", port)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine := os.NewFile(uintptr(pair[0]), "guest-dial")
	defer mine.Close()
	var req [guestinit.BrokerRequestLen]byte
	binary.BigEndian.PutUint16(req[:], uint16(port))
	err = unix.Sendmsg(ctl, req[:], unix.UnixRights(pair[1]), nil, unix.MSG_NOSIGNAL)
	unix.Close(pair[1])
	if err != nil {
		return nil, fmt.Errorf("asking the guest's init for port %d: %w", port, err)
	}
	rc, err := net.FileConn(mine)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	uc := rc.(*net.UnixConn)
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > 10*time.Second {
		// Bounded even without a deadline: a frozen or hostile init must
		// not hold a caller forever.
		deadline = time.Now().Add(10 * time.Second)
	}
	_ = uc.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = uc.SetReadDeadline(time.Now()) })
	defer stop()
	msg := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(msg, oob)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("waiting for the guest's init to connect port %d: %w", port, err)
	}
	fd, err := parseBrokerReply(msg[:n], oob[:oobn])
	if err != nil {
		return nil, fmt.Errorf("guest port %d: %w", port, err)
	}
	if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
		unix.Close(fd)
		return nil, fmt.Errorf("guest port %d: the init answered with something other than a stream socket", port)
	}
	f := os.NewFile(uintptr(fd), "guest-conn")
	defer f.Close()
	return net.FileConn(f)
}

// parseBrokerReply reads an init's answer: a status byte (0: connected,
// the socket in the control message; else the reason in the text after
// it). Every descriptor a bad answer carried is closed; a good one carries
// exactly one, which the caller owns. The bytes come from the guest, which
// may be hostile: FuzzBrokerReply.
func parseBrokerReply(msg, oob []byte) (int, error) {
	fds := guestinit.ReceivedFDs(oob)
	if len(msg) < 1 || msg[0] != 0 {
		closeAll(fds)
		why := "no answer"
		if len(msg) > 1 {
			why = strings.ToValidUTF8(string(msg[1:min(len(msg), 200)]), "?")
		}
		return -1, errors.New(why)
	}
	if len(fds) != 1 {
		closeAll(fds)
		return -1, fmt.Errorf("the init answered with %d descriptors", len(fds))
	}
	return fds[0], nil
}

// closeFD closes a received descriptor; a variable so the fuzz target can
// keep made-up descriptor numbers away from the real close.
var closeFD = unix.Close

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = closeFD(fd)
	}
}
