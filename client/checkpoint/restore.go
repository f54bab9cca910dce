package checkpoint

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/klauspost/compress/zstd"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// RestoreOptions describe one restore.
type RestoreOptions struct {
	// Launch launches the sandbox (sandbox.LaunchOn(c), or an embedded
	// emulator's Launch).
	Launch sandbox.Launcher
	// Options is the launch; Image and Version default to the
	// checkpoint's. Naming another image or version is refused
	// (ReasonOtherVersion) unless AllowOtherVersion is set.
	Options sandbox.Options
	// AllowOtherVersion lays the files into a sandbox of another image or
	// version than the checkpoint was taken on.
	AllowOtherVersion bool
}

// maxMembers bounds the members one object may hold.
const maxMembers = 1 << 20

// member is what a restore applies after the upload: the metadata agentd's
// extraction does not keep.
type member struct {
	path     string // absolute
	typ      byte
	mode     int64
	uid, gid int
	mtime    time.Time
	link     string // a symlink's target, when absolute (laid by the script)
}

// verified is a checkpoint object on this host whose length and digest
// matched its manifest and whose archive read through whole.
type verified struct {
	m       Manifest
	file    string
	members []member
	// sizes is, per manifest path and upload kind, the length of the
	// archive layPath uploads there, so the upload carries a Content-Length.
	sizes map[layKey]int64
}

// layKey names one upload: a manifest path, and whether it goes through
// agentd's exact extraction (which takes the absolute symlinks and the
// path's own directory too) or the data filter's.
type layKey struct {
	dir   string
	exact bool
}

func (v *verified) close() { os.Remove(v.file) }

// checkVersion refuses a restore into another image or version than the
// checkpoint was taken on, unless overridden, and fills them in otherwise.
func checkVersion(m Manifest, o *RestoreOptions) error {
	if o.Options.Image == "" {
		o.Options.Image = m.ImageARN
	}
	if o.Options.Version == "" {
		o.Options.Version = m.ImageVersion
	}
	if o.AllowOtherVersion {
		return nil
	}
	if o.Options.Image != m.ImageARN || o.Options.Version != m.ImageVersion {
		return refusef(ReasonOtherVersion, "checkpoint %s was taken on %s version %q, and the restore asks for %s version %q (AllowOtherVersion overrides)",
			m.Digest, m.ImageARN, m.ImageVersion, o.Options.Image, o.Options.Version)
	}
	return nil
}

