package agentd

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The filesystem operations (stat, list, mkdir, move, remove) are additive
// routes of ours; the reference daemon has none. Their paths follow the
// single-file routes' rules: any path the daemon's own uid can reach (the
// same token can exec), a missing path is 400 and never 404, and a path the
// kernel would refuse for its shape alone (a NUL, a component over NAME_MAX)
// is the caller's 400. Unlike the single-file routes they answer with the
// JSON ErrorBody, so every refusal carries a slug.

// opPathFault names what is wrong with a path parameter before the
// filesystem is touched, or "" when it is acceptable.
func opPathFault(name, p string) string {
	if p == "" {
		return name + " query parameter is required"
	}
	if bad := fsPathFault(p); bad != "" {
		return name + ": " + bad
	}
	return ""
}

// fsOpError answers an operating-system error from an fs operation with the
// slug its errno means. what names the operation and path for the detail.
func fsOpError(w http.ResponseWriter, what string, err error) {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		writeError(w, taxonomy.SlugFsFailed, what+": "+err.Error())
		return
	}
	switch errno {
	case unix.ENOENT:
		writeError(w, taxonomy.SlugPathNotFound, what+": no such file or directory")
	case unix.ENOTDIR:
		writeError(w, taxonomy.SlugNotADirectory, what+": a path component is not a directory")
	case unix.EEXIST:
		writeError(w, taxonomy.SlugPathExists, what+": something is already there")
	case unix.ENOTEMPTY:
		writeError(w, taxonomy.SlugDirectoryNotEmpty, what+": the directory is not empty")
	case unix.ENAMETOOLONG, unix.ELOOP:
		writeError(w, taxonomy.SlugMalformedRequest, what+": "+errno.Error())
	default:
		writeError(w, taxonomy.SlugFsFailed, what+": "+errno.Error())
	}
}

// fileType maps st_mode's type bits to the wire's FileType.
func fileType(mode uint32) protocol.FileType {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return protocol.FileTypeDirectory
	case unix.S_IFLNK:
		return protocol.FileTypeSymlink
	case unix.S_IFIFO:
		return protocol.FileTypeFifo
	case unix.S_IFSOCK:
		return protocol.FileTypeSocket
	case unix.S_IFBLK:
		return protocol.FileTypeBlockDevice
	case unix.S_IFCHR:
		return protocol.FileTypeCharDevice
	default:
		return protocol.FileTypeFile
	}
}

// fileInfo describes st for the wire; target is read only for a symlink.
func fileInfo(path, name string, st *unix.Stat_t, target func() (string, error)) protocol.FileInfo {
	fi := protocol.FileInfo{
		Path:  path,
		Name:  name,
		Type:  fileType(st.Mode),
		Size:  uint64(max(st.Size, 0)),
		Mode:  fmt.Sprintf("%04o", st.Mode&0o7777),
		UID:   st.Uid,
		GID:   st.Gid,
		Mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
	}
	if fi.Type == protocol.FileTypeSymlink {
		if t, err := target(); err == nil {
			fi.SymlinkTarget = &t
		}
	}
	return fi
}

// FsStat describes one path, a final symlink described rather than followed.
func (s *Server) FsStat(w http.ResponseWriter, _ *http.Request, p protocol.FsStatParams) {
	if bad := opPathFault("path", p.Path); bad != "" {
		writeError(w, taxonomy.SlugMalformedRequest, bad)
		return
	}
	var st unix.Stat_t
	if err := unix.Lstat(p.Path, &st); err != nil {
		fsOpError(w, "stat "+p.Path, err)
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(p.Path, filepath.Base(p.Path), &st, func() (string, error) { return os.Readlink(p.Path) }))
}

