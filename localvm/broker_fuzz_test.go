//go:build linux

package localvm

import (
	"strings"
	"testing"

	"github.com/microvms/microvms/localvm/guestinit"
	"golang.org/x/sys/unix"
)

// FuzzBrokerReply feeds parseBrokerReply what a hostile init could send:
// any status, any text, any control message. It must never panic, must
// hand back a descriptor only for a success carrying exactly one, and must
// close every descriptor of an answer it refuses (a leak per dial would let
// a guest exhaust the emulator's descriptors).
func FuzzBrokerReply(f *testing.F) {
	f.Add([]byte{0}, unix.UnixRights(7))
	f.Add([]byte{0}, unix.UnixRights(7, 8))
	f.Add([]byte{1, 'n', 'o'}, unix.UnixRights(9))
	f.Add([]byte{}, []byte{})
	f.Add([]byte{0}, []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, msg, oob []byte) {
		var closed []int
		closeFD = func(fd int) error { closed = append(closed, fd); return nil }
		defer func() { closeFD = unix.Close }()
		received := guestinit.ReceivedFDs(oob)
		fd, err := parseBrokerReply(msg, oob)
		if err == nil {
			if len(msg) == 0 || msg[0] != 0 || len(received) != 1 || fd != received[0] || len(closed) != 0 {
				t.Fatalf("accepted %q with descriptors %v (closed %v)", msg, received, closed)
			}
			return
		}
		if fd != -1 || len(closed) != len(received) {
			t.Fatalf("refused with fd %d, closed %v of %v", fd, closed, received)
		}
	})
}

// Catches: the port check's bounds moved by one (a guest's port 0 sent to
// its init, or port 65535, a real port, refused as out of range). ctl is
// not a descriptor: a port that passes the check fails at the send instead.
func TestBrokerDialPortBounds(t *testing.T) {
	for _, port := range []int{-1, 0, 65536} {
		if _, err := brokerDial(t.Context(), -1, port); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("port %d: %v, want refused as out of range", port, err)
		}
	}
	for _, port := range []int{1, 65535} {
		if _, err := brokerDial(t.Context(), -1, port); err == nil || strings.Contains(err.Error(), "out of range") {
			t.Errorf("port %d: %v, want it past the range check (failing at the send)", port, err)
		}
	}
}

// Catches: a refusal without a reason reported as an empty error (the
// reason's bound off by one), and a reason cut or dropped.
func TestBrokerReplyReason(t *testing.T) {
	if _, err := parseBrokerReply([]byte{1}, nil); err == nil || err.Error() != "no answer" {
		t.Errorf("a bare refusal: %v, want \"no answer\"", err)
	}
	if _, err := parseBrokerReply(append([]byte{1}, "connection refused"...), nil); err == nil || err.Error() != "connection refused" {
		t.Errorf("a refusal with its reason: %v", err)
	}
}
