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
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
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
	// applied at creation would block writes of its own children.
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
	x.applyDirModes()
	return x.res, nil
}

// ErrNoEndMarker is an archive that stops without its two zero blocks: cut at
// a member boundary, it would otherwise read as a shorter, complete archive.
var ErrNoEndMarker = errors.New("the archive ends without its end-of-archive marker (two zero blocks), so it was cut short")

// endReader tells an archive that ends with its end-of-archive marker from one
// cut at a member boundary: archive/tar answers io.EOF for both. It counts the
// zero bytes that ended what was read since mark; the marker is two zero
// blocks, and the only other bytes tar.Reader reads inside Next before it
// answers io.EOF are a member's padding (under one block), so 1024 trailing
// zero bytes mean the marker was there.
//
// It also keeps the raw bytes Next reads (padding, header blocks and the GNU
// long-name and PAX records, each under 1 MiB by archive/tar's own cap) for
// headerFault, which archive/tar's parsed header cannot answer: it cuts a
// name at its first NUL.
type endReader struct {
	r     io.Reader
	zeros int64

	off        int64 // bytes consumed from the start of the archive
	recording  bool  // between mark and headerFault
	rec        []byte
	recStart   int64 // archive offset of rec[0]
	nextHeader int64 // archive offset where the next header is due; 0: unknown
}

func (e *endReader) mark() {
	e.zeros = 0
	e.recording, e.rec, e.recStart = true, e.rec[:0], e.off
}
func (e *endReader) sawEnd() bool { return e.zeros >= 2*512 }
func (e *endReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.count(p[:n])
	if e.recording {
		e.rec = append(e.rec, p[:n]...)
	}
	e.off += int64(n)
	return n, err
}

// headerFault walks the header blocks Next just read and refuses a member
// whose name or link target holds a NUL in any header form: the ustar name,
// prefix or linkname field, or a GNU long-name or long-link record.
// archive/tar cuts each at its first NUL, so "aaa\x00tail" was written as
// "aaa"; a NUL in a PAX path archive/tar refuses itself. It ends recording.
func (e *endReader) headerFault(hdr *tar.Header) error {
	rec, start := e.rec, e.recStart
	e.recording = false
	// Where this Next's header blocks begin: past the previous member's data
	// (which Next may have read, or skipped by seeking) and its padding.
	at := e.nextHeader - start
	if e.nextHeader == 0 || at < 0 || at > int64(len(rec)) {
		at = ((start + 511) &^ 511) - start
	}
	e.nextHeader = 0
	if at < 0 || at > int64(len(rec)) {
		return nil
	}
	pos := start + at
	blocks := rec[at:]
	for len(blocks) >= 512 {
		blk := blocks[:512]
		blocks, pos = blocks[512:], pos+512
		if bytes.Count(blk, []byte{0}) == 512 {
			return nil
		}
		flag := blk[156]
		switch flag {
		case tar.TypeGNULongName, tar.TypeGNULongLink, tar.TypeXHeader, tar.TypeXGlobalHeader:
			size, ok := sizeField(blk[124:136])
			if !ok || size > int64(len(blocks)) {
				return nil // archive/tar judged this record; nothing to add
			}
			data := blocks[:size]
			skip := min((size+511)&^511, int64(len(blocks)))
			blocks, pos = blocks[skip:], pos+skip
			if (flag == tar.TypeGNULongName || flag == tar.TypeGNULongLink) && innerNUL(data) {
				return &MemberError{hdr.Name, "its name or link target holds a NUL byte (in a GNU long-name record)"}
			}
			if flag == tar.TypeXGlobalHeader {
				e.nextHeader = pos // Next returns a global header itself
				return nil
			}
			continue
		}
		fields := [][]byte{blk[0:100], blk[157:257]}
		if string(blk[257:263]) == "ustar\x00" { // POSIX ustar: the prefix field
			fields = append(fields, blk[345:500])
		}
		for _, f := range fields {
			if innerNUL(f) {
				return &MemberError{hdr.Name, "its name or link target holds a NUL byte (in the header's name, prefix or linkname field)"}
			}
		}
		// The member's data on the wire, as archive/tar sizes it: none for a
		// header-only type, else a PAX size record over the size field.
		var phys int64
		switch flag {
		case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		default:
			if v, ok := hdr.PAXRecords["size"]; ok {
				phys, _ = strconv.ParseInt(v, 10, 64)
			} else {
				phys, _ = sizeField(blk[124:136])
			}
		}
		if phys >= 0 {
			e.nextHeader = pos + (phys+511)&^511
		}
		return nil
	}
	return nil
}