// fetch downloads m's object to a host temporary file, at most its
// manifest's size plus one byte, hashing it, and refuses it unless length
// and digest match; then it reads the archive through (verifyArchive).
func (s *Store) fetch(ctx context.Context, m Manifest) (*verified, error) {
	if m.Size > s.maxObject() {
		return nil, refusef(ReasonForeign, "the manifest's object is %d bytes, over this store's bound of %d", m.Size, s.maxObject())
	}
	key := s.objectKey(m.Digest)
	out, err := s.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	if err != nil {
		if notFound(err) {
			return nil, refusef(ReasonTruncated, "the object %s is missing from s3://%s", key, s.Bucket)
		}
		return nil, s.platformErr("reading "+key, err)
	}
	defer out.Body.Close()
	f, err := os.CreateTemp(s.TempDir, "microvm-restore-*.tar.zst")
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "a host temporary file for the restore: %w", err).WithCause(err)
	}
	v := &verified{m: m, file: f.Name()}
	ok := false
	defer func() {
		if !ok {
			v.close()
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(out.Body, m.Size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, s.platformErr("reading "+key, err)
	}
	switch got := "sha256:" + hex.EncodeToString(h.Sum(nil)); {
	case n < m.Size:
		return nil, refusef(ReasonTruncated, "the object %s is %d bytes, and its manifest says %d", key, n, m.Size)
	case n > m.Size:
		return nil, refusef(ReasonCorrupted, "the object %s is longer than the %d bytes its manifest says", key, m.Size)
	case got != m.Digest:
		return nil, refusef(ReasonCorrupted, "the object %s hashes to %s, and its manifest says %s", key, got, m.Digest)
	}
	r, err := os.Open(v.file)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if v.members, v.sizes, err = verifyArchive(r, m); err != nil {
		return nil, err
	}
	ok = true
	return v, nil
}

// verifyArchive reads the whole compressed archive without writing
// anything: it must be zstd, a tar through its end, hold exactly the
// members and regular-file bytes the manifest counts, and every name must
// lie under one of the manifest's paths. It returns the members' metadata
// and, per manifest path and upload kind, the length of the archive layPath
// uploads there.
func verifyArchive(r io.Reader, m Manifest) ([]member, map[layKey]int64, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, nil, refusef(ReasonForeign, "the object does not decompress as zstd: %v", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var members []member
	var files, bytes int64
	sizes := map[layKey]int64{}
	for _, dir := range m.Paths {
		for _, exact := range []bool{false, true} {
			sizes[layKey{dir, exact}] = 2 * blockSize // the end-of-archive blocks
		}
	}
	var hdr []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, refusef(ReasonForeign, "the object is not a whole checkpoint archive: %v", err)
		}
		files++
		if files > maxMembers || files > m.Files {
			return nil, nil, refusef(ReasonForeign, "the object holds more than the %d members its manifest counts", m.Files)
		}
		name := path.Clean("/" + h.Name)
		if "/"+strings.TrimSuffix(h.Name, "/") != name || !under(name, m.Paths) {
			return nil, nil, refusef(ReasonForeign, "the object names %q, outside the checkpoint's paths", h.Name)
		}
		mb := member{path: name, typ: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid, mtime: h.ModTime}
		switch h.Typeflag {
		case tar.TypeReg:
			if h.Size < 0 || h.Size > m.TreeBytes-bytes {
				return nil, nil, refusef(ReasonForeign, "the object holds more file bytes than the %d its manifest counts", m.TreeBytes)
			}
			n, err := io.Copy(io.Discard, io.LimitReader(tr, m.TreeBytes-bytes+1))
			bytes += n
			if err != nil {
				return nil, nil, refusef(ReasonForeign, "the object's archive broke off in %s: %v", h.Name, err)
			}
			if bytes > m.TreeBytes {
				return nil, nil, refusef(ReasonForeign, "the object holds more file bytes than the %d its manifest counts", m.TreeBytes)
			}
			if n != h.Size {
				return nil, nil, refusef(ReasonForeign, "the object's %s holds %d bytes, and its header says %d", h.Name, n, h.Size)
			}
		case tar.TypeDir:
		case tar.TypeLink:
			target := path.Clean("/" + h.Linkname)
			if !under(target, m.Paths) || pathOf(target, m.Paths) != pathOf(name, m.Paths) {
				return nil, nil, refusef(ReasonForeign, "the object's hard link %q leads to %q, outside its own checkpoint path", h.Name, h.Linkname)
			}
		case tar.TypeSymlink:
			if strings.HasPrefix(h.Linkname, "/") {
				mb.link = h.Linkname
			}
		default:
			return nil, nil, refusef(ReasonForeign, "the object holds %s of tar type %q, which no checkpoint writes", h.Name, h.Typeflag)
		}
		members = append(members, mb)
		// What layPath sends for this member to each path: the renamed
		// header as it encodes it, then the contents, padded.
		for k := range sizes {
			rh := *h
			keep, err := renameFor(&rh, k.dir, k.exact)
			if err != nil {
				return nil, nil, refusef(ReasonForeign, "the object's %s: %v", h.Name, err)
			}
			if !keep {
				continue
			}
			if hdr, err = encodeHeader(hdr[:0], &rh); err != nil {
				return nil, nil, refusef(ReasonForeign, "the object's %s cannot be renamed beneath %s: %v", h.Name, k.dir, err)
			}
			sizes[k] += int64(len(hdr)) + padded(contentSize(&rh))
		}
	}
	if files != m.Files || bytes != m.TreeBytes {
		return nil, nil, refusef(ReasonForeign, "the object holds %d members and %d file bytes, and its manifest says %d and %d", files, bytes, m.Files, m.TreeBytes)
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return nil, nil, refusef(ReasonForeign, "the object's compressed stream is damaged after its archive: %v", err)
	}
	return members, sizes, nil
}

// pathOf is the checkpoint path name lies beneath ("" for none).
func pathOf(name string, paths []string) string {
	for _, p := range paths {
		if name == p || p == "/" || strings.HasPrefix(name, p+"/") {
			return p
		}
	}
	return ""
}

