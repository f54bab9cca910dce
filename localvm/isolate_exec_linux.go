//go:build linux

package localvm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/microvms/microvms/localvm/guestinit"
	"golang.org/x/sys/unix"
)

// What a guest executes is never a host path. The guest's init and its
// agentd run from sealed in-memory copies (memfd_create, then
// F_SEAL_WRITE|F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL), the way runc answered
// CVE-2019-5736: a guest holding /proc/<pid>/exe of either holds the copy,
// which nobody can change, and not the emulator's binary or the image
// store's agentd, which a rootless guest's uid (the caller's) owns and could
// otherwise rewrite, chmod or date through that descriptor.
//
// A copy is made once per process and file version, and kept: the emulator
// binary is tens of MiB, and copying it at every launch would be most of a
// launch.

// sealedMax bounds the cache: one copy of the emulator and a few daemons
// (one per image whose artifact carries its own).
const sealedMax = 8

type sealedKey struct {
	dev, ino uint64
	size     int64
	mtime    unix.Timespec
	ctime    unix.Timespec
}

var sealed struct {
	sync.Mutex
	order []sealedKey
	files map[sealedKey]*os.File
	// abi says, for a copy guestInitBinary asked about, whether it holds
	// guestinit.ABI; asked of the launcher's own agentd only, so no other
	// binary (the emulator's own, an image's daemon) is ever scanned.
	abi map[sealedKey]bool
}

// sealedKeyOf is f's identity as the cache keys it: a file changed or
// replaced in place gets a new copy.
func sealedKeyOf(f *os.File) (sealedKey, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return sealedKey{}, err
	}
	return sealedKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// sealedCopy returns a descriptor of a sealed, executable memfd copy of f
// (read from its start); the caller closes it.
func sealedCopy(f *os.File, name string) (*os.File, error) {
	key, err := sealedKeyOf(f)
	if err != nil {
		return nil, err
	}
	sealed.Lock()
	defer sealed.Unlock()
	if c, ok := sealed.files[key]; ok {
		return dupFile(c)
	}
	c, err := newSealedCopy(f, name)
	if err != nil {
		return nil, err
	}
	if sealed.files == nil {
		sealed.files = map[sealedKey]*os.File{}
		sealed.abi = map[sealedKey]bool{}
	}
	if len(sealed.order) >= sealedMax {
		// A guest started from an evicted copy keeps running: its
		// mapping holds the pages, not this descriptor.
		old := sealed.order[0]
		sealed.order = sealed.order[1:]
		sealed.files[old].Close()
		delete(sealed.files, old)
		delete(sealed.abi, old)
	}
	sealed.order = append(sealed.order, key)
	sealed.files[key] = c
	return dupFile(c)
}

// holdsGuestABI reports whether the sealed copy c contains guestinit.ABI:
// a microvm-guest-init of this build, which can then be the guest's init
// (guestInitBinary). A binary without it (one of other sources, an older
// build) is never executed as an init.
func holdsGuestABI(c *os.File) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(c.Fd()), &st); err != nil {
		return false, err
	}
	if st.Size == 0 {
		return false, nil
	}
	b, err := unix.Mmap(int(c.Fd()), 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false, fmt.Errorf("reading the sealed copy: %w", err)
	}
	defer unix.Munmap(b)
	return bytes.Contains(b, []byte(guestinit.ABI)), nil
}

// guestInitBinary is what a guest's init runs from: the sealed copy of the
// microvm-guest-init beside the launcher's own agentd (own, the
// AgentdLauncher's bin, which this install configured; make build, the
// wheel and the npm packages put the two together) when it holds this
// build's guest ABI, because it starts in about a millisecond where the
// emulator's binary spends tens in package initialisers, twice per guest
// (the init and its second stage; issue 52); otherwise the emulator's
// sealed copy of itself, as before. Never one beside the agentd an image's
// artifact carries, whatever it holds: the init sees the host's tree before
// it pivots and runs before the syscall filter, so only code this install
// shipped may be it.
func guestInitBinary(own string) (*os.File, error) {
	src, err := os.Open(guestInitPath(own))
	if errors.Is(err, fs.ErrNotExist) {
		return sealedSelf() // an install without it (a bare go build of agentd)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", guestinit.BinaryName, err)
	}
	defer src.Close()
	key, err := sealedKeyOf(src)
	if err != nil {
		return nil, err
	}
	c, err := sealedCopy(src, guestinit.BinaryName)
	if err != nil {
		return nil, err
	}
	sealed.Lock()
	abi, known := sealed.abi[key]
	sealed.Unlock()
	if !known {
		if abi, err = holdsGuestABI(c); err != nil {
			c.Close()
			return nil, err
		}
		sealed.Lock()
		if _, cached := sealed.files[key]; cached {
			sealed.abi[key] = abi
		}
		sealed.Unlock()
	}
	if abi {
		return c, nil
	}
	c.Close()
	return sealedSelf()
}

// dupFile is a descriptor of its own for f: a launch holds it while an
// eviction may close the cached one.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func newSealedCopy(f *os.File, name string) (*os.File, error) {
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate(name, flags|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate(name, flags) // a kernel before 6.3: every memfd is executable
	}
	if err != nil {
		return nil, isolationError("an executable memfd for the guest's "+name+" (memfd_create; vm.memfd_noexec must be below 2)", err)
	}
	c := os.NewFile(uintptr(fd), "memfd:"+name)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := io.Copy(c, f); err != nil {
		c.Close()
		return nil, fmt.Errorf("copying %s into memory: %w", name, err)
	}
	if err := unix.Fchmod(fd, 0o555); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		c.Close()
		return nil, fmt.Errorf("sealing the copy of %s: %w", name, err)
	}
	return c, nil
}

// sealedSelf is the sealed copy of the running emulator, which the guest's
// init is executed from.
func sealedSelf() (*os.File, error) {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, isolationError("/proc/self/exe (the emulator re-executes itself as the guest's init)", err)
	}
	defer self.Close()
	return sealedCopy(self, "microvms-emulator")
}
