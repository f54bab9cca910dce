//go:build unix

package client

import "golang.org/x/sys/unix"

// freeBytes is the space an unprivileged writer may still take on the
// filesystem holding dir.
func freeBytes(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