func under(name string, paths []string) bool {
	for _, p := range paths {
		if name == p || p == "/" || strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	return false
}

// Prepared is a checkpoint verified on this host, ready to be laid into
// any number of sandboxes; Close removes its host copy.
type Prepared struct {
	v *verified
}

// Manifest is the checkpoint's manifest.
func (p *Prepared) Manifest() Manifest { return p.v.m }

// Close removes the verified host copy.
func (p *Prepared) Close() { p.v.close() }

// Prepare reads the checkpoint ref (a name or digest) and verifies its
// object on this host, refusing it before anything is launched.
func (s *Store) Prepare(ctx context.Context, ref string) (*Prepared, error) {
	m, err := s.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	v, err := s.fetch(ctx, m)
	if err != nil {
		return nil, err
	}
	return &Prepared{v: v}, nil
}

// Restore launches a sandbox from the checkpoint ref's image and version
// and lays its files before returning it. Every refusal comes before the
// launch; a sandbox launched for a restore that then failed is terminated.
func Restore(ctx context.Context, store *Store, ref string, o RestoreOptions) (*sandbox.Sandbox, error) {
	if err := store.check(); err != nil {
		return nil, err
	}
	m, err := store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(m, &o); err != nil {
		return nil, err
	}
	v, err := store.fetch(ctx, m)
	if err != nil {
		return nil, err
	}
	defer v.close()
	return launchInto(ctx, &Prepared{v: v}, o)
}

// RestorePrepared is Restore from a checkpoint already verified here.
func RestorePrepared(ctx context.Context, p *Prepared, o RestoreOptions) (*sandbox.Sandbox, error) {
	if err := checkVersion(p.v.m, &o); err != nil {
		return nil, err
	}
	return launchInto(ctx, p, o)
}

func launchInto(ctx context.Context, p *Prepared, o RestoreOptions) (*sandbox.Sandbox, error) {
	if o.Launch == nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "a restore needs a Launcher (sandbox.LaunchOn(client), or an embedded emulator's Launch)")
	}
	sb, err := o.Launch(ctx, o.Options)
	if err != nil {
		if sb != nil {
			sb.Terminate(context.WithoutCancel(ctx), sandbox.TeardownOptions{})
		}
		return nil, err
	}
	if err := Lay(ctx, sb, p); err != nil {
		sb.Terminate(context.WithoutCancel(ctx), sandbox.TeardownOptions{})
		return nil, err
	}
	return sb, nil
}

// Lay writes a verified checkpoint's files into a running sandbox, one
// upload per checkpoint path. Where agentd serves the exact extraction
// (PUT /v1/fs/tar/exact), that upload keeps every mode, owner, time and
// symlink, and nothing else runs in the guest: no shell, no process per
// distinct time. Otherwise (an image's older agentd, or the reference's)
// the data filter's upload is followed by one script for the modes,
// owners, times and absolute symlinks it does not keep, which needs sh,
// chown, chmod, touch and ln in the image.
func Lay(ctx context.Context, sb *sandbox.Sandbox, p *Prepared) error {
	sess := sb.Session()
	if sess == nil {
		return client.Errorf(taxonomy.KindPrecondition, "", "%s has no session: files are laid into a RUNNING sandbox", sb)
	}
	exact := serves(sess, ctx, protocol.OpFsWriteTarExact)
	// One upload per path, each confined by agentd beneath that path, so
	// no member can land outside the directory it was saved from.
	for _, dir := range p.v.m.Paths {
		if err := layPath(ctx, sess, p.v.file, dir, p.v.sizes[layKey{dir, exact}], exact); err != nil {
			return err
		}
	}
	if exact {
		return nil
	}
	script := fixupScript(p.v.members)
	name := "/tmp/.microvm-checkpoint-" + randHex() + ".sh"
	if err := sb.WriteFile(ctx, name, []byte(script), 0o600); err != nil {
		return err
	}
	res, err := sb.Run(ctx, []string{"sh", name}, client.RunOptions{})
	if err != nil {
		return err
	}
	if res.ExitStatus != 0 {
		return client.Errorf(taxonomy.KindExecFailed, "", "applying the checkpoint's modes, owners and times failed (exit %d): %s", res.ExitStatus, strings.TrimSpace(res.Stderr))
	}
	return nil
}

// serves is whether sess's agentd serves the route op (the exact tar
// routes); a variable only so this package's tests can take the fallbacks
// an older agentd gets with this build's.
var serves = (*client.Session).Serves

