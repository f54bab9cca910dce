//go:build linux

package localvm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// A guest's root is root only inside the guest's own user namespace. On the
// host its processes run as an unprivileged uid, and the namespace itself is
// owned by that uid, not by whoever started the emulator: the kernel charges
// a namespace's inotify instances, keys and user namespaces to its owner, so
// a guest owned by root would spend root's allowances.
//
//   - Started by root, each guest gets a range of 65536 host ids of its own
//     (guest uid n is host uid base+n), far above any login uid, and the
//     range's first id owns the namespace.
//   - Started by anyone else, the guest's root is the caller's own uid, the
//     single mapping an unprivileged process may write. Guest ids other than
//     0 do not exist there (an exec as another user is refused by the
//     kernel), and setgroups is denied, as the kernel requires for such a
//     mapping.

const (
	// rootGuestIDBase is the first host id a root-started guest may be
	// given; it sits above systemd's container ranges' usual start and
	// below 2^31, which some tools treat as negative.
	rootGuestIDBase = 1_000_000_000
	// rootGuestIDSlots is how many disjoint ranges fit below 2^31.
	rootGuestIDSlots = 16_000
	// guestIDRange is the size of a root-started guest's id range: the
	// whole 16-bit id space a distribution's users and groups live in.
	guestIDRange = 65536
)

// idMapping is how one guest's ids map onto the host's.
type idMapping struct {
	// owner is the host uid and gid the guest's user namespace belongs to;
	// it is also the host id of the guest's root.
	ownerUID, ownerGID int
	uids, gids         []syscall.SysProcIDMap
	// setgroups is false for a single-id mapping, where the kernel insists
	// setgroups be denied before a gid map is written.
	setgroups bool
	// byRoot is true when the emulator runs as host root.
	byRoot bool
}

var nextGuestSlot atomic.Uint64

func init() {
	var b [8]byte
	_, _ = rand.Read(b[:])
	// A random first slot keeps two emulators on one host from handing out
	// the same ranges in the same order.
	nextGuestSlot.Store(binary.LittleEndian.Uint64(b[:]) % rootGuestIDSlots)
}

// guestIDMapping picks the mapping for a new guest.
func guestIDMapping() idMapping {
	if os.Geteuid() == 0 {
		slot := nextGuestSlot.Add(1) % rootGuestIDSlots
		base := rootGuestIDBase + int(slot)*guestIDRange
		return idMapping{
			ownerUID: base, ownerGID: base, byRoot: true, setgroups: true,
			uids: []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: guestIDRange}},
			gids: []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: guestIDRange}},
		}
	}
	uid, gid := os.Geteuid(), os.Getegid()
	return idMapping{
		ownerUID: uid, ownerGID: gid,
		uids: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		gids: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
	}
}

// apply sets cmd up to start in a new user namespace mapped by m, as the
// namespace's root.
func (m idMapping) apply(attr *syscall.SysProcAttr) {
	attr.Cloneflags |= unix.CLONE_NEWUSER
	attr.UidMappings, attr.GidMappings = m.uids, m.gids
	attr.GidMappingsEnableSetgroups = m.setgroups
	attr.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: !m.setgroups}
}

// startOwnedBy starts cmd so that the user namespace its clone makes is
// owned by m's owner. The kernel makes a namespace's owner the effective
// uid of the thread that creates it, so root does the clone from a locked
// thread whose effective ids are, for the clone only, the owner's. The
// thread keeps root's capabilities across that change
// (SECBIT_NO_SETUID_FIXUP, cleared again before the clone so the guest does
// not inherit it): writing a map of more than one id needs CAP_SETUID over
// the new namespace. Afterwards the thread takes root's ids back and is
// handed back to the runtime; should that fail, its goroutine ends locked
// and the runtime discards the thread.
func startOwnedBy(cmd *exec.Cmd, m idMapping) error {
	if !m.byRoot {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := becomeOwner(m)
		if err == nil {
			err = cmd.Start()
		}
		if rerr := becomeRootAgain(); rerr != nil {
			errc <- errors.Join(err, rerr)
			return // locked: the thread is not reused
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// threadSyscall makes one raw syscall on the calling thread only (not the
// runtime's all-threads wrappers, which would change every thread's ids).
func threadSyscall(what string, trap, a1, a2, a3 uintptr) error {
	if _, _, e := unix.RawSyscall(trap, a1, a2, a3); e != 0 {
		return fmt.Errorf("%s: %w", what, e)
	}
	return nil
}

// becomeOwner changes the calling thread's effective ids to m's owner,
// keeping its capabilities.
func becomeOwner(m idMapping) error {
	keep := ^uintptr(0)
	if err := threadSyscall("keeping capabilities across the uid change", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, secbitNoSetuidFixup, 0); err != nil {
		return err
	}
	if err := threadSyscall("setting the owner gid", unix.SYS_SETRESGID, keep, uintptr(m.ownerGID), keep); err != nil {
		return err
	}
	if err := threadSyscall("setting the owner uid", unix.SYS_SETRESUID, keep, uintptr(m.ownerUID), keep); err != nil {
		return err
	}
	return threadSyscall("clearing the securebits", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, 0, 0)
}

// becomeRootAgain gives the calling thread root's effective ids back (its
// real and saved ids never left root, so its permitted capabilities are
// whole) and clears the securebits.
func becomeRootAgain() error {
	keep := ^uintptr(0)
	return errors.Join(
		threadSyscall("restoring the uid", unix.SYS_SETRESUID, keep, 0, keep),
		threadSyscall("restoring the gid", unix.SYS_SETRESGID, keep, 0, keep),
		threadSyscall("clearing the securebits", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, 0, 0),
	)
}

// userNamespacesRefusal says which host setting keeps an unprivileged user
// from creating a user namespace, or "" when none of the known ones does.
func userNamespacesRefusal() string {
	return userNamespacesRefusalFrom(func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	})
}

// userNamespacesRefusalFrom is userNamespacesRefusal over read, which
// answers a /proc/sys path's content or "".
func userNamespacesRefusalFrom(read func(path string) string) string {
	if v := read("/proc/sys/user/max_user_namespaces"); v == "0" {
		return "user namespaces, which this kernel disables (sysctl user.max_user_namespaces=0; set it to a positive number, e.g. 15000)"
	}
	if v := read("/proc/sys/kernel/unprivileged_userns_clone"); v == "0" {
		return "unprivileged user namespaces, which this kernel disables (sysctl kernel.unprivileged_userns_clone=0; set it to 1)"
	}
	if v := read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); v == "1" {
		return "unprivileged user namespaces, which AppArmor restricts (sysctl kernel.apparmor_restrict_unprivileged_userns=1; set it to 0, or give the microvm binary an AppArmor profile with the userns permission)"
	}
	return ""
}

// secbitNoSetuidFixup is SECBIT_NO_SETUID_FIXUP from linux/securebits.h.
const secbitNoSetuidFixup = 1 << 2
