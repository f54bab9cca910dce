// Package tarx extracts and packs uncompressed tar archives for agentd's
// /v1/fs/tar routes.
//
// Extraction is confined to one root directory by the kernel, not by string
// checks alone: the root is opened once and every member is created relative
// to a directory descriptor that openat2 reached with RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS. A lexical check on member names
// judges a member at the depth its name implies, while a write lands wherever
// the filesystem says; once an archive has created its own symlink those two
// disagree, so only a resolver that refuses to traverse symlinks makes them the
// same path. On a kernel without openat2 extraction is refused (ErrNoOpenat2):
// there is deliberately no fallback to a weaker check.
//
// The acceptance rules follow the CPython tarfile "data" filter as the
// reference daemon applies it: in-tree symlinks are kept, absolute link
// targets are refused, relative targets are judged lexically (normpath) from
// the symlink's own directory or, for hard links, from the archive root, and a
// symlink's target is also resolved against the tree as the data filter's
// realpath check does (symlinks present are expanded, missing names and files
// are taken lexically) and refused when it ends above the root. Because a
// later symlink can change how an earlier link resolves, a symlink member is
// also refused when, with it in place, a link already written would resolve
// above the root; device and fifo members
// are refused; member count and total size are capped; modes are masked to
// 0755 and directory modes are applied only after every member has landed.
// Options.Exact sets those rules aside for a tree this system saved: every
// mode bit, owners, times and symlink targets as the archive has them, the
// kernel's confinement unchanged.
//
// A regular member is atomic: its content goes to an anonymous O_TMPFILE in
// its directory and takes the name (link, or link beside and rename over)
// only once complete, so a member that fails midway never costs the file that
// was there, and a crash leaves no name behind. Runs of zero blocks are left
// as holes, so a sparse member costs the disk its data, not its expansion. A
// device node, fifo or socket in the way is never replaced. Check reads a
// whole archive's structure (through its end-of-archive marker) without
// writing, so a caller holding the archive can refuse a cut or malformed one
// before anything lands.
//
// This package must not know about HTTP: callers map its typed errors to
// statuses.
package tarx

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Caps bound one archive. They are checked against what the headers declare,
// before the member's bytes are written, so a header that lies about a huge
// size is refused without writing anything for it.
type Caps struct {
	MaxMembers int64
	MaxBytes   int64
	// Ctx, when set, stops a walk, a pack or an extraction with its error
	// once done: the work is the request's, and ends when its client goes.
	Ctx context.Context
}

// stopped is Ctx's error, or nil without one.
func (c Caps) stopped() error {
	if c.Ctx == nil {
		return nil
	}
	return c.Ctx.Err()
}

// Options configure one extraction.
type Options struct {
	Caps Caps
	// Pace is called after each write of member content with the byte count
	// just written. A non-nil error stops extraction and is returned wrapped,
	// so the caller can detect its own type with errors.As (the disk guard).
	Pace func(n int64) error
	Log  *slog.Logger
	// Openat2 replaces unix.Openat2, so a test can play an old kernel.
	Openat2 func(dirfd int, path string, how *unix.OpenHow) (int, error)
	// Exact keeps what the archive says instead of the data filter's
	// defaults: every mode bit (setuid, setgid, sticky, group and other
	// write), owners, modification times to the nanosecond (each file's as
	// its content lands, directories' after every member, deepest first, so
	// a child's arrival never moves its parent's), symlink targets as
	// written (absolute or climbing: a link is never followed while
	// extracting, the kernel's confinement sees to that), and a directory
	// member naming the root sets the root's own. Hard links stay confined
	// to the tree. It is for putting back a tree this system saved (a
	// checkpoint's restore), which must not need a shell and one process
	// per distinct time in the guest to finish the job.
	Exact bool
}

// Result counts what was extracted.
type Result struct {
	Members int64
	Bytes   int64
}

// MemberError is a member the archive must not contain. The name travels with
// the refusal because a bare "bad archive" sends the caller re-reading a whole
// tree.
type MemberError struct {
	Member string
	Reason string
}

