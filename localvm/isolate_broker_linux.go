//go:build linux

package localvm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

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

// brokerRequestLen is a request's size: the guest port, big-endian.
const brokerRequestLen = 2

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
	var req [brokerRequestLen]byte
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
	fds := receivedFDs(oob)
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

func receivedFDs(oob []byte) []int {
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

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = closeFD(fd)
	}
}

// serveBroker is the init's side: it answers dial requests on ctl until the
// channel closes. Each request is served on its own goroutine so a slow
// connect holds up nobody else.
func serveBroker(ctl int) {
	for {
		req := make([]byte, brokerRequestLen+1)
		oob := make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, err := unix.Recvmsg(ctl, req, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || (n == 0 && oobn == 0) {
			return // the emulator is gone
		}
		fds := receivedFDs(oob[:oobn])
		if n != brokerRequestLen || len(fds) != 1 {
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
