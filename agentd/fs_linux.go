package agentd

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/tarx"
)

// errNotReadable is a fifo or socket at a read's path.
var errNotReadable = errors.New("not a file that can be read without a peer")

// openForRead opens path without blocking: a fifo with no writer would
// otherwise hold open() (and an OS thread) forever. A fifo or socket is
// refused; anything else keeps its non-blocking descriptor, which a regular
// file ignores and a device answers through the runtime poller.
func openForRead(path string) (*os.File, os.FileInfo, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK:
		unix.Close(fd)
		return nil, nil, errNotReadable
	}
	file := os.NewFile(uintptr(fd), path)
	info, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, nil, err
	}
	return file, info, nil
}

func pseudoFS(file *os.File) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(file.Fd()), &st); err != nil {
		return true
	}
	switch st.Type {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.DEBUGFS_MAGIC, unix.TRACEFS_MAGIC,
		unix.SECURITYFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC:
		return true
	}
	return false
}

// tmpfileFlag is O_TMPFILE. A test sets it to 0 to play a filesystem
// without it (9p, some FUSE): opening a directory for writing is then
// EISDIR, the answer of a kernel that predates the flag.
var tmpfileFlag = unix.O_TMPFILE

// createTempIn opens an anonymous file (O_TMPFILE) in dir, so an upload that
// fails, or a daemon killed mid-upload, leaves no name behind. A filesystem
// without O_TMPFILE gets a named temp file, returned so it can be removed.
func createTempIn(dir string) (*os.File, string, error) {
	fd, err := unix.Open(dir, unix.O_WRONLY|tmpfileFlag|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), filepath.Join(dir, "(anonymous)")), "", nil
	}
	if err != unix.EOPNOTSUPP && err != unix.EISDIR && err != unix.EINVAL {
		return nil, "", &os.PathError{Op: "open", Path: dir, Err: err}
	}
	name := filepath.Join(dir, tarx.TempName())
	file, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", err
	}
	return file, name, nil
}

// commitTemp gives the finished temp file the name target, replacing what was
// there in one step.
func commitTemp(tmp *os.File, named, target string) error {
	if named != "" {
		return os.Rename(named, target)
	}
	dir, err := unix.Open(filepath.Dir(target), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(target), Err: err}
	}
	defer unix.Close(dir)
	if err := tarx.CommitAnonymous(int(tmp.Fd()), dir, filepath.Base(target)); err != nil {
		return &os.PathError{Op: "link", Path: target, Err: err}
	}
	return nil
}

// writeBehindBytes is how much of an upload lands between two writeback kicks.
const writeBehindBytes = 8 << 20

// writeBehind starts writeback of each writeBehindBytes a durable upload
// (?sync=true) lands, so the disk works while the rest is still arriving and
// the fsync before the commit finds most of the file already written instead
// of starting all of it then. SYNC_FILE_RANGE_WRITE only starts writeback (it neither waits nor
// syncs metadata); durability still comes from that fsync. A failure here is
// ignored for the same reason: the fsync reports it.
type writeBehind struct {
	w           io.Writer
	fd          int
	off, kicked int64
	// kick starts writeback of n bytes at off; nil is startWriteback. Tests
	// record the kicks: the file's bytes are the same whenever they come.
	kick func(fd int, off, n int64)
}

func (w *writeBehind) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.off += int64(n)
	if w.off-w.kicked >= writeBehindBytes {
		kick := w.kick
		if kick == nil {
			kick = startWriteback
		}
		kick(w.fd, w.kicked, w.off-w.kicked)
		w.kicked = w.off
	}
	return n, err
}

func startWriteback(fd int, off, n int64) {
	_ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// isFull is a write the filesystem itself refused for space or quota.
func isFull(err error) bool { return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) }

// openAnonymous prefers O_TMPFILE, which never has a name; filesystems
// without it get a create-then-unlink, named for a few microseconds.
func openAnonymous(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), filepath.Join(dir, "agentd-spool")), nil
	}
	file, err := os.CreateTemp(dir, ".agentd-spool-*")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(file.Name()); err != nil {
		file.Close()
		return nil, err
	}
	return file, nil
}

func unixSpecialBits(m os.FileMode) uint32 {
	var b uint32
	if m&os.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

func specialBitsMode(perm uint32) os.FileMode {
	var m os.FileMode
	if perm&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if perm&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if perm&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

func statOwner(fi os.FileInfo) ([2]int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]int{}, false
	}
	return [2]int{int(st.Uid), int(st.Gid)}, true
}

// processUmask reads the umask without changing it: umask(2) can only be
// read by setting it, which would race with every other goroutine creating
// files.
func processUmask() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return uint32(m)
				}
			}
		}
	}
	return 0o022
}
