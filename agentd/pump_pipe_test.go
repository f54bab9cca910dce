package agentd

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pipeSize reopens the child's stdout pipe through /proc and asks its size.
func pipeSize(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/fd/1", pid), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("reopen the child's stdout: %v", err)
	}
	defer unix.Close(fd)
	n, err := unix.FcntlInt(uintptr(fd), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitOutput waits until the exec's stdout head holds n bytes.
func waitOutput(t *testing.T, d *daemon, id string, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); len(d.output(id)) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%s printed %d of %d bytes", id, len(d.output(id)), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A child's stdout pipe is widened to busyPipeBytes only once a read fills
// the pump's buffer: a quiet child keeps the default pipe and its pages.
// Catches: `n == len(*bp)` negated in the pump (the first short read widens
// the pipe, so every exec pays for a 1 MiB pipe whatever it prints).
func TestOnlyABusyPipeIsWidened(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.mustStart(shell("quiet", "printf x; exec sleep 30"))
	// One write of 300000 bytes (dd's block), not head's 8 KiB pieces: a
	// pump that keeps up with small writes never reads a full buffer, and
	// the test then depended on how busy the machine was.
	d.mustStart(shell("busy", "dd if=/dev/zero bs=300000 count=1 2>/dev/null; exec sleep 30"))
	waitOutput(t, d, "quiet", 1)
	waitOutput(t, d, "busy", 300000)
	if got := pipeSize(t, d.srv.execs.get("quiet").pgid); got >= busyPipeBytes {
		t.Errorf("a child that printed one byte has a %d-byte pipe, want the default", got)
	}
	if got := pipeSize(t, d.srv.execs.get("busy").pgid); got != busyPipeBytes {
		t.Errorf("a child that filled its pipe has a %d-byte pipe, want %d", got, busyPipeBytes)
	}
}