// FsMkdir creates a directory and its missing parents; one already there is
// success with created false.
func (s *Server) FsMkdir(w http.ResponseWriter, _ *http.Request, p protocol.FsMkdirParams) {
	if bad := opPathFault("path", p.Path); bad != "" {
		writeError(w, taxonomy.SlugMalformedRequest, bad)
		return
	}
	mode := uint32(0o755)
	if p.Mode != nil {
		m, ok := parseFileMode(*p.Mode)
		if !ok {
			writeError(w, taxonomy.SlugMalformedRequest, "mode is not octal permission bits (e.g. 0755)")
			return
		}
		mode = m
	}
	// Followed, as mkdir -p does: a symlink to a directory is a directory.
	if st, err := os.Stat(p.Path); err == nil {
		if st.IsDir() {
			writeJSON(w, http.StatusOK, protocol.MkdirResponse{Path: p.Path, Created: false})
			return
		}
		writeError(w, taxonomy.SlugPathExists, "mkdir "+p.Path+": something that is not a directory is there")
		return
	}
	if err := os.MkdirAll(p.Path, os.FileMode(mode&0o777)|specialBitsMode(mode)); err != nil {
		if errors.Is(err, unix.EEXIST) {
			// MkdirAll reports EEXIST when a file took the name meanwhile.
			writeError(w, taxonomy.SlugPathExists, "mkdir "+p.Path+": something that is not a directory is there")
			return
		}
		fsOpError(w, "mkdir "+p.Path, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.MkdirResponse{Path: p.Path, Created: true})
}

// FsMove renames from to to. Without replace the kernel refuses an existing
// destination atomically (renameat2 RENAME_NOREPLACE), so no check-then-act
// window can let a move clobber a file that appeared meanwhile.
func (s *Server) FsMove(w http.ResponseWriter, _ *http.Request, p protocol.FsMoveParams) {
	for _, c := range [][2]string{{"from", p.From}, {"to", p.To}} {
		if bad := opPathFault(c[0], c[1]); bad != "" {
			writeError(w, taxonomy.SlugMalformedRequest, bad)
			return
		}
	}
	replace := p.Replace != nil && *p.Replace
	what := "move " + p.From + " to " + p.To
	var err error
	if replace {
		err = unix.Rename(p.From, p.To)
	} else {
		err = unix.Renameat2(unix.AT_FDCWD, p.From, unix.AT_FDCWD, p.To, unix.RENAME_NOREPLACE)
		if err == unix.EINVAL && !moveIntoItself(p.From, p.To) {
			// A filesystem without RENAME_NOREPLACE: checked, then renamed.
			var st unix.Stat_t
			if unix.Lstat(p.To, &st) == nil {
				err = unix.EEXIST
			} else {
				err = unix.Rename(p.From, p.To)
			}
		}
	}
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, protocol.MoveResponse{From: p.From, To: p.To})
	case err == unix.ENOENT:
		var st unix.Stat_t
		if unix.Lstat(p.From, &st) != nil {
			writeError(w, taxonomy.SlugPathNotFound, what+": nothing is at from")
		} else {
			writeError(w, taxonomy.SlugPathNotFound, what+": the parent of to does not exist")
		}
	case err == unix.EEXIST && !replace:
		writeError(w, taxonomy.SlugPathExists, what+": something is already at to; pass replace=true to replace it")
	case err == unix.EEXIST || err == unix.ENOTEMPTY:
		writeError(w, taxonomy.SlugDirectoryNotEmpty, what+": to is a directory that is not empty")
	case err == unix.EISDIR:
		writeError(w, taxonomy.SlugPathExists, what+": to is a directory and from is not")
	case err == unix.EXDEV:
		writeError(w, taxonomy.SlugMalformedRequest, what+": from and to are on different filesystems; a move never copies")
	case err == unix.EINVAL:
		writeError(w, taxonomy.SlugMalformedRequest, what+": a directory cannot move inside itself")
	default:
		fsOpError(w, what, err)
	}
}

// moveIntoItself reports whether to lies at or under from, which rename
// refuses with the same EINVAL a filesystem without RENAME_NOREPLACE gives.
func moveIntoItself(from, to string) bool {
	f, t := filepath.Clean(from), filepath.Clean(to)
	return t == f || strings.HasPrefix(t, strings.TrimSuffix(f, "/")+"/")
}