// sizeField reads a header's size field: octal text, or GNU base-256 when
// its first byte has the high bit set.
func sizeField(b []byte) (int64, bool) {
	if len(b) > 0 && b[0]&0x80 != 0 {
		var n int64
		for _, c := range b[1:] {
			if n > (1<<62)>>8 {
				return 0, false
			}
			n = n<<8 | int64(c)
		}
		return n, true
	}
	return octal(b)
}

// innerNUL reports a NUL followed by anything but NULs: a field's own
// terminator and zero fill are fine, a NUL inside the text is not.
func innerNUL(b []byte) bool {
	return bytes.IndexByte(bytes.TrimRight(b, "\x00"), 0) >= 0
}

// octal reads a header's octal size field (space- or NUL-terminated).
func octal(b []byte) (int64, bool) {
	t := strings.Trim(string(b), " \x00")
	if t == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(t, 8, 64)
	return n, err == nil && n >= 0
}

func (e *endReader) count(p []byte) {
	i := len(p)
	for i > 0 && p[i-1] == 0 {
		i--
	}
	if i == 0 {
		e.zeros += int64(len(p))
	} else {
		e.zeros = int64(len(p) - i)
	}
}

// seekEndReader is an endReader over a seekable source, so tar.Reader skips
// member content with a seek instead of reading it. A seek is never part of
// the marker, so it resets the count.
type seekEndReader struct {
	endReader
	s io.Seeker
}

func (e *seekEndReader) Seek(off int64, whence int) (int64, error) {
	if !(off == 0 && whence == io.SeekCurrent) {
		e.zeros = 0
	}
	n, err := e.s.Seek(off, whence)
	if err == nil && n != e.off {
		e.off = n
		if e.recording {
			// Skipped content is never header bytes: record afresh from here.
			e.rec, e.recStart = e.rec[:0], n
		}
	}
	return n, err
}

// Check reads an archive's structure without writing anything: every header,
// member content skipped by seeking, through to the end-of-archive marker. It
// refuses what Extract would refuse before its first write could happen (a
// truncated or malformed archive, one over the caps, a device or fifo member,
// a name that climbs out of the root), so a refusal of those leaves the tree
// exactly as it was. Extract still applies every rule itself.
func Check(r io.ReadSeeker, caps Caps) error {
	total, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	er := &seekEndReader{endReader: endReader{r: r}, s: r}
	tr := tar.NewReader(er)
	var members, size int64
	for {
		er.mark()
		hdr, err := tr.Next()
		if err == io.EOF {
			if !er.sawEnd() {
				return &MalformedError{Err: ErrNoEndMarker}
			}
			return nil
		}
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			return &MalformedError{Err: err}
		}
		if err := er.headerFault(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		members++
		if caps.MaxMembers > 0 && members > caps.MaxMembers {
			return &LimitError{Detail: fmt.Sprintf("archive has more than %d members (limits.max_tar_members)", caps.MaxMembers)}
		}
		switch hdr.Typeflag {
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return &MemberError{hdr.Name, "device and fifo members are not extractable"}
		case tar.TypeReg, '\x00', tar.TypeCont, tar.TypeGNUSparse:
			if hdr.Size < 0 {
				return &MemberError{hdr.Name, "negative size"}
			}
			size += hdr.Size
			if caps.MaxBytes > 0 && (hdr.Size > caps.MaxBytes || size > caps.MaxBytes) {
				return &LimitError{Detail: fmt.Sprintf("archive exceeds %d bytes of member content (limits.max_tar_bytes)", caps.MaxBytes)}
			}
			// Named here: the seek past a cut member only fails in the next
			// Next, which cannot say whose content was short.
			pos, err := r.Seek(0, io.SeekCurrent)
			if err == nil && !sparse(hdr) && pos+hdr.Size > total {
				return &MalformedError{Err: fmt.Errorf("member %s ends after %d of its %d declared bytes", hdr.Name, total-pos, hdr.Size)}
			}
		}
		if _, ok := Normalize(hdr.Name); !ok {
			return &MemberError{hdr.Name, "path escapes the extraction root"}
		}
		if err := checkName(hdr.Name); err != nil {
			return err
		}
	}
}

// sparse reports a member whose content on the wire is a sparse map and data
// runs, shorter than its size.
func sparse(hdr *tar.Header) bool {
	return hdr.Typeflag == tar.TypeGNUSparse || hdr.PAXRecords["GNU.sparse.major"] != "" || hdr.PAXRecords["GNU.sparse.size"] != ""
}

