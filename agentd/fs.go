package agentd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/linerange"
	"github.com/microvms/microvms/agentd/internal/tarx"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/fullcopy"
)

// FS serves GET/PUT /v1/fs/file and GET/PUT /v1/fs/tar. Authentication,
// the version header, routing and the max_body_bytes cap happen before these
// handlers run: the gate refuses a declared length over the cap and wraps
// r.Body in http.MaxBytesReader, so an undeclared over-cap upload surfaces
// here as *http.MaxBytesError while copying and is answered 413 (copyFailed).
//
// The single-file routes are deliberately not confined to a root: the same
// token can exec as root, so a prefix would add no security and would break
// harnesses that write into home directories and /etc. PUT /v1/fs/tar is the
// one confined path, because there the names come out of an archive rather
// than from the caller.
type FS struct {
	// limits is the daemon's generated limit set; FS reads max_tar_bytes,
	// max_tar_members and disk_reserve_bytes from it. A zero cap disables
	// that cap; a zero reserve disables the disk guard, as the protocol
	// documents. max_body_bytes is the server's gate's, applied to every
	// bearer route before FS runs.
	limits protocol.LimitSet
	log    *slog.Logger
	guard  diskGuard
	// spoolDir is where uploads are spooled before extraction; the guard
	// measures it too, because it is the first filesystem an upload fills.
	spoolDir string
	umask    uint32
	// openat2 lets a test play a kernel without the syscall.
	openat2 func(dirfd int, path string, how *unix.OpenHow) (int, error)
	// sizeIsFiction says a file's stat size cannot be trusted (pseudoFS);
	// a test plays a filesystem the list does not know.
	sizeIsFiction func(*os.File) bool
	// fsync makes a file or directory durable ((*os.File).Sync); a test
	// counts which ones a write with and without ?sync=true asks for.
	fsync func(*os.File) error
	// reading counts file reads in progress, so a test can see a read end
	// once its client has gone (a test hook; nothing in the daemon reads it).
	reading atomic.Int64
}

// NewFS returns the file and tar handlers under limits (the server passes
// its Config's LimitSet, so each limit is wired once).
func NewFS(limits protocol.LimitSet, log *slog.Logger) *FS {
	if log == nil {
		log = slog.Default()
	}
	reserve := uint64(0)
	if limits.DiskReserveBytes > 0 {
		reserve = uint64(limits.DiskReserveBytes)
	}
	return &FS{
		limits:        limits,
		log:           log,
		guard:         diskGuard{probe: availableBytes, reserve: reserve, warn: log.Warn},
		spoolDir:      os.TempDir(),
		umask:         processUmask(),
		openat2:       unix.Openat2,
		sizeIsFiction: pseudoFS,
		fsync:         (*os.File).Sync,
	}
}

// DiskHealth measures the daemon's working directory, the filesystem a
// caller's relative writes land on. nil when statvfs fails: unmeasurable is
// not the same as full.
func (f *FS) DiskHealth() *protocol.DiskHealth {
	wd, err := os.Getwd()
	if err != nil {
		wd = "/"
	}
	r, err := f.guard.read(wd)
	if err != nil {
		return nil
	}
	return &protocol.DiskHealth{AvailableBytes: r.Available, ReserveBytes: r.Reserve, UnderPressure: r.underPressure()}
}

// fsMissingPath is the one body every fs route answers for a request without
// ?path=. 400, never 404: a client mapping 404 to "file not found" would
// report a phantom absent artifact for what is a protocol error.
const fsMissingPath = "path query parameter is required"

// badPath names what is wrong with a path the kernel would refuse for its
// shape alone, so the answer is the caller's 400 rather than a 500: a NUL
// (no path can hold one), a component over NAME_MAX, or a path over PATH_MAX.
func badPath(p string) string {
	if strings.IndexByte(p, 0) >= 0 {
		return "path contains a NUL byte"
	}
	if len(p) >= pathMax {
		return fmt.Sprintf("path is %d bytes; a path may have at most %d", len(p), pathMax-1)
	}
	for _, c := range strings.Split(p, "/") {
		if len(c) > nameMax {
			return fmt.Sprintf("a path component is %d bytes; a file name may have at most %d", len(c), nameMax)
		}
	}
	return ""
}

