//go:build linux

package localvm

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/microvms/microvms/localvm/guestinit"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// A guest's syscall filter. Docker's default profile is the field's
// reference for what a container may call; the user namespace already makes
// every capability the guest holds a namespaced one, so the filter's job is
// narrower: keep the guest away from kernel interfaces that are not
// namespaced at all (keyrings, BPF, perf, kexec, modules, handles, the
// clock, vsock) or that have been a steady source of escapes (userfaultfd,
// io_uring, AF_ALG). Besides the calls, it applies the profile's argument
// conditions on socket(2)'s family (socketConditions).
//
// The denied set is computed, not written by hand: every syscall the
// compiler's table knows (elastic/go-seccomp-bpf, which builds the BPF
// program without cgo) minus every syscall Docker's default profile
// (moby/profiles/seccomp, Docker's own Go data) allows a container holding
// Docker's default capabilities, minus what a guest with a user namespace
// of its own needs and Docker gives only to CAP_SYS_ADMIN (mount, its own
// hostname, namespaces). The filter allows by default: a syscall newer than
// the compiler's table is answered by the kernel, where a deny-by-default
// filter would answer EPERM and break libc's ENOSYS fallbacks. Denied calls
// fail with EPERM, as Docker's do.

// guestNeeds are the calls a guest makes that Docker reserves for
// CAP_SYS_ADMIN: identity repair's hostname and bind mount, the guest's own
// mounts and namespaces (the user namespace confines each to the guest's own
// objects), and clone3 (Docker answers ENOSYS so its argument
// filter can see clone's flags; this filter does not look at flags).
var guestNeeds = []string{
	"mount", "umount", "umount2", "sethostname", "setdomainname", "unshare", "setns", "clone", "clone3",
	"pivot_root", "chroot",
	// The new mount API, which recent util-linux uses before mount(2).
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr",
}

// alwaysDenied must be in the denied set whatever the profile says; a test
// holds the computed set to it.
var alwaysDenied = []string{
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module", "open_by_handle_at", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register", "lookup_dcookie", "acct", "swapon", "swapoff",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog", "quotactl", "fanotify_init",
}

// dockerDefaultCaps are the capabilities Docker grants a container by
// default: profile entries conditioned on one of these count as allowed.
var dockerDefaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// guestDeniedSyscalls is the computed denied set for this architecture,
// sorted.
func guestDeniedSyscalls() ([]string, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("no syscall table for %s: %w", runtime.GOARCH, err)
	}
	allowed := dockerAllowed(runtime.GOARCH)
	for _, n := range guestNeeds {
		allowed[n] = true
	}
	var denied []string
	for name := range info.SyscallNames {
		if !allowed[name] {
			denied = append(denied, name)
		}
	}
	for _, n := range alwaysDenied {
		if _, known := info.SyscallNames[n]; known && !slices.Contains(denied, n) {
			denied = append(denied, n)
		}
	}
	sort.Strings(denied)
	return denied, nil
}

// socketFamilyBound is one past the highest socket family the filter
// judges one by one (AF_MAX is 46 today); a family at or above it is
// refused, as is any value whose upper bits are set (the kernel would read
// only the low 32).
const socketFamilyBound = 256

// guestDeniedFamilies are refused whatever Docker's profile says: AF_XDP
// hands a socket a network device's queues, which no guest needs.
var guestDeniedFamilies = []uint64{unix.AF_XDP}

// socketConditions are the argument conditions under which socket(2) is
// refused: Docker's allow-list of families, as ranges of refused ones.
func socketConditions() []seccomp.NameWithConditions {
	allowed := dockerSocketFamilies(runtime.GOARCH)
	refused := func(f uint64) bool { return slices.Contains(guestDeniedFamilies, f) || !allowed(f) }
	var out []seccomp.NameWithConditions
	for lo := uint64(0); lo < socketFamilyBound; lo++ {
		if !refused(lo) {
			continue
		}
		hi := lo
		for hi+1 < socketFamilyBound && refused(hi+1) {
			hi++
		}
		out = append(out, seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.GreaterOrEqual, Value: lo},
			{Argument: 0, Operation: seccomp.LessOrEqual, Value: hi},
		}})
		lo = hi
	}
	return append(out, seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
		{Argument: 0, Operation: seccomp.GreaterOrEqual, Value: socketFamilyBound},
	}})
}

// guestFilter is the guest filter assembled once per process: the
// launcher hands the program to the guest's second stage (guestinit), which
// sets no_new_privs and installs it on every thread (TSYNC) before it
// executes the daemon, so the daemon and everything it starts inherit it
// and no setuid binary in the guest gains anything. Assembled here, not in
// the guest, so the guest's binary carries no syscall tables.
var guestFilter = sync.OnceValues(func() ([]guestinit.FilterInstruction, error) {
	denied, err := guestDeniedSyscalls()
	if err != nil {
		return nil, err
	}
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{{
			Names: denied, NamesWithCondtions: socketConditions(),
			Action: seccomp.ActionErrno | seccomp.Action(unix.EPERM),
		}},
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("assembling the guest's syscall filter: %w", err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("assembling the guest's syscall filter: %w", err)
	}
	prog := make([]guestinit.FilterInstruction, len(raw))
	for i, r := range raw {
		prog[i] = guestinit.FilterInstruction{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return prog, nil
})