func (e *MemberError) Error() string {
	return fmt.Sprintf("refused tar member %s: %s", e.Member, e.Reason)
}

// LimitError is an archive over a cap.
type LimitError struct{ Detail string }

func (e *LimitError) Error() string { return e.Detail }

// MalformedError is an archive that is truncated or not a tar at all.
type MalformedError struct{ Err error }

func (e *MalformedError) Error() string {
	return "malformed or truncated tar archive: " + e.Err.Error()
}
func (e *MalformedError) Unwrap() error { return e.Err }

// ErrNoOpenat2 means the kernel answered ENOSYS for openat2 (Linux < 5.6).
var ErrNoOpenat2 = errors.New("the kernel has no openat2 (Linux 5.6 or newer is required), so confined extraction is impossible")

// confinement is the resolve set every lookup inside the root uses.
// RESOLVE_BENEATH alone would still follow an in-tree symlink and land a
// write at the wrong depth; RESOLVE_NO_SYMLINKS is what makes the path the
// kernel walks the path the lexical check judged. RESOLVE_NO_MAGICLINKS is
// implied by it and named anyway so the guarantee does not rest on that.
const confinement = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// maxCachedDirs bounds the directory descriptors kept open between members.
const maxCachedDirs = 256

// Extract reads an archive from r and creates its members under root,
// creating root if absent. Each member lands whole or not at all; members
// that landed before a refusal stay (across members the extraction is not
// transactional, and a retry converges). An archive that ends without its
// end-of-archive marker is a MalformedError, found only after its members:
// callers that can should Check first.
func Extract(root string, r io.Reader, opt Options) (Result, error) {
	if opt.Openat2 == nil {
		opt.Openat2 = unix.Openat2
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	x := &extractor{opt: opt, dirs: map[string]int{}}
	defer x.close()
	if err := x.openRoot(root); err != nil {
		return Result{}, err
	}
	return x.run(r)
}

type extractor struct {
	opt  Options
	dirs map[string]int // normalized dir path ("" is the root) → O_PATH fd
	buf  []byte
	res  Result
	// modes of directories, replayed after all content: a 0500 directory
	// applied at creation would block writes of its own children (and,
	// with Exact, their owners and times, which a child's arrival moves).
	dirModes map[string]dirMode
	// links are the symlinks written so far, by path; dependents maps a
	// tree path to the links whose resolution consulted it.
	links      map[string]*linkRec
	dependents map[string]map[string]struct{}
	walkSteps  int64 // components resolved so far, against maxWalkSteps
}

type dirMode struct {
	parts []string
	mode  uint32
	meta  *meta // with Exact only
}

// meta is what Exact applies beyond the mode: the member's owner and times.
type meta struct {
	uid, gid int
	times    [2]unix.Timespec // access, modification
}

func metaOf(hdr *tar.Header) *meta {
	m := &meta{uid: hdr.Uid, gid: hdr.Gid}
	at := hdr.AccessTime
	if at.IsZero() {
		at = hdr.ModTime // as tar and touch -d leave it
	}
	m.times[0] = unix.NsecToTimespec(at.UnixNano())
	m.times[1] = unix.NsecToTimespec(hdr.ModTime.UnixNano())
	return m
}

func (x *extractor) open2(dirfd int, path string, how *unix.OpenHow) (int, error) {
	// EAGAIN is the kernel declining to vouch for a lookup that raced with a
	// rename; EINTR is a signal. Both are worth a bounded retry.
	for i := 0; ; i++ {
		fd, err := x.opt.Openat2(dirfd, path, how)
		if (err == unix.EAGAIN || err == unix.EINTR) && i < 8 {
			continue
		}
		return fd, err
	}
}

func (x *extractor) openRoot(root string) error {
	// Probe before creating anything, so an old kernel leaves no directory
	// behind for a request that is refused.
	probe := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC}
	fd, err := x.open2(unix.AT_FDCWD, "/", &probe)
	if err == unix.ENOSYS {
		return ErrNoOpenat2
	}
	if err == nil {
		unix.Close(fd)
	}
	if err := os.MkdirAll(root, 0o777); err != nil {
		return fmt.Errorf("create extraction root %s: %w", root, err)
	}
	// The root is the caller's own choice, not the archive's, so symlinks on
	// the way to it are followed; only what lies inside is confined.
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	fd, err = x.open2(unix.AT_FDCWD, root, &how)
	if err == unix.ENOSYS {
		return ErrNoOpenat2
	}
	if err != nil {
		return fmt.Errorf("open extraction root %s: %w", root, err)
	}
	x.dirs[""] = fd
	return nil
}

