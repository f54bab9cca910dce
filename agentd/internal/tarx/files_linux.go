//go:build linux

package tarx

// Regular members: content written to an anonymous temp file (holes kept
// sparse) and committed under its name in one step, and the directory walk
// every write goes through.

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

func (x *extractor) file(tr *tar.Reader, name string, parts []string, size int64, mode uint32, m *meta) error {
	if size < 0 {
		return &MemberError{name, "negative size"}
	}
	if x.opt.Caps.MaxBytes > 0 && (size > x.opt.Caps.MaxBytes || x.res.Bytes+size > x.opt.Caps.MaxBytes) {
		return &LimitError{Detail: fmt.Sprintf("archive exceeds %d bytes of member content (limits.max_tar_bytes)", x.opt.Caps.MaxBytes)}
	}
	if err := checkName(name); err != nil {
		return err
	}
	parent, leaf, werr := x.parentOf(parts)
	if werr != nil {
		return werr.refusal(name, "")
	}
	if err := refuseSpecial(parent, leaf); err != nil {
		return (&walkError{leaf, err}).refusal(name, "")
	}
	// The content goes to an anonymous file in the member's directory and
	// takes the name only once complete: a member that fails midway (a cut
	// archive, a full disk, the reserve, a crash) never costs the file that
	// was there, and leaves nothing behind.
	fd, named, err := x.tempIn(parent)
	if err != nil {
		return (&walkError{leaf, err}).refusal(name, "")
	}
	committed := false
	defer func() {
		unix.Close(fd)
		if !committed && named != "" {
			_ = unix.Unlinkat(parent, named, 0)
		}
	}()
	if x.buf == nil {
		x.buf = make([]byte, 1<<20)
	}
	var written int64
	for written < size {
		if err := x.opt.Caps.stopped(); err != nil {
			return err
		}
		want := int64(len(x.buf))
		if size-written < want {
			want = size - written
		}
		n, rerr := io.ReadFull(tr, x.buf[:want])
		if n > 0 {
			landed, werr := writeHoley(fd, x.buf[:n], written)
			if werr != nil {
				return fmt.Errorf("write %s: %w", name, werr)
			}
			written += int64(n)
			x.res.Bytes += int64(n)
			if x.opt.Pace != nil && landed > 0 {
				if perr := x.opt.Pace(landed); perr != nil {
					return fmt.Errorf("extracting %s: %w", name, perr)
				}
			}
		}
		if rerr != nil {
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				return &MalformedError{Err: fmt.Errorf("member %s ends after %d of its %d declared bytes", name, written, size)}
			}
			return &MalformedError{Err: rerr}
		}
	}
	// Trailing holes were skipped, not written: the length comes from here.
	if err := unix.Ftruncate(fd, size); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	// Applied once the content is in: a 0444 file written at 0444 is fine for
	// this process, but the order keeps one rule for every member kind.
	if m != nil {
		// The owner first: a chown clears setuid and setgid.
		if err := applyMeta(fd, mode, m); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	} else if err := unix.Fchmod(fd, mode); err != nil {
		x.opt.Log.Warn("could not apply archive mode", "member", name, "err", err)
	}
	if err := x.commit(fd, named, parent, leaf); err != nil {
		return (&walkError{leaf, err}).refusal(name, "")
	}
	committed = true
	x.forget(parts)
	x.setLink(strings.Join(parts, "/"), nil)
	return nil
}

// holeBytes is the unit writeHoley checks for zeros: a filesystem block.
const holeBytes = 4096

var zeroBlock [holeBytes]byte

// writeHoley writes b at off, skipping every whole block-aligned run of
// zeros, and returns how many bytes it actually wrote. A sparse member is
// expanded by archive/tar into the zeros of its holes; written out they would
// turn a few KiB on the wire into gigabytes on disk, so they stay holes (any
// run of zero blocks does, whatever the member type). The file's length is
// set by the caller once all content is in.
func writeHoley(fd int, b []byte, off int64) (int64, error) {
	var landed int64
	for len(b) > 0 {
		// Up to the next block boundary of the file.
		n := holeBytes - int(off%holeBytes)
		if n > len(b) {
			n = len(b)
		}
		chunk := b[:n]
		if n == holeBytes && bytes.Equal(chunk, zeroBlock[:]) {
			b, off = b[n:], off+int64(n)
			continue
		}
		// Coalesce the following non-zero blocks into one write.
		for n < len(b) {
			m := min(holeBytes, len(b)-n)
			if m == holeBytes && bytes.Equal(b[n:n+m], zeroBlock[:]) {
				break
			}
			n += m
		}
		if err := pwriteAll(fd, b[:n], off); err != nil {
			return landed, err
		}
		landed += int64(n)
		b, off = b[n:], off+int64(n)
	}
	return landed, nil
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// refuseSpecial answers EPERM when leaf is a device node, fifo or socket:
// extraction never replaces one (on a guest the name may be /dev/null).
func refuseSpecial(parent int, leaf string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, leaf, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil // missing, or the write below reports why
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO, unix.S_IFSOCK:
		return errSpecialInTheWay
	}
	return nil
}