// fsPathFault is badPath plus the fs routes' own rule: the path is absolute.
// A relative one would resolve against the daemon's working directory, which
// no caller can see ("../../etc" listed /etc with a 200).
func fsPathFault(p string) string {
	if bad := badPath(p); bad != "" {
		return bad
	}
	if !filepath.IsAbs(p) {
		return "path must be absolute"
	}
	return ""
}

// nameMax and pathMax are Linux's NAME_MAX and PATH_MAX (which counts the NUL).
const (
	nameMax = 255
	pathMax = 4096
)

// fsFail writes a plain-text error, the body shape every fs route declares.
func fsFail(w http.ResponseWriter, status int, detail string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, detail)
}

// ReadFile streams a file, or a 1-based inclusive line window of it.
func (f *FS) ReadFile(w http.ResponseWriter, r *http.Request, p protocol.FsReadFileParams) {
	f.reading.Add(1)
	defer f.reading.Add(-1)
	if p.Path == "" {
		fsFail(w, http.StatusBadRequest, fsMissingPath)
		return
	}
	if bad := fsPathFault(p.Path); bad != "" {
		fsFail(w, http.StatusBadRequest, bad)
		return
	}
	// The raw query is authoritative when it carries the bounds, so this
	// handler's refusals are the same whoever decoded the parameters.
	q := r.URL.Query()
	_, hasStart := q["start_line"]
	_, hasEnd := q["end_line"]
	var rng linerange.Range
	var ranged bool
	var err error
	if hasStart || hasEnd {
		rng, ranged, err = linerange.Parse(q.Get("start_line"), q.Get("end_line"), hasStart, hasEnd)
	} else if p.StartLine != nil || p.EndLine != nil {
		ranged = true
		rng, err = linerange.FromBounds(p.StartLine, p.EndLine)
	}
	if err != nil {
		// Checked before the file is opened, so a bad range can never be
		// mistaken for anything about the file.
		fsFail(w, http.StatusBadRequest, err.Error())
		return
	}

	file, info, err := openForRead(p.Path)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
			fsFail(w, http.StatusNotFound, "no such file")
		case errors.Is(err, errNotReadable) || errors.Is(err, unix.ENXIO):
			fsFail(w, http.StatusBadRequest, "path is a fifo or socket; reading one waits on another process, so read it with exec")
		case errors.Is(err, unix.ENAMETOOLONG):
			fsFail(w, http.StatusBadRequest, "path is longer than the filesystem allows")
		default:
			f.log.Warn("cannot open file for read", "path", p.Path, "err", err)
			fsFail(w, http.StatusInternalServerError, "cannot read file")
		}
		return
	}
	defer file.Close()
	if info.IsDir() {
		// A directory opens fine and fails on read, which would surface only
		// after the 200 is out; refused up front instead.
		fsFail(w, http.StatusBadRequest, "path is a directory; use /v1/fs/tar")
		return
	}
	// A device can read forever (/dev/zero) or block forever; either way the
	// reading stops when the caller goes. The descriptor is non-blocking, so
	// a pollable device honours the deadline; a regular file never blocks.
	stop := context.AfterFunc(r.Context(), func() { _ = file.SetReadDeadline(time.Now()) })
	defer stop()
	w.Header().Set("Content-Type", "application/octet-stream")
	if ranged {
		w.WriteHeader(http.StatusOK)
		if _, err := linerange.CopyContext(r.Context(), w, file, rng); err != nil {
			f.log.Warn("ranged read failed mid-stream", "path", p.Path, "err", err)
		}
		return
	}
	// Without a range the bytes go out untouched. A known length lets the
	// server use sendfile; files whose stat size is fiction (procfs, sysfs)
	// are streamed chunked instead.
	if info.Mode().IsRegular() && info.Size() > 0 && !f.sizeIsFiction(file) {
		w.Header().Set("Content-Length", strconv.FormatInt(info.Size(), 10))
		w.WriteHeader(http.StatusOK)
		if _, err := io.CopyN(w, file, info.Size()); err != nil {
			f.log.Warn("read failed mid-stream", "path", p.Path, "err", err)
		}
		return
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, file); err != nil {
		f.log.Warn("read failed mid-stream", "path", p.Path, "err", err)
	}
}