// FsRemove removes one entry, or a whole tree with recursive. A symlink is
// removed itself; nothing behind it is touched.
func (s *Server) FsRemove(w http.ResponseWriter, _ *http.Request, p protocol.FsRemoveParams) {
	if bad := opPathFault("path", p.Path); bad != "" {
		writeError(w, taxonomy.SlugMalformedRequest, bad)
		return
	}
	if filepath.Clean(p.Path) == "/" {
		writeError(w, taxonomy.SlugMalformedRequest, "refusing to remove /")
		return
	}
	dir, base := splitParent(p.Path)
	if base == "." || base == ".." {
		writeError(w, taxonomy.SlugMalformedRequest, "refusing to remove a path ending in . or ..; name the directory itself")
		return
	}
	what := "remove " + p.Path
	var st unix.Stat_t
	if err := unix.Lstat(p.Path, &st); err != nil {
		fsOpError(w, what, err)
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlink(p.Path); err != nil {
			fsOpError(w, what, err)
			return
		}
		writeJSON(w, http.StatusOK, protocol.RemoveResponse{Path: p.Path, Removed: 1})
		return
	}
	if p.Recursive == nil || !*p.Recursive {
		if err := unix.Rmdir(p.Path); err != nil {
			if err == unix.EEXIST || err == unix.ENOTEMPTY {
				writeError(w, taxonomy.SlugDirectoryNotEmpty, what+": the directory is not empty; pass recursive=true to remove the tree")
				return
			}
			fsOpError(w, what, err)
			return
		}
		writeJSON(w, http.StatusOK, protocol.RemoveResponse{Path: p.Path, Removed: 1})
		return
	}
	// The parent as the kernel resolves it, as the Lstat above did: a
	// lexically cleaned path would turn x/link/../y into x/y, another tree.
	parent, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fsOpError(w, what, err)
		return
	}
	defer unix.Close(parent)
	n, err := removeTree(parent, base)
	if err != nil {
		s.log.Warn("recursive remove stopped", "path", p.Path, "removed", n, "err", err)
		fsOpError(w, fmt.Sprintf("%s (after %d entries)", what, n), err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.RemoveResponse{Path: p.Path, Removed: n})
}

// splitParent splits p at its last slash, trailing slashes ignored, without
// cleaning: the parent keeps its symlinks and dot-dots for the kernel to
// resolve. A path of one component has the parent ".".
func splitParent(p string) (dir, base string) {
	t := strings.TrimRight(p, "/")
	i := strings.LastIndexByte(t, '/')
	switch {
	case i < 0:
		return ".", t
	case i == 0:
		return "/", t[1:]
	}
	return t[:i], t[i+1:]
}

// removeTree removes the directory name under parent and everything in it,
// working through descriptors so a symlink swapped in mid-walk is removed as
// a link, never followed, and the depth is not bounded by PATH_MAX. It counts
// what it removed; an entry that vanished meanwhile is not an error.
func removeTree(parent int, name string) (uint64, error) {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOTDIR || err == unix.ELOOP {
			// Replaced by a non-directory since the lstat: remove that.
			if err := unix.Unlinkat(parent, name, 0); err != nil && err != unix.ENOENT {
				return 0, err
			}
			return 1, nil
		}
		if err == unix.ENOENT {
			return 0, nil
		}
		return 0, err
	}
	dir := os.NewFile(uintptr(fd), name)
	var n uint64
	for {
		names, rerr := dir.Readdirnames(1024)
		for _, c := range names {
			err := unix.Unlinkat(fd, c, 0)
			switch err {
			case nil:
				n++
			case unix.ENOENT:
			case unix.EISDIR:
				m, err := removeTree(fd, c)
				n += m
				if err != nil {
					dir.Close()
					return n, err
				}
			default:
				dir.Close()
				return n, err
			}
		}
		if rerr != nil || len(names) == 0 {
			break
		}
	}
	dir.Close()
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return n, err
	}
	return n + 1, nil
}