// errSpecialInTheWay marks a device node, fifo or socket where a member would land.
var errSpecialInTheWay = errors.New("a device node, fifo or socket is in the way, and extraction never replaces one")

// tempIn opens an anonymous file (O_TMPFILE) in the directory parent. A
// filesystem without O_TMPFILE gets a named temp file instead, whose name is
// returned so a failure can remove it.
func (x *extractor) tempIn(parent int) (fd int, named string, err error) {
	how := unix.OpenHow{Flags: unix.O_WRONLY | unix.O_TMPFILE | unix.O_CLOEXEC, Mode: 0o600, Resolve: confinement}
	fd, err = x.open2(parent, ".", &how)
	if err == nil {
		return fd, "", nil
	}
	if err != unix.EOPNOTSUPP && err != unix.EISDIR && err != unix.EINVAL {
		return -1, "", err
	}
	for range 16 {
		named = TempName()
		how := unix.OpenHow{Flags: unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_CLOEXEC, Mode: 0o600, Resolve: confinement}
		fd, err = x.open2(parent, named, &how)
		if err != unix.EEXIST {
			return fd, named, err
		}
	}
	return -1, "", err
}

// commit gives the finished content its name: linked straight to leaf when
// the name is free, otherwise linked beside it and renamed over it, which
// replaces a file or symlink in one step (a directory in the way stays, and
// the rename says so).
func (x *extractor) commit(fd int, named string, parent int, leaf string) error {
	if named != "" {
		return unix.Renameat(parent, named, parent, leaf)
	}
	return CommitAnonymous(fd, parent, leaf)
}

// CommitAnonymous gives the O_TMPFILE file fd the name leaf in dirfd: linked
// straight there when the name is free, otherwise linked beside it under a
// temp name and renamed over it, which replaces a file or symlink in one step
// (a directory in the way stays, and the rename says so). A crash can leave a
// name only between that link and the rename.
func CommitAnonymous(fd, dirfd int, leaf string) error {
	err := LinkAnonymous(fd, dirfd, leaf)
	if err != unix.EEXIST {
		return err
	}
	for range 16 {
		tmp := TempName()
		err = LinkAnonymous(fd, dirfd, tmp)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return err
		}
		if err = unix.Renameat(dirfd, tmp, dirfd, leaf); err != nil {
			_ = unix.Unlinkat(dirfd, tmp, 0)
		}
		return err
	}
	return err
}

// LinkAnonymous gives an O_TMPFILE file the name leaf in dirfd. AT_EMPTY_PATH
// needs CAP_DAC_READ_SEARCH; without it the /proc/self/fd link does the same.
func LinkAnonymous(fd, dirfd int, leaf string) error {
	err := unix.Linkat(fd, "", dirfd, leaf, unix.AT_EMPTY_PATH)
	if err == unix.ENOENT || err == unix.EPERM {
		err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, leaf, unix.AT_SYMLINK_FOLLOW)
	}
	return err
}

// TempName is the name a temp file takes for the moments it has one: short,
// so it fits beside a 255-byte name, and hidden.
func TempName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return ".agentd-" + hex.EncodeToString(b[:])
}

// clear removes a non-directory name so a link or file can take its place.
// A directory in the way stays and the caller reports it.
func (x *extractor) clear(parent int, leaf string) error {
	if err := refuseSpecial(parent, leaf); err != nil {
		return err
	}
	err := unix.Unlinkat(parent, leaf, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	return err
}

// forget drops a cached descriptor for a name that was just replaced. Names
// are only cached once verified as directories and directories are never
// unlinked, so this is belt and braces for the cache's invariant.
func (x *extractor) forget(parts []string) {
	key := strings.Join(parts, "/")
	if fd, ok := x.dirs[key]; ok && key != "" {
		unix.Close(fd)
		delete(x.dirs, key)
	}
}

func (x *extractor) parentOf(parts []string) (int, string, *walkError) {
	fd, werr := x.makeDirs(parts[:len(parts)-1], true)
	return fd, parts[len(parts)-1], werr
}

// makeDirs returns a descriptor for the directory at parts, walking one
// component at a time from the nearest cached ancestor so the refusal can
// name the component the kernel stopped at. With create it makes missing
// directories (0777 before umask; the archive's mode comes later). The
// returned descriptor belongs to the cache.
func (x *extractor) makeDirs(parts []string, create bool) (int, *walkError) {
	key := strings.Join(parts, "/")
	if fd, ok := x.dirs[key]; ok {
		return fd, nil
	}
	start := len(parts)
	var cur int
	for ; start >= 0; start-- {
		if fd, ok := x.dirs[strings.Join(parts[:start], "/")]; ok {
			cur = fd
			break
		}
	}
	if len(x.dirs)+len(parts)-start > maxCachedDirs {
		x.trimCache()
		// The root always survives trimming, so restart from there.
		start, cur = 0, x.dirs[""]
	}
	for i := start; i < len(parts); i++ {
		if create {
			if err := unix.Mkdirat(cur, parts[i], 0o777); err != nil && err != unix.EEXIST {
				return -1, &walkError{parts[i], err}
			}
		}
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: confinement}
		fd, err := x.open2(cur, parts[i], &how)
		if err != nil {
			return -1, &walkError{parts[i], err}
		}
		x.dirs[strings.Join(parts[:i+1], "/")] = fd
		cur = fd
	}
	return cur, nil
}