// checkName refuses a member name the kernel would refuse: a component longer
// than NAME_MAX is the archive's fault, not this machine's.
func checkName(name string) error {
	for _, c := range strings.Split(name, "/") {
		if len(c) > maxNameBytes {
			return &MemberError{name, fmt.Sprintf("a path component is %d bytes, longer than the %d a file name may have", len(c), maxNameBytes)}
		}
	}
	return nil
}

// maxNameBytes is NAME_MAX.
const maxNameBytes = 255

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
			return nil
		}
		return &MemberError{name, "only a directory member may name the extraction root"}
	}
	mode := uint32(hdr.Mode&0o7777) & 0o755
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return &MemberError{name, "device and fifo members are not extractable"}
	case tar.TypeDir:
		if _, werr := x.makeDirs(parts, true); werr != nil {
			return werr.refusal(name, "")
		}
		x.dirModes[strings.Join(parts, "/")] = dirMode{parts, mode}
		return nil
	case tar.TypeSymlink:
		return x.symlink(name, parts, hdr.Linkname)
	case tar.TypeLink:
		return x.hardlink(name, parts, hdr.Linkname)
	case tar.TypeReg, '\x00', tar.TypeCont, tar.TypeGNUSparse:
		return x.file(tr, name, parts, hdr.Size, mode)
	default:
		return &MemberError{name, fmt.Sprintf("member type %q is not extractable", hdr.Typeflag)}
	}
}

// Normalize splits a member name into components, absorbing "." and empty
// components and popping on "..", entirely lexically. It refuses a leading
// "/" rather than stripping it (a rewrite teaches the caller nothing) and a
// ".." that climbs above the root. An empty result names the root itself.
func Normalize(name string) ([]string, bool) {
	if strings.HasPrefix(name, "/") {
		return nil, false
	}
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return nil, false
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	return parts, true
}

// TargetInTree reports whether a relative link target, read from a directory
// baseDepth components below the root, stays at or below the root.
func TargetInTree(baseDepth int, target string) bool {
	if strings.HasPrefix(target, "/") {
		return false
	}
	depth := baseDepth
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return false
			}
		default:
			depth++
		}
	}
	return true
}

func (x *extractor) symlink(name string, parts []string, target string) error {
	if target == "" {
		return &MemberError{name, "link member has no target"}
	}
	if strings.HasPrefix(target, "/") {
		return &MemberError{name, "absolute link target " + target}
	}
	// A symlink is read by the kernel from the directory that holds it.
	if !TargetInTree(len(parts)-1, target) {
		return &MemberError{name, "link target " + target + " resolves outside the root"}
	}
	// The link's directory is made first: the walk below starts from it.
	if _, _, werr := x.parentOf(parts); werr != nil {
		return werr.refusal(name, "")
	}
	// The lexical check judges ".." as popping a name; the kernel pops the
	// directory the name resolves to. Through a symlink the two differ
	// ("sub/up -> .." then "sub/esc -> up/.." is lexically "sub", physically
	// the root's parent), so the target is also resolved against the tree,
	// and so are the links written earlier that this one would redirect.
	recs, err := x.checkLink(name, parts, target)
	if err != nil {
		return err
	}
	// Looked up again: the walk may have trimmed the descriptor cache.
	parent, leaf, werr := x.parentOf(parts)
	if werr != nil {
		return werr.refusal(name, "")
	}
	if err := x.clear(parent, leaf); err != nil {
		return (&walkError{leaf, err}).refusal(name, "")
	}
	// Written verbatim and never resolved: a tree may carry a symlink whose
	// target arrives later, or never, and that is still what the tree was.
	if err := unix.Symlinkat(target, parent, leaf); err != nil {
		return (&walkError{leaf, err}).refusal(name, "")
	}
	x.forget(parts)
	for path, rec := range recs {
		x.setLink(path, rec)
	}
	return nil
}

// maxLinkHops bounds how many existing symlinks one target walk may expand,
// as the kernel's MAXSYMLINKS does (40).
const maxLinkHops = 40

// maxWalkSteps bounds the components all target resolutions of one archive
// may take together. Each symlink member is judged once and re-judges only
// the links that consulted its path, so an ordinary archive stays far below
// it; an archive that replaces one symlink over and over under many links
// consulting it would otherwise cost the square of its member count.
const maxWalkSteps = 1 << 24

