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
//	escapeprobe exe PID      open /proc/PID/exe and, through that descriptor,
//	                         try to change the file's mode, times and
//	                         xattrs and to reopen it for writing; one line each
//	escapeprobe ptrace PID   PTRACE_SEIZE and PTRACE_INTERRUPT PID; one line each
//	escapeprobe sockets      socket(2) for each family; one line each
//	escapeprobe takeover INIT AGENTD PORT
//	                         the whole attack on a rootless guest's daemon:
//	                         hold /proc/AGENTD/exe, ptrace-stop INIT, kill
//	                         AGENTD, append to its binary, then answer HTTP on
//	                         PORT as "impostor" for a minute; lines go to stdout
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
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
	case "exe":
		exe(arg(2))
	case "ptrace":
		ptraceStop(arg(2))
	case "sockets":
		sockets()
	case "takeover":
		takeover(arg(2), arg(3), arg(4))
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

func errnoOf(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// exe is the metadata half of the attack: an fd of another process's
// executable, then chmod, utimes and setxattr through it, and a reopen for
// writing (ETXTBSY while it runs).
func exe(pid int) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/exe", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	fmt.Println("open", errnoOf(err))
	if err != nil {
		return
	}
	self := "/proc/self/fd/" + strconv.Itoa(fd)
	link, _ := os.Readlink(self)
	fmt.Println("link", link)
	fmt.Println("chmod", errnoOf(unix.Fchmod(fd, 0o6777)))
	fmt.Println("utimes", errnoOf(unix.UtimesNanoAt(unix.AT_FDCWD, self, []unix.Timespec{{}, {}}, 0)))
	fmt.Println("setxattr", errnoOf(unix.Fsetxattr(fd, "user.escapeprobe", []byte("x"), 0)))
	w, err := unix.Open(self, unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
	fmt.Println("reopen", errnoOf(err))
	if err == nil {
		_, err = unix.Write(w, []byte("escapeprobe"))
		fmt.Println("write", errnoOf(err))
	}
}

// seize ptrace-stops pid from the calling thread, which must stay locked.
func seize(pid int) error {
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0); e != 0 {
		return e
	}
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_INTERRUPT, uintptr(pid), 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

func ptraceStop(pid int) {
	runtime.LockOSThread()
	fmt.Println("seize", errnoOf(seize(pid)))
}

// sockets creates one socket of each family Docker's profile refuses and
// of those it allows; the kernel's own answer for an unloaded family is
// EAFNOSUPPORT, so EPERM is the filter's.
func sockets() {
	for _, f := range []struct {
		name      string
		domain, t int
	}{
		{"AF_VSOCK", unix.AF_VSOCK, unix.SOCK_STREAM}, {"AF_XDP", unix.AF_XDP, unix.SOCK_RAW},
		{"AF_ALG", unix.AF_ALG, unix.SOCK_SEQPACKET}, {"AF_KEY", unix.AF_KEY, unix.SOCK_RAW},
		{"AF_UNIX", unix.AF_UNIX, unix.SOCK_STREAM}, {"AF_INET", unix.AF_INET, unix.SOCK_STREAM},
		{"AF_INET6", unix.AF_INET6, unix.SOCK_DGRAM}, {"AF_NETLINK", unix.AF_NETLINK, unix.SOCK_RAW},
	} {
		fd, err := unix.Socket(f.domain, f.t|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		fmt.Println(f.name, errnoOf(err))
	}
	// A family number with high bits set: the kernel truncates it to an
	// int, a filter comparing 64 bits must not let it through.
	fd, _, e := unix.Syscall(unix.SYS_SOCKET, 1<<32|unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	if e == 0 {
		unix.Close(int(fd))
		fmt.Println("AF_VSOCK+hi ok")
	} else {
		fmt.Println("AF_VSOCK+hi", unix.ErrnoName(e))
	}
}

func takeover(initPid, agentd, port int) {
	runtime.LockOSThread()
	fd, err := unix.Open("/proc/"+strconv.Itoa(agentd)+"/exe", unix.O_RDONLY, 0)
	fmt.Println("open", errnoOf(err))
	err = seize(initPid)
	fmt.Println("seize", errnoOf(err))
	_ = unix.Kill(agentd, unix.SIGKILL)
	for i := 0; i < 500 && unix.Kill(agentd, 0) == nil; i++ { // bounded: about five seconds
		time.Sleep(10 * time.Millisecond)
	}
	if fd >= 0 {
		w, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_WRONLY|unix.O_APPEND, 0)
		if err == nil {
			_, err = unix.Write(w, []byte("escapeprobe"))
		}
		fmt.Println("append", errnoOf(err))
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	fmt.Println("listen", errnoOf(err))
	_ = os.Stdout.Sync()
	if err != nil {
		return
	}
	go func() { time.Sleep(time.Minute); os.Exit(0) }()
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("impostor")) }))
}