// FsList serves one page of a directory listing (see listDir).
func (s *Server) FsList(w http.ResponseWriter, _ *http.Request, p protocol.FsListParams) {
	if bad := opPathFault("path", p.Path); bad != "" {
		writeError(w, taxonomy.SlugMalformedRequest, bad)
		return
	}
	depth := 1
	if p.Depth != nil {
		if *p.Depth < 1 {
			writeError(w, taxonomy.SlugMalformedRequest, "depth must be at least 1")
			return
		}
		depth = int(min(*p.Depth, 1<<16))
	}
	limit := protocol.DefaultListPageDefault
	if p.Limit != nil {
		if *p.Limit < 1 || *p.Limit > protocol.DefaultMaxListPage {
			writeError(w, taxonomy.SlugMalformedRequest,
				fmt.Sprintf("limit must be between 1 and %d (limits.max_list_page)", protocol.DefaultMaxListPage))
			return
		}
		limit = int(*p.Limit)
	}
	var cursor []string
	if p.Cursor != nil {
		c, ok := parseCursor(*p.Cursor)
		if !ok {
			writeError(w, taxonomy.SlugMalformedRequest, "cursor is not one this route hands out")
			return
		}
		cursor = c
	}
	page, err := listDir(p.Path, depth, cursor, limit)
	if err != nil {
		fsOpError(w, "list "+page.failedAt, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.ListResponse{Path: p.Path, Entries: page.entries, NextCursor: page.next})
}

// parseCursor splits a cursor (the relative path of the last entry of a page)
// into its names. An empty, absolute or unclean path, or one with a NUL or an
// over-long name, was never handed out.
func parseCursor(c string) ([]string, bool) {
	if c == "" || len(c) >= pathMax*4 || strings.IndexByte(c, 0) >= 0 {
		return nil, false
	}
	parts := strings.Split(c, "/")
	for _, n := range parts {
		if n == "" || n == "." || n == ".." || len(n) > nameMax {
			return nil, false
		}
	}
	return parts, true
}

// listPage is one page of listDir's walk.
type listPage struct {
	entries  []protocol.FileInfo
	next     *string
	failedAt string // the directory whose error ended the walk
}

// listDir walks root to depth levels in a fixed order (each directory's names
// byte-sorted, a directory's entries right after it) and returns the limit
// entries that follow cursor in that order. Each directory is read by name
// only and each returned entry stat'ed relative to its directory's
// descriptor, so a page costs a stat per returned entry plus one name read per
// directory visited; subtrees wholly before the cursor are skipped unread.
func listDir(root string, depth int, cursor []string, limit int) (listPage, error) {
	l := &lister{root: root, depth: depth, cursor: cursor, limit: limit,
		page: listPage{entries: []protocol.FileInfo{}}}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		l.page.failedAt = root
		return l.page, err
	}
	err = l.walk(fd, nil, 1)
	if err != nil && err != errPageFull {
		return l.page, err
	}
	return l.page, nil
}

// errPageFull stops the walk once one entry past the page is seen.
var errPageFull = errors.New("page full")

type lister struct {
	root   string
	depth  int
	cursor []string // nil once the walk has passed it
	limit  int
	page   listPage
	last   []string // the last entry emitted, the next page's cursor
}

// walk lists the directory open at fd (which it closes), whose path under
// root is rel, at level (1 for root's own entries).
func (l *lister) walk(fd int, rel []string, level int) error {
	dir := os.NewFile(uintptr(fd), "dir")
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		l.page.failedAt = filepath.Join(l.root, filepath.Join(rel...))
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		child := append(rel[:len(rel):len(rel)], name)
		emit, descend := true, level < l.depth
		if l.cursor != nil {
			switch c := compareWalk(child, l.cursor); {
			case c < 0 && !isPrefix(child, l.cursor):
				continue // wholly before the cursor
			case c < 0, c == 0:
				emit = false // an ancestor of the cursor, or the cursor itself
				if c == 0 {
					l.cursor = nil
				}
			default:
				l.cursor = nil
			}
		}
		var st unix.Stat_t
		if emit {
			if len(l.page.entries) == l.limit {
				next := strings.Join(l.last, "/")
				l.page.next = &next
				return errPageFull
			}
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if err == unix.ENOENT {
					continue // removed since the names were read
				}
				l.page.failedAt = filepath.Join(l.root, filepath.Join(child...))
				return err
			}
			path := filepath.Join(l.root, filepath.Join(child...))
			l.page.entries = append(l.page.entries, fileInfo(path, name, &st, func() (string, error) { return readlinkat(fd, name) }))
			l.last = append(l.last[:0], child...)
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
		}
		if !descend {
			continue
		}
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if err == unix.ENOTDIR || err == unix.ELOOP || err == unix.ENOENT {
				continue // not a directory, a symlink, or gone
			}
			l.page.failedAt = filepath.Join(l.root, filepath.Join(child...))
			return err
		}
		if err := l.walk(sub, child, level+1); err != nil {
			return err
		}
	}
	return nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; size <= pathMax*4; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", unix.ENAMETOOLONG
}

// compareWalk orders two relative paths as the walk visits them: name by
// name, byte-wise, a directory before everything under it.
func compareWalk(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if c := strings.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

// isPrefix reports whether a is a proper ancestor of b.
func isPrefix(a, b []string) bool {
	return len(a) < len(b) && slices.Equal(a, b[:len(a)])
}