func (x *extractor) trimCache() {
	for k, fd := range x.dirs {
		if k != "" {
			unix.Close(fd)
			delete(x.dirs, k)
		}
	}
}

// applyDirModes replays directory modes deepest first, so a directory made
// read-only cannot block the chmod of something beneath it. A failure is
// logged, not fatal: the content is already right.
func (x *extractor) applyDirModes() error {
	list := make([]dirMode, 0, len(x.dirModes))
	for _, d := range x.dirModes {
		list = append(list, d)
	}
	sort.Slice(list, func(i, j int) bool { return len(list[i].parts) > len(list[j].parts) })
	for _, d := range list {
		var fd int
		var err error
		how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: confinement}
		if len(d.parts) == 0 {
			fd, err = x.open2(x.dirs[""], ".", &how) // the root, named by an Exact archive's "./"
		} else {
			parent, leaf, werr := x.parentOf(d.parts)
			if werr != nil {
				if d.meta != nil {
					return fmt.Errorf("extract %s/: %w", strings.Join(d.parts, "/"), werr.err)
				}
				x.opt.Log.Warn("could not apply archive mode", "dir", strings.Join(d.parts, "/"), "err", werr.err)
				continue
			}
			fd, err = x.open2(parent, leaf, &how)
		}
		if err == nil {
			if d.meta != nil {
				err = applyMeta(fd, d.mode, d.meta)
			} else {
				err = unix.Fchmod(fd, d.mode)
			}
			unix.Close(fd)
		}
		if err != nil && d.meta != nil {
			return fmt.Errorf("extract %s/: %w", strings.Join(d.parts, "/"), err)
		}
		if err != nil {
			x.opt.Log.Warn("could not apply archive mode", "dir", strings.Join(d.parts, "/"), "err", err)
		}
	}
	return nil
}

// applyMeta gives the open file or directory fd an Exact member's owner,
// mode and times, in that order: a chown clears setuid and setgid, and the
// times go last so nothing after them moves the change they record.
func applyMeta(fd int, mode uint32, m *meta) error {
	if err := unix.Fchown(fd, m.uid, m.gid); err != nil {
		return fmt.Errorf("owner %d:%d: %w", m.uid, m.gid, err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("mode %04o: %w", mode, err)
	}
	if err := futimens(fd, &m.times); err != nil {
		return fmt.Errorf("times: %w", err)
	}
	return nil
}

// futimens sets fd's access and modification times (utimensat with a NULL
// path: x/sys has no nanosecond call on a descriptor).
func futimens(fd int, ts *[2]unix.Timespec) error {
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// walkError is a confined lookup or creation that stopped, and where.
type walkError struct {
	component string
	err       error
}

// refusal maps the errno to who must act. ELOOP (a symlink on the way),
// EXDEV (a resolution leaving the root), EACCES, and the type clashes
// ENOTDIR/EISDIR/EEXIST/EPERM are all the archive's doing and answer 400
// naming the member; anything else (ENOSPC, EIO, ...) is this machine's and
// stays an I/O error.
func (w *walkError) refusal(member, context string) error {
	var cause string
	switch w.err {
	case unix.ELOOP:
		cause = "a symbolic link is in the way, and extraction never follows one"
	case unix.EXDEV:
		cause = "the path resolves outside the extraction root"
	case unix.EACCES:
		cause = "directory permissions refuse the write"
	case unix.ENOTDIR:
		cause = "a non-directory is in the way"
	case unix.EISDIR, unix.EEXIST:
		cause = "a directory is in the way"
	case unix.EPERM:
		cause = "the operation is not permitted on this member"
	case unix.ENAMETOOLONG:
		cause = "the name is longer than the filesystem allows"
	case errSpecialInTheWay:
		cause = errSpecialInTheWay.Error()
	case unix.ENOENT:
		if context != "" {
			cause = "it is not in the archive"
			break
		}
		return fmt.Errorf("extract %s at %s: %w", member, w.component, w.err)
	default:
		return fmt.Errorf("extract %s at %s: %w", member, w.component, w.err)
	}
	return &MemberError{member, fmt.Sprintf("%scannot create under %s: %s", context, w.component, cause)}
}
