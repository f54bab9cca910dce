// Command escapeprobe is what the emulator's escape suite runs inside a
// local guest: each mode tries one thing a hostile guest would, and prints
// what the kernel answered. It changes nothing outside the guest when the
// guest is confined, and is never built into a product binary.
//
//	escapeprobe syscalls     one line per call: name, then "ok" or the errno
//	escapeprobe inotify N    open up to N inotify instances, print how many
//	                         opened and why the next failed, then hold them
//	escapeprobe hog MiB      allocate and touch MiB of memory, then print "survived"
//	escapeprobe storm N      start up to N sleeping children, print how many
//	                         started and why the next failed, then kill them
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: escapeprobe syscalls|inotify N|hog MiB")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "syscalls":
		syscalls()
	case "inotify":
		inotify(arg(2))
	case "hog":
		hog(arg(2))
	case "storm":
		storm(arg(2))
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}

func arg(i int) int {
	if len(os.Args) <= i {
		fmt.Fprintln(os.Stderr, "missing a number")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[i])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return n
}

func report(name string, r1 uintptr, errno unix.Errno) {
	if errno != 0 {
		fmt.Printf("%s %s\n", name, unix.ErrnoName(errno))
		return
	}
	fmt.Printf("%s ok\n", name)
	if int(r1) > 2 && name != "keyctl" && name != "add_key" {
		unix.Close(int(r1))
	}
}

// syscalls makes calls that succeed for an unfiltered unprivileged process
// (so an EPERM can only come from the filter): a keyring lookup, a user
// key, a user-mode userfaultfd, a software perf counter on itself, an
// io_uring.
func syscalls() {
	r1, _, e := unix.Syscall(unix.SYS_KEYCTL, 0 /* KEYCTL_GET_KEYRING_ID */, uintptr(^uint32(2)) /* KEY_SPEC_SESSION_KEYRING = -3 */, 1)
	report("keyctl", r1, e)
	typ, desc, payload := []byte("user\x00"), []byte("escapeprobe\x00"), []byte("x")
	r1, _, e = unix.Syscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
		uintptr(unsafe.Pointer(&payload[0])), 1, uintptr(^uint32(3)) /* KEY_SPEC_PROCESS_KEYRING = -2 */, 0)
	report("add_key", r1, e)
	r1, _, e = unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */, 0, 0)
	report("userfaultfd", r1, e)
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK, Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
	attr.Size = uint32(unsafe.Sizeof(attr))
	r1, _, e = unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&attr)), 0, ^uintptr(0), ^uintptr(0), 0, 0)
	report("perf_event_open", r1, e)
	var params [120]byte
	r1, _, e = unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	report("io_uring_setup", r1, e)
}

func inotify(n int) {
	var fds []int
	var why error
	for len(fds) < n {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			why = err
			break
		}
		fds = append(fds, fd)
	}
	fmt.Printf("opened %d (%v)\n", len(fds), why)
	_ = os.Stdout.Sync()
	time.Sleep(time.Hour)
}

func hog(mib int) {
	const page = 4096
	buf := make([][]byte, 0, mib)
	for i := 0; i < mib; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += page {
			b[j] = 1
		}
		buf = append(buf, b)
	}
	fmt.Println("survived", len(buf))
}

func storm(n int) {
	var kids []*exec.Cmd
	var why error
	for len(kids) < n {
		c := exec.Command("/bin/sleep", "120")
		if err := c.Start(); err != nil {
			why = err
			break
		}
		kids = append(kids, c)
	}
	fmt.Printf("started %d (%v)\n", len(kids), why)
	for _, c := range kids {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
}