// layPath uploads the members under dir, named relative to it, into dir,
// with the archive's length as the upload's Content-Length: a chunked
// body was re-chunked at 32 KiB by the proxy in front of agentd (the
// emulator's, here) and parsed chunk by chunk by agentd: the same archive
// sent chunked from memory had 0.74-0.93 of the sized upload's throughput. The archive is read from the decoder as the upload
// asks for it, with no goroutine or pipe between them.
func layPath(ctx context.Context, sess *client.Session, file, dir string, size int64, exact bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	// One decoding goroutine: the upload and agentd hold the other cores.
	// The checksum is not checked again: the object's sha256 matched its
	// manifest and verifyArchive read it through with the checksum.
	zr, err := zstd.NewReader(f, zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecoderConcurrency(1), zstd.IgnoreChecksum(true))
	if err != nil {
		return err
	}
	defer zr.Close()
	body := client.SizedReader(&relay{tr: tar.NewReader(zr), dir: dir, exact: exact}, size)
	if exact {
		return sess.WriteTarExact(ctx, dir, body)
	}
	return sess.WriteTar(ctx, dir, body)
}

// relative is name (an archive name: an absolute path without its slash)
// relative to dir, and whether it lies beneath dir at all.
func relative(name, dir string) (string, bool) {
	abs := path.Clean("/" + name)
	if dir == "/" {
		return strings.TrimPrefix(abs, "/"), abs != "/"
	}
	rel, ok := strings.CutPrefix(abs, dir+"/")
	return rel, ok
}

// renameFor makes h the header layPath sends for it into dir: named
// relative to dir, a hard link's target too. It reports false for the
// members left out: those not beneath dir and, unless the upload is exact,
// dir itself (the script sets its metadata) and absolute symlinks (the
// data filter refuses them; the script makes them). An exact upload names
// dir itself "./", which sets dir's own metadata.
func renameFor(h *tar.Header, dir string, exact bool) (bool, error) {
	if exact && h.Typeflag == tar.TypeDir && path.Clean("/"+h.Name) == dir {
		h.Name = "./"
		return true, nil
	}
	rel, ok := relative(h.Name, dir)
	if !ok || (!exact && h.Typeflag == tar.TypeSymlink && strings.HasPrefix(h.Linkname, "/")) {
		return false, nil
	}
	if h.Typeflag == tar.TypeLink {
		if h.Linkname, ok = relative(h.Linkname, dir); !ok {
			return false, fmt.Errorf("hard link %s leads out of %s", h.Name, dir) // verifyArchive refuses it
		}
	}
	if h.Typeflag == tar.TypeDir {
		rel += "/"
	}
	h.Name = rel
	return true, nil
}

const blockSize = 512

// contentSize is how many bytes of contents follow h in an archive: only
// a regular file's (the only kind with contents verifyArchive admits).
func contentSize(h *tar.Header) int64 {
	if h.Typeflag == tar.TypeReg {
		return h.Size
	}
	return 0
}

// padded is n rounded up to whole blocks.
func padded(n int64) int64 { return (n + blockSize - 1) / blockSize * blockSize }

// encodeHeader appends h's encoding (its header blocks, with any PAX
// records) as tar.Writer writes it, to dst.
func encodeHeader(dst []byte, h *tar.Header) ([]byte, error) {
	w := appendWriter{dst}
	err := tar.NewWriter(&w).WriteHeader(h) // the contents are not written: only the header is wanted
	return w.b, err
}

type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// relay reads as the archive for one path: the verified archive's members
// beneath dir, renamed (renameFor), each header re-encoded and its
// contents read straight from the tar reader into the caller's buffer,
// then the end-of-archive blocks. verifyArchive counted the same bytes.
type relay struct {
	tr      *tar.Reader
	dir     string
	exact   bool   // for agentd's exact extraction (renameFor)
	pending []byte // header bytes not yet read
	hdr     []byte // the storage pending slices
	name    string // the member whose contents are being read
	content int64  // contents left to read
	pad     int64  // padding left to read
	end     bool   // the end-of-archive blocks are pending or read
}

var endBlocks [2 * blockSize]byte

