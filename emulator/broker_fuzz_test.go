//go:build linux

package emulator

import (
	"testing"

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
		received := receivedFDs(oob)
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