// parseFileMode reads an octal permission string. Always base 8, so "644",
// "0644" and "0o644" agree; anything above 07777 is refused, since a whole
// st_mode with type bits is a confused caller.
func parseFileMode(raw string) (uint32, bool) {
	s := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(raw), "0o"), "0O")
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, false
	}
	return uint32(v), true
}

// WriteFile streams the body to a temp file beside the target and renames it
// into place, so a failed upload never leaves a half-written file where the
// old one was.
func (f *FS) WriteFile(w http.ResponseWriter, r *http.Request, p protocol.FsWriteFileParams) {
	if p.Path == "" {
		fsFail(w, http.StatusBadRequest, fsMissingPath)
		return
	}
	if bad := fsPathFault(p.Path); bad != "" {
		fsFail(w, http.StatusBadRequest, bad)
		return
	}
	// Parsed before any byte lands, so a bad mode leaves nothing behind.
	var mode uint32
	haveMode := p.Mode != nil
	if haveMode {
		var ok bool
		if mode, ok = parseFileMode(*p.Mode); !ok {
			fsFail(w, http.StatusBadRequest, fmt.Sprintf("mode %s is not a valid octal file mode", *p.Mode))
			return
		}
	}
	target := resolveWriteTarget(p.Path)
	existing, err := os.Stat(target)
	switch {
	case err == nil && existing.IsDir():
		fsFail(w, http.StatusBadRequest, "path is a directory; use /v1/fs/tar")
		return
	case err == nil && existing.Mode()&(os.ModeDevice|os.ModeNamedPipe|os.ModeSocket) != 0:
		// Replacing it would swap /dev/null for a regular file; writing
		// through it is what exec is for.
		fsFail(w, http.StatusBadRequest, "path is a device node, fifo or socket; a file write never replaces one")
		return
	case err != nil:
		existing = nil
	}
	// Before the parent is created, so a refused write leaves nothing — an
	// empty file at the target would read as a successful empty transfer.
	if perr := f.guard.preflight(target, r.ContentLength); perr != nil {
		f.pressure(w, perr)
		return
	}
	dir := filepath.Dir(target)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		f.log.Warn("cannot create parent directory", "path", target, "err", err)
		fsFail(w, http.StatusInternalServerError, "cannot create parent directory: "+errText(err))
		return
	}

	perm := uint32(0o666) &^ f.umask
	switch {
	case haveMode:
		perm = mode
	case existing != nil:
		perm = uint32(existing.Mode().Perm()) | unixSpecialBits(existing.Mode())
	}
	tmp, named, err := createTempIn(dir)
	if err != nil {
		f.log.Warn("cannot create temp file", "path", target, "err", err)
		fsFail(w, http.StatusInternalServerError, "cannot write file: "+errText(err))
		return
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			if named != "" {
				os.Remove(named)
			}
		}
	}()

	body := io.Reader(r.Body) // capped by the gate
	pace := &diskPacer{guard: f.guard, path: dir, name: target}
	// Durable only when asked: the fsync of a 256 MiB upload (and the
	// writeback kicks feeding it) took the shared ruler's upload from
	// 0.64-0.65x a local copy to 0.57-0.58x, and the page cache already
	// holds the bytes for every process and across a suspend
	// (docs/PLATFORM.md, "Suspend and resume freeze and thaw the guest").
	// The rename is atomic either way, so no reader ever sees a partial
	// file.
	durable := p.Sync != nil && *p.Sync
	var dst io.Writer = diskPacedWriter{tmp, pace}
	if durable {
		dst = &writeBehind{w: dst, fd: int(tmp.Fd())}
	}
	if _, err := copyBody(dst, body); err != nil {
		f.copyFailed(w, target, err)
		return
	}
	// Mode is reconciled on the descriptor before the rename, so the file is
	// never visible at its final name with wider permissions than asked for.
	if err := tmp.Chmod(os.FileMode(perm&0o777) | specialBitsMode(perm)); err != nil {
		fsFail(w, http.StatusInternalServerError, "cannot set mode: "+errText(err))
		return
	}
	if existing != nil {
		// Keep the owner of a file being replaced when we may (we run as
		// root in the guest); a rename otherwise hands it to the daemon.
		if st, ok := statOwner(existing); ok {
			_ = tmp.Chown(st[0], st[1])
			if haveMode || perm&0o7000 != 0 {
				// chown clears setuid/setgid; put them back.
				_ = tmp.Chmod(os.FileMode(perm&0o777) | specialBitsMode(perm))
			}
		}
	}
	if durable {
		if err := f.fsync(tmp); err != nil {
			fsFail(w, http.StatusInternalServerError, "cannot write file: "+errText(err))
			return
		}
	}
	if err := commitTemp(tmp, named, target); err != nil {
		fsFail(w, http.StatusInternalServerError, "cannot write file: "+errText(err))
		return
	}
	committed = true
	if err := tmp.Close(); err != nil {
		f.log.Warn("closing a committed file failed", "path", target, "err", err)
	}
	if durable {
		// The rename is durable only once the directory entry is.
		if d, err := os.Open(dir); err == nil {
			_ = f.fsync(d)
			d.Close()
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// resolveWriteTarget follows a symlink at the target, so writing
// /etc/resolv.conf updates the file it points to instead of replacing the
// link with a regular file (which a plain in-place write would not do).
func resolveWriteTarget(path string) string {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return path
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	// Dangling: write where the link points, one hop, as open(O_CREAT) would.
	link, err := os.Readlink(path)
	if err != nil {
		return path
	}
	if !filepath.IsAbs(link) {
		link = filepath.Join(filepath.Dir(path), link)
	}
	return link
}

func (f *FS) copyFailed(w http.ResponseWriter, target string, err error) {
	var mbe *http.MaxBytesError
	var perr *PressureError
	var wer *diskWriteError
	switch {
	case errors.As(err, &mbe):
		fsFail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds limits.max_body_bytes (%d)", mbe.Limit))
	case errors.As(err, &perr):
		f.pressure(w, perr)
	case isFull(err):
		f.full(w, target, err)
	case errors.As(err, &wer):
		f.log.Warn("write failed mid-stream", "path", target, "err", err)
		fsFail(w, http.StatusInternalServerError, "cannot write file: "+errText(err))
	default:
		// The network side failed: the client's body was cut short. Nothing
		// on this side is broken, so not a 500.
		f.log.Warn("request body failed mid-stream", "path", target, "err", err)
		fsFail(w, http.StatusBadRequest, "malformed or truncated body")
	}
}

// full answers a write the filesystem ran out of room for: 507 like the
// reserve's refusal, never 500, since a retry cannot help until space is freed.
// Nothing the write replaced was touched: the content never took its name.
func (f *FS) full(w http.ResponseWriter, path string, err error) {
	f.log.Warn("write failed: the target filesystem is full", "path", path, "err", err)
	fsFail(w, http.StatusInsufficientStorage, "refusing to write "+path+": the filesystem ran out of space or quota ("+errText(err)+"); what was there before is unchanged")
}

func (f *FS) pressure(w http.ResponseWriter, perr *PressureError) {
	f.log.Warn("refusing a write: the target filesystem is under the disk reserve",
		"path", perr.Path, "available", perr.Reading.Available, "reserve", perr.Reading.Reserve)
	fsFail(w, http.StatusInsufficientStorage, perr.Error())
}

// ReadTar streams the tree at path as an uncompressed tar; exact writes
// every member in PAX with its times' nanoseconds (tarx.Pack).
func (f *FS) ReadTar(w http.ResponseWriter, r *http.Request, path string, exact bool) {
	if path == "" {
		fsFail(w, http.StatusBadRequest, fsMissingPath)
		return
	}
	if bad := fsPathFault(path); bad != "" {
		fsFail(w, http.StatusBadRequest, bad)
		return
	}
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		fsFail(w, http.StatusNotFound, "no such directory")
		return
	case err != nil:
		f.log.Warn("cannot stat tar root", "path", path, "err", err)
		fsFail(w, http.StatusInternalServerError, "cannot read directory")
		return
	case !info.IsDir():
		fsFail(w, http.StatusBadRequest, "path is not a directory; use /v1/fs/file")
		return
	}
	// The caller's own path may run through symlinks; the walk below does
	// not follow any, so it has to start from the real directory.
	root, err := filepath.EvalSymlinks(path)
	if err != nil {
		fsFail(w, http.StatusInternalServerError, "cannot read directory")
		return
	}
	caps := tarx.Caps{MaxMembers: f.limits.MaxTarMembers, MaxBytes: f.limits.MaxTarBytes, Ctx: r.Context()}
	members, size, err := tarx.Measure(root, caps)
	if err != nil {
		var le *tarx.LimitError
		if errors.As(err, &le) {
			fsFail(w, http.StatusRequestEntityTooLarge, le.Detail)
			return
		}
		f.log.Warn("cannot walk tar root", "path", root, "err", err)
		fsFail(w, http.StatusInternalServerError, "cannot walk directory: "+errText(err))
		return
	}
	f.log.Info("packing tree", "path", root, "members", members, "bytes", size)
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 256<<10)
	err = tarx.Pack(bw, root, caps, exact)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		// The status is already out, so the only honest signal left is a
		// body that does not end cleanly: a truncated tar fails to parse
		// where a well-formed short one would be silently accepted.
		f.log.Warn("packing failed mid-stream; aborting the response", "path", root, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// WriteTar spools the uploaded archive to an unlinked temp file, then
// extracts it under path with the confinement tarx enforces; exact keeps
// the archive's own modes, owners, times and symlink targets
// (tarx.Options.Exact) instead of the data filter's.
func (f *FS) WriteTar(w http.ResponseWriter, r *http.Request, path string, exact bool) {
	if path == "" {
		fsFail(w, http.StatusBadRequest, fsMissingPath)
		return
	}
	if bad := fsPathFault(path); bad != "" {
		fsFail(w, http.StatusBadRequest, bad)
		return
	}
	root := filepath.Clean(path)
	// Checked against the root before spooling, so an upload aimed at a full
	// filesystem is refused without spending the wire time to receive it.
	if perr := f.guard.preflight(root, r.ContentLength); perr != nil {
		f.pressure(w, perr)
		return
	}
	spool, err := f.spool(r, root)
	if err != nil {
		f.copyFailed(w, root, err)
		return
	}
	defer spool.Close()

	caps := tarx.Caps{MaxMembers: f.limits.MaxTarMembers, MaxBytes: f.limits.MaxTarBytes, Ctx: r.Context()}
	// The whole archive is read before anything is written: a truncated or
	// malformed archive, one over the caps, and most bad members are refused
	// with the tree untouched.
	if err := tarx.Check(spool, caps); err != nil {
		f.extractFailed(w, root, err)
		return
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		f.extractFailed(w, root, &diskWriteError{err})
		return
	}
	pace := &diskPacer{guard: f.guard, path: root, name: root}
	res, err := tarx.Extract(root, bufio.NewReaderSize(spool, 1<<20), tarx.Options{
		Caps:    caps,
		Pace:    pace.add,
		Log:     f.log,
		Openat2: f.openat2,
		Exact:   exact,
	})
	if err != nil {
		f.extractFailed(w, root, err)
		return
	}
	f.log.Info("archive extracted", "path", root, "members", res.Members, "bytes", res.Bytes, "exact", exact)
	w.WriteHeader(http.StatusNoContent)
}

func (f *FS) extractFailed(w http.ResponseWriter, root string, err error) {
	var me *tarx.MemberError
	var le *tarx.LimitError
	var mal *tarx.MalformedError
	var perr *PressureError
	switch {
	case errors.As(err, &me):
		f.log.Warn("tar member refused", "member", me.Member, "reason", me.Reason)
		fsFail(w, http.StatusBadRequest, me.Error())
	case errors.As(err, &le):
		fsFail(w, http.StatusRequestEntityTooLarge, le.Detail)
	case errors.As(err, &mal):
		fsFail(w, http.StatusBadRequest, mal.Error())
	case errors.As(err, &perr):
		f.pressure(w, perr)
	case isFull(err):
		f.full(w, root, err)
	case errors.Is(err, context.Canceled):
		// The client went away (or the daemon is stopping): the members
		// already in stay, each whole, and nobody is left to answer.
		f.log.Info("extraction stopped: the request ended", "path", root)
		fsFail(w, http.StatusBadRequest, "extraction stopped: the request ended")
	case errors.Is(err, tarx.ErrNoOpenat2):
		// Never a fallback to a weaker check: the caller cannot see which
		// confinement ran, so the only honest answer is a refusal.
		f.log.Error("refusing extraction", "err", err, "finding", taxonomy.FindingGuestKernelOpenat2)
		fsFail(w, http.StatusInternalServerError, fmt.Sprintf("refusing to extract: %v (finding %s: %s)",
			err, taxonomy.FindingGuestKernelOpenat2, taxonomy.FindingGuestKernelOpenat2.Title()))
	default:
		f.log.Error("extraction failed", "path", root, "err", err)
		fsFail(w, http.StatusInternalServerError, "extraction failed: "+errText(err))
	}
}

// spool copies the body into an anonymous file: never held in memory (an
// OOM-killed daemon in a MicroVM is unrecoverable) and never named, so a
// crash mid-upload leaks no path and the kernel reclaims the space.
func (f *FS) spool(r *http.Request, root string) (*os.File, error) {
	file, err := openAnonymous(f.spoolDir)
	if err != nil {
		return nil, &diskWriteError{err}
	}
	body := io.Reader(r.Body) // capped by the gate
	// The spool's filesystem is what this copy fills, and it need not be the
	// root's; the refusal still names the root the caller asked about.
	pace := &diskPacer{guard: f.guard, path: f.spoolDir, name: root}
	if _, err := copyBody(diskPacedWriter{file, pace}, body); err != nil {
		file.Close()
		return nil, err
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		file.Close()
		return nil, &diskWriteError{err}
	}
	return file, nil
}

// uploadBufferBytes is how much of an upload body is gathered before it is
// written. A loopback socket hands a reader whatever has arrived, often 64 KiB
// or less, and writing each of those pieces as it came cost the filesystem a
// call (and the daemon a wakeup) per piece: on the shared ruler, 256 MiB
// uploads took 0.24-0.26 s of daemon CPU with 256 KiB copies of what arrived,
// and 0.11-0.15 s gathering 1 MiB before each write. 4 MiB was no better
// (0.21): 1 MiB still fits in this CPU's L2.
const uploadBufferBytes = 1 << 20

var uploadBuffers = sync.Pool{New: func() any { b := make([]byte, uploadBufferBytes); return &b }}

// copyBody copies an upload body to dst in uploadBufferBytes writes. Only a
// clean io.EOF ends it successfully, so a truncated upload never commits.
func copyBody(dst io.Writer, body io.Reader) (int64, error) {
	bp := uploadBuffers.Get().(*[]byte)
	defer uploadBuffers.Put(bp)
	return fullcopy.Copy(dst, body, *bp)
}

func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// syncNotBool refuses a PUT /v1/fs/file whose sync is neither true nor
// false (strconv.ParseBool's spellings), before anything is written.
const syncNotBool = "sync must be true or false"

// FSParamError answers a query-decoding failure from the generated wrapper
// on an fs route with the bodies these routes promise: a missing path gets
// the one missing-path body, a start_line or end_line that is not an
// integer says so rather than masquerading as a missing path, and so does a
// sync that is not a boolean. The Server's ErrorHandlerFunc calls it for
// /v1/fs/ requests.
func FSParamError(w http.ResponseWriter, err error) {
	var req *protocol.RequiredParamError
	var inv *protocol.InvalidParamFormatError
	switch {
	case errors.As(err, &req) && req.ParamName == "path":
		fsFail(w, http.StatusBadRequest, fsMissingPath)
	case errors.As(err, &inv) && (inv.ParamName == "start_line" || inv.ParamName == "end_line"):
		fsFail(w, http.StatusBadRequest, linerange.ErrNotInteger.Error())
	case errors.As(err, &inv) && inv.ParamName == "sync":
		fsFail(w, http.StatusBadRequest, syncNotBool)
	default:
		fsFail(w, http.StatusBadRequest, err.Error())
	}
}
