//go:build linux

package guestinit

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// probe is the isolation probe's child (ProbeArg0): it is in the new
// namespaces already (the launcher's clone made them), root of its user
// namespace only; it checks it can do what a guest's init does: make its
// mounts private, mount a tmpfs, an overlay on it and a /proc, and name its
// UTS namespace. It prints what is missing, in the launcher's words.
func probe() int {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, "the probe needs a directory")
		return 2
	}
	dir := os.Args[1]
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintf(os.Stderr, "permission to make mounts private in a new mount namespace: %v", err)
		return 1
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		fmt.Fprintf(os.Stderr, "permission to mount a tmpfs in a user namespace under %s: %v", os.TempDir(), err)
		return 1
	}
	for _, d := range []string{"lower", "upper", "work", "merged", "proc"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "a writable temporary directory: %v", err)
			return 1
		}
	}
	opts := "lowerdir=" + filepath.Join(dir, "lower") + ",upperdir=" + filepath.Join(dir, "upper") + ",workdir=" + filepath.Join(dir, "work")
	if err := unix.Mount("overlay", filepath.Join(dir, "merged"), "overlay", 0, opts); err != nil {
		fmt.Fprintf(os.Stderr, "the overlay filesystem in a user namespace (Linux 5.11 or later; modprobe overlay): %v", err)
		return 1
	}
	if err := unix.Mount("proc", filepath.Join(dir, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		fmt.Fprintf(os.Stderr, "permission to mount /proc for a new PID namespace (a /proc with nothing mounted over parts of it, as container runtimes leave it): %v", err)
		return 1
	}
	if err := unix.Sethostname([]byte("probe")); err != nil {
		fmt.Fprintf(os.Stderr, "permission to set the hostname of a UTS namespace: %v", err)
		return 1
	}
	return 0
}