func (x *extractor) close() {
	for k, fd := range x.dirs {
		unix.Close(fd)
		delete(x.dirs, k)
	}
}

func (x *extractor) run(r io.Reader) (Result, error) {
	er := &endReader{r: r}
	tr := tar.NewReader(er)
	x.dirModes = map[string]dirMode{}
	for {
		er.mark()
		hdr, err := tr.Next()
		if err == io.EOF {
			if !er.sawEnd() {
				return x.res, &MalformedError{Err: ErrNoEndMarker}
			}
			break
		}
		// ErrInsecurePath comes with a usable header when GODEBUG asks for it;
		// this package applies its own, stricter rules to the name below.
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			return x.res, &MalformedError{Err: err}
		}
		if err := er.headerFault(hdr); err != nil {
			return x.res, err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		x.res.Members++
		if x.opt.Caps.MaxMembers > 0 && x.res.Members > x.opt.Caps.MaxMembers {
			return x.res, &LimitError{Detail: fmt.Sprintf("archive has more than %d members (limits.max_tar_members)", x.opt.Caps.MaxMembers)}
		}
		if err := x.opt.Caps.stopped(); err != nil {
			return x.res, err
		}
		if err := x.member(tr, hdr); err != nil {
			return x.res, err
		}
		// Whatever a member left unread (a link or directory that declares
		// content) is read here, not inside Next, so the bytes Next reads
		// are only padding and headers and the end-marker check stays exact.
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return x.res, &MalformedError{Err: err}
		}
	}
	if err := x.applyDirModes(); err != nil {
		return x.res, err
	}
	return x.res, nil
}

func (x *extractor) member(tr *tar.Reader, hdr *tar.Header) error {
	name := hdr.Name
	parts, ok := Normalize(name)
	if !ok {
		return &MemberError{name, "path escapes the extraction root"}
	}
	if len(parts) == 0 {
		// "./" is how GNU tar and many packers name the top directory; as a
		// directory it is the root, which exists. Anything else here would
		// replace the root and redirect every later member.
		if hdr.Typeflag == tar.TypeDir {
			if x.opt.Exact {
				x.dirModes[""] = dirMode{nil, uint32(hdr.Mode & 0o7777), metaOf(hdr)}
			}
			return nil
		}
		return &MemberError{name, "only a directory member may name the extraction root"}
	}
	mode := uint32(hdr.Mode&0o7777) & 0o755
	var m *meta
	if x.opt.Exact {
		mode, m = uint32(hdr.Mode&0o7777), metaOf(hdr)
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return &MemberError{name, "device and fifo members are not extractable"}
	case tar.TypeDir:
		if _, werr := x.makeDirs(parts, true); werr != nil {
			return werr.refusal(name, "")
		}
		x.dirModes[strings.Join(parts, "/")] = dirMode{parts, mode, m}
		return nil
	case tar.TypeSymlink:
		return x.symlink(name, parts, hdr.Linkname, m)
	case tar.TypeLink:
		return x.hardlink(name, parts, hdr.Linkname)
	case tar.TypeReg, '\x00', tar.TypeCont, tar.TypeGNUSparse:
		return x.file(tr, name, parts, hdr.Size, mode, m)
	default:
		return &MemberError{name, fmt.Sprintf("member type %q is not extractable", hdr.Typeflag)}
	}
}