// linkRec is a symlink this extraction wrote, kept so that a later member
// that changes a path its target was resolved through can re-judge it.
type linkRec struct {
	dir    []string // the directory holding the link
	target string
	deps   []string // every tree path the resolution consulted
}

// overlay is a symlink about to be written at path, seen by a walk as if it
// were already there.
type overlay struct {
	path, target string
}

// walkRefusal is a target the walk resolved above the root, or could not
// judge; it becomes a MemberError for whichever member caused it.
type walkRefusal struct{ reason string }

// resolveTarget resolves a symlink target the way realpath does at this
// moment (the CPython data filter's os.path.realpath check): from the link's
// directory dir (a real directory), each symlink present in the tree is
// expanded (readlinkat on a descriptor the confined walk reached, at most
// maxLinkHops of them), a component that is missing or not a directory is
// kept lexically, so a ".." after it pops it as normpath would, and a ".."
// from a real directory pops to its parent. It refuses a resolution that
// climbs above the root, or that meets an absolute symlink in the tree. ov,
// when set, stands in for the symlink about to be written. It returns every
// tree path the resolution consulted: a later symlink at one of them changes
// the answer, so the link is judged again then (linkChanged).
func (x *extractor) resolveTarget(dir []string, target string, ov *overlay) ([]string, *walkRefusal, *walkError) {
	cur := append([]string(nil), dir...)
	lexical := 0 // trailing components of cur that are not real directories
	queue := strings.Split(target, "/")
	var deps []string
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if x.walkSteps++; x.walkSteps > maxWalkSteps {
			return deps, &walkRefusal{"needs more resolution than one archive may ask for (its links are re-judged too often)"}, nil
		}
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return deps, &walkRefusal{"resolves above the extraction root"}, nil
			}
			cur = cur[:len(cur)-1]
			if lexical > 0 {
				lexical--
			}
			continue
		}
		path := strings.Join(append(cur, c), "/")
		deps = append(deps, path)
		if lexical > 0 {
			cur = append(cur, c)
			lexical++
			continue
		}
		var link string
		if ov != nil && path == ov.path {
			link = ov.target
		} else {
			fd, werr := x.makeDirs(cur, false)
			if werr != nil {
				return deps, nil, werr
			}
			var sb unix.Stat_t
			err := unix.Fstatat(fd, c, &sb, unix.AT_SYMLINK_NOFOLLOW)
			switch {
			case err == unix.ENOENT || err == nil && sb.Mode&unix.S_IFMT != unix.S_IFDIR && sb.Mode&unix.S_IFMT != unix.S_IFLNK:
				// Missing, or a file: judged lexically, as realpath does.
				cur = append(cur, c)
				lexical = 1
				continue
			case err != nil:
				return deps, nil, &walkError{c, err}
			case sb.Mode&unix.S_IFMT == unix.S_IFDIR:
				cur = append(cur, c)
				continue
			}
			if link, err = readlinkat(fd, c); err != nil {
				return deps, nil, &walkError{c, err}
			}
		}
		if hops++; hops > maxLinkHops {
			return deps, &walkRefusal{"passes through more than 40 symlinks"}, nil
		}
		if strings.HasPrefix(link, "/") {
			return deps, &walkRefusal{"passes through symlink " + path + ", whose target " + link + " is absolute"}, nil
		}
		queue = append(strings.Split(link, "/"), queue...)
	}
	return deps, nil, nil
}

// checkLink judges a symlink member's target against the tree, and every
// symlink already written whose resolution consulted the member's path
// against the tree with the member in place: "sub/esc -> up/.." is harmless
// while sub/up is missing or "up -> .", and escapes once "up -> .." lands.
// It returns the records to store once the member is written.
func (x *extractor) checkLink(name string, parts []string, target string) (map[string]*linkRec, error) {
	dir := parts[:len(parts)-1]
	deps, ref, err := x.resolveTarget(dir, target, nil)
	if err != nil {
		return nil, x.walkFailure(name, target, err)
	}
	if ref != nil {
		return nil, &MemberError{name, "link target " + target + " " + ref.reason}
	}
	path := strings.Join(parts, "/")
	recs := map[string]*linkRec{path: {dir: append([]string(nil), dir...), target: target, deps: deps}}
	ov := &overlay{path, target}
	for _, other := range sortedKeys(x.dependents[path]) {
		rec := x.links[other]
		if other == path || rec == nil {
			continue
		}
		deps, ref, err := x.resolveTarget(rec.dir, rec.target, ov)
		if err != nil {
			return nil, x.walkFailure(name, target, err)
		}
		if ref != nil {
			return nil, &MemberError{name, "with this link in place, symlink " + other + " -> " + rec.target + " " + ref.reason}
		}
		recs[other] = &linkRec{dir: rec.dir, target: rec.target, deps: deps}
	}
	return recs, nil
}