func (r *relay) Read(p []byte) (int, error) {
	for len(p) > 0 {
		switch {
		case len(r.pending) > 0:
			n := copy(p, r.pending)
			r.pending = r.pending[n:]
			return n, nil
		case r.content > 0:
			n, err := r.tr.Read(p[:min(int64(len(p)), r.content)])
			r.content -= int64(n)
			if err == io.EOF && r.content > 0 {
				err = fmt.Errorf("the archive broke off in %s", r.name)
			} else if err == io.EOF {
				err = nil
			}
			return n, err
		case r.pad > 0:
			n := int(min(int64(len(p)), r.pad))
			clear(p[:n])
			r.pad -= int64(n)
			return n, nil
		case r.end:
			return 0, io.EOF
		}
		h, err := r.tr.Next()
		if err == io.EOF {
			r.end = true
			r.pending = endBlocks[:]
			continue
		}
		if err != nil {
			return 0, err
		}
		keep, err := renameFor(h, r.dir, r.exact)
		if err != nil {
			return 0, err
		}
		if !keep {
			continue
		}
		if r.hdr, err = encodeHeader(r.hdr[:0], h); err != nil {
			return 0, err
		}
		r.pending, r.name = r.hdr, h.Name
		r.content = contentSize(h)
		r.pad = padded(r.content) - r.content
	}
	return 0, nil
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// fixupScript is the sh script that makes every member's metadata what the
// archive says. Paths sharing a value go to one command, in groups, so a
// tree of thousands of files costs tens of processes, not thousands.
// Directories come last, deepest first, so setting a child's time or a
// read-only mode never undoes or blocks what is set after it.
func fixupScript(members []member) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\nrm -f \"$0\"\nst=0\n")
	var links []member
	var others, dirs []member
	for _, m := range members {
		switch {
		case m.link != "":
			links = append(links, m)
		case m.typ == tar.TypeDir:
			dirs = append(dirs, m)
		default:
			others = append(others, m)
		}
	}
	for _, l := range links {
		fmt.Fprintf(&b, "ln -sfn %s %s || st=1\n", shq(l.link), shq(l.path))
	}
	sort.SliceStable(dirs, func(i, j int) bool { return strings.Count(dirs[i].path, "/") > strings.Count(dirs[j].path, "/") })
	all := append(append(append([]member{}, links...), others...), dirs...)
	group := func(cmd string, key func(m member) (string, bool)) {
		order := []string{}
		by := map[string][]string{}
		for _, m := range all {
			k, ok := key(m)
			if !ok {
				continue
			}
			if _, seen := by[k]; !seen {
				order = append(order, k)
			}
			by[k] = append(by[k], m.path)
		}
		for _, k := range order {
			ps := by[k]
			for len(ps) > 0 {
				n := min(len(ps), 200)
				b.WriteString(cmd + " " + k + " --")
				for _, p := range ps[:n] {
					b.WriteString(" " + shq(p))
				}
				b.WriteString(" || st=1\n")
				ps = ps[n:]
			}
		}
	}
	group("chown -h", func(m member) (string, bool) { return fmt.Sprintf("%d:%d", m.uid, m.gid), true })
	// Non-directories first, then directories deepest first: all is in
	// that order, and group keeps first-seen order per value only, so
	// modes and times of directories go in a pass of their own.
	nonDir := func(f func(m member) (string, bool)) func(m member) (string, bool) {
		return func(m member) (string, bool) {
			if m.typ == tar.TypeDir {
				return "", false
			}
			return f(m)
		}
	}
	onlyDir := func(f func(m member) (string, bool)) func(m member) (string, bool) {
		return func(m member) (string, bool) {
			if m.typ != tar.TypeDir {
				return "", false
			}
			return f(m)
		}
	}
	mode := func(m member) (string, bool) {
		if m.typ == tar.TypeSymlink || m.typ == tar.TypeLink {
			return "", false // a link's mode is its target's; a hard link's is the first name's
		}
		return fmt.Sprintf("%04o", m.mode&0o7777), true
	}
	mtime := func(m member) (string, bool) {
		if m.typ == tar.TypeLink {
			return "", false
		}
		return fmt.Sprintf("@%d.%09d", m.mtime.Unix(), m.mtime.Nanosecond()), true
	}
	group("chmod", nonDir(mode))
	group("touch -h -d", nonDir(mtime))
	group("chmod", onlyDir(mode))
	for _, d := range dirs { // deepest first: a parent's time is set after its children's
		if k, ok := mtime(d); ok {
			fmt.Fprintf(&b, "touch -h -d %s -- %s || st=1\n", k, shq(d.path))
		}
	}
	b.WriteString("exit $st\n")
	return b.String()
}
