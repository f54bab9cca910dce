//go:build linux

package localvm

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// An image's root on the host's disk holds the image's own ids: a file the
// image gives to uid 1000 is owned by host uid 1000 there, as an extracted
// layer is. A guest started by root maps its ids to a range of its own
// (guest uid n is host uid base+n), so without help every image file would
// be unmapped in the guest: shown as nobody, and out of overlayfs's reach
// for a copy-up. The image root is therefore given to the guest through an
// idmapped mount (mount_setattr(2) with MOUNT_ATTR_IDMAP) carrying the
// guest's own mapping: on-disk id n is host id base+n through it, which is
// guest id n. One extracted root serves every guest, whatever its range,
// with no per-guest copy or chown, and the files on disk never change
// owner.

// userNamespaceHolderArg0 is the child whose clone makes a user namespace
// with a guest's mapping: its descriptor is taken, then the child is
// killed. Were it to run, it would read its stdin (/dev/null) and exit
// (Init dispatches it).
const userNamespaceHolderArg0 = "microvms-emulator-userns-holder"

// mappingNamespace returns a descriptor of a user namespace mapped as m
// maps a guest. The namespace lives as long as the descriptor.
func mappingNamespace(m idMapping) (*os.File, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{userNamespaceHolderArg0}
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER,
		UidMappings: m.uids, GidMappings: m.gids, GidMappingsEnableSetgroups: m.setgroups}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("making a user namespace with the guest's mapping: %w", err)
	}
	ns, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user")
	// Killed, not asked to exit: the namespace lives on in ns, and the
	// child would otherwise start the emulator's whole runtime (its package
	// initialisers: tens of milliseconds for the microvm binary) before it
	// could read a byte, on every launch of an image guest as root.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return nil, fmt.Errorf("opening the mapping's user namespace: %w", err)
	}
	return ns, nil
}

// mountIDMapped mounts src at target (an existing directory) through m's
// mapping, read as the guest reads it. Only root makes one: an unprivileged
// guest maps the caller's own uid, which owns the whole image already.
func mountIDMapped(src, target string, m idMapping) error {
	ns, err := mappingNamespace(m)
	if err != nil {
		return err
	}
	defer ns.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("cloning the image's root for an idmapped mount: %w", err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("idmapping the image's root (a filesystem with idmapped mounts, Linux 5.12 or later): %w", err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching the idmapped image root: %w", err)
	}
	return nil
}