func (x *extractor) walkFailure(name, target string, werr *walkError) error {
	return werr.refusal(name, "link target "+target+": ")
}

// setLink records (rec != nil) or forgets the symlink at path, keeping the
// dependents index in step with the paths each record consulted.
func (x *extractor) setLink(path string, rec *linkRec) {
	if old := x.links[path]; old != nil {
		for _, d := range old.deps {
			if m := x.dependents[d]; m != nil {
				delete(m, path)
				if len(m) == 0 {
					delete(x.dependents, d)
				}
			}
		}
		delete(x.links, path)
	}
	if rec == nil {
		return
	}
	if x.links == nil {
		x.links = map[string]*linkRec{}
		x.dependents = map[string]map[string]struct{}{}
	}
	x.links[path] = rec
	for _, d := range rec.deps {
		m := x.dependents[d]
		if m == nil {
			m = map[string]struct{}{}
			x.dependents[d] = m
		}
		m[path] = struct{}{}
	}
}

func sortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size >= 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}

func (x *extractor) hardlink(name string, parts []string, target string) error {
	if target == "" {
		return &MemberError{name, "link member has no target"}
	}
	if strings.HasPrefix(target, "/") {
		return &MemberError{name, "absolute link target " + target}
	}
	// A hard link's target is a member name, so it is read from the root.
	src, ok := Normalize(target)
	if !ok || !TargetInTree(0, target) {
		return &MemberError{name, "link target " + target + " resolves outside the root"}
	}
	if len(src) == 0 {
		return &MemberError{name, "hard link to the extraction root"}
	}
	if strings.Join(src, "/") == strings.Join(parts, "/") {
		// Replacing the name first would delete the only copy.
		return &MemberError{name, "hard link to itself"}
	}
	srcParent, werr := x.makeDirs(src[:len(src)-1], false)
	if werr != nil {
		return werr.refusal(name, "hard link target "+target+": ")
	}
	// Duplicated because creating the destination's parents may trim the
	// cache and close the cached descriptor under us.
	srcParent, err := unix.FcntlInt(uintptr(srcParent), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	defer unix.Close(srcParent)
	srcLeaf := src[len(src)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(srcParent, srcLeaf, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return &MemberError{name, "hard link target " + target + " is not in the archive"}
		}
		return (&walkError{srcLeaf, err}).refusal(name, "hard link target "+target+": ")
	}
	// A hard link to a symlink is a second symlink with the same target text
	// in a different directory, where that text may now climb out of the root.
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return &MemberError{name, "hard link target " + target + " is a symlink"}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return &MemberError{name, "hard link target " + target + " is a directory"}
	}
	parent, leaf, werr := x.parentOf(parts)
	if werr != nil {
		return werr.refusal(name, "")
	}
	if err := x.clear(parent, leaf); err != nil {
		return (&walkError{leaf, err}).refusal(name, "")
	}
	// No AT_SYMLINK_FOLLOW: the source was just checked not to be a symlink,
	// and following would leave the confined walk.
	if err := unix.Linkat(srcParent, srcLeaf, parent, leaf, 0); err != nil {
		return (&walkError{leaf, err}).refusal(name, "")
	}
	x.setLink(strings.Join(parts, "/"), nil)
	return nil
}

func (x *extractor) file(tr *tar.Reader, name string, parts []string, size int64, mode uint32) error {
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
	if err := unix.Fchmod(fd, mode); err != nil {
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
func (x *extractor) applyDirModes() {
	list := make([]dirMode, 0, len(x.dirModes))
	for _, d := range x.dirModes {
		list = append(list, d)
	}
	sort.Slice(list, func(i, j int) bool { return len(list[i].parts) > len(list[j].parts) })
	for _, d := range list {
		parent, leaf, werr := x.parentOf(d.parts)
		if werr != nil {
			x.opt.Log.Warn("could not apply archive mode", "dir", strings.Join(d.parts, "/"), "err", werr.err)
			continue
		}
		how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: confinement}
		fd, err := x.open2(parent, leaf, &how)
		if err == nil {
			err = unix.Fchmod(fd, d.mode)
			unix.Close(fd)
		}
		if err != nil {
			x.opt.Log.Warn("could not apply archive mode", "dir", strings.Join(d.parts, "/"), "err", err)
		}
	}
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
