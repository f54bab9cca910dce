package checkpoint

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Options describe one checkpoint.
type Options struct {
	// Paths are absolute paths in the sandbox to save; empty is the
	// sandbox's working directory (where its commands start).
	Paths []string
	// Name names the checkpoint ([A-Za-z0-9][A-Za-z0-9._-]{0,127}); a
	// second checkpoint of the same name replaces the first's manifest.
	// Empty stores it under its digest.
	Name string
	// Labels are kept in the manifest as they are given.
	Labels map[string]string
	// NoPause leaves the sandbox's commands running while the files are
	// read; the manifest's ChangedUnderneath then names what changed.
	NoPause bool
	// Now is the manifest's clock (default time.Now).
	Now func() time.Time
}

// maxPaths bounds one checkpoint's paths.
const maxPaths = 64

// Checkpoint saves opts.Paths of sb into store and returns the manifest it
// wrote. The object is written before the manifest; any failure returns
// before the manifest exists.
func Checkpoint(ctx context.Context, sb *sandbox.Sandbox, store *Store, opts Options) (Manifest, error) {
	if err := store.check(); err != nil {
		return Manifest{}, err
	}
	if opts.Name != "" && !namePattern().MatchString(opts.Name) {
		return Manifest{}, client.Errorf(taxonomy.KindInvalidArg, "", "checkpoint name %q: use 1 to 128 of A-Z a-z 0-9 . _ - starting with a letter or digit", opts.Name)
	}
	sess := sb.Session()
	if sess == nil {
		return Manifest{}, client.Errorf(taxonomy.KindPrecondition, "", "%s has no session: a checkpoint needs a RUNNING sandbox", sb)
	}
	paths, err := checkpointPaths(ctx, sb, opts.Paths)
	if err != nil {
		return Manifest{}, err
	}
	arn, version, err := sandbox.ImageOf(ctx, sb)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Format: Format, Name: opts.Name, Compression: "zstd", Paths: paths, ImageARN: arn, ImageVersion: version,
		MicrovmID: sb.ID(), ClientVersion: clientVersion(), WritersPaused: !opts.NoPause}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	m.CreatedAt = now().UTC().Format(time.RFC3339Nano)
	keys := make([]string, 0, len(opts.Labels))
	for k := range opts.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m.Labels = append(m.Labels, cliapi.CheckpointLabel{Key: k, Value: opts.Labels[k]})
	}

	var resume func()
	if !opts.NoPause {
		resume, err = pauseWriters(ctx, sess)
		if err != nil {
			return Manifest{}, err
		}
	}
	// The packed bytes leave for the bucket as they are made, under a
	// staging key (their digest, the final key, is known only at the end),
	// and are hashed on the way; nothing is spooled on this machine. The
	// compressor's blocks go straight into the upload's part buffers (the
	// pipe copies each once), and the sha256 is taken on the pipe's
	// reading side, by the upload's goroutine, so it runs beside the
	// compressor rather than before each of its writes.
	staging := store.stagingKey()
	pr, pw := io.Pipe()
	h := sha256.New()
	uploaded := make(chan error, 1)
	go func() {
		err := store.putStaging(ctx, staging, io.TeeReader(pr, h))
		pr.CloseWithError(errors.New("the checkpoint's upload ended"))
		uploaded <- err
	}()
	cw := &countingWriter{w: pw, limit: store.maxObject()}
	stats, err := packPaths(ctx, sess, paths, cw)
	if resume != nil {
		resume()
	}
	pw.CloseWithError(err) // nil: the object's end
	if uerr := <-uploaded; err == nil {
		err = uerr
	}
	if err != nil {
		store.dropStaging(ctx, staging)
		return Manifest{}, err
	}
	promoted := false // promote removes the staging key itself
	defer func() {
		if !promoted {
			store.dropStaging(ctx, staging)
		}
	}()
	if opts.NoPause {
		if afterPack != nil {
			afterPack()
		}
		if m.ChangedUnderneath, err = changedSince(ctx, sess, paths, stats.seen); err != nil {
			return Manifest{}, err
		}
	}
	m.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	m.Size, m.TreeBytes, m.Files = cw.n, stats.treeBytes, stats.files
	promoted = true
	if err := store.promote(ctx, staging, cw.n, m.Digest); err != nil {
		return Manifest{}, err
	}
	if err := store.putManifest(ctx, m); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

func clientVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/microvms/microvms" {
				return d.Version
			}
		}
		if bi.Main.Path == "github.com/microvms/microvms" && bi.Main.Version != "" {
			return bi.Main.Version
		}
	}
	return "(devel)"
}

// checkpointPaths cleans the paths and refuses relative, duplicate or
// nested ones (a nested path would be saved twice); none is the working
// directory, as `pwd` in the sandbox says it.
func checkpointPaths(ctx context.Context, sb *sandbox.Sandbox, in []string) ([]string, error) {
	if len(in) == 0 {
		res, err := sb.Run(ctx, []string{"pwd"}, client.RunOptions{})
		if err != nil {
			return nil, err
		}
		if err := res.Err(); err != nil {
			return nil, err
		}
		wd := strings.TrimSpace(res.Stdout)
		if wd == "/" || wd == "" {
			// An image without a WORKDIR starts commands at the root; a
			// default that saved the whole filesystem would be a surprise.
			return nil, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingBaseImagesLackWorkdir,
				"the sandbox's working directory is %q, so there is no default to save; name the paths (Options.Paths)", wd)
		}
		in = []string{wd}
	}
	if len(in) > maxPaths {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "a checkpoint of %d paths is over %d", len(in), maxPaths)
	}
	out := make([]string, 0, len(in))
	for _, p := range in {
		if !strings.HasPrefix(p, "/") {
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "checkpoint path %q is not absolute", p)
		}
		out = append(out, path.Clean(p))
	}
	sort.Strings(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] || out[i-1] == "/" || strings.HasPrefix(out[i], out[i-1]+"/") {
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "checkpoint path %s lies inside %s; name only the outer one", out[i], out[i-1])
		}
	}
	return out, nil
}

// pauseWriters stops the process group of every command agentd is running
// and returns what continues them. Continuing uses a context the caller's
// cancellation cannot stop: a group left stopped is a hung sandbox.
func pauseWriters(ctx context.Context, sess *client.Session) (func(), error) {
	execs, err := sess.Execs(ctx)
	if err != nil {
		return nil, err
	}
	var stopped []*client.Exec
	resume := func() {
		bg := context.WithoutCancel(ctx)
		for _, e := range stopped {
			_, _ = e.Signal(bg, "CONT")
		}
	}
	for _, x := range execs {
		if x.Phase != protocol.PhaseRunning {
			continue
		}
		e := sess.Exec(x.ExecID)
		if _, err := e.Signal(ctx, "STOP"); err != nil {
			resume()
			return nil, err
		}
		stopped = append(stopped, e)
	}
	return resume, nil
}

// countingWriter counts and bounds what it passes on.
type countingWriter struct {
	w     io.Writer
	n     int64
	limit int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.limit {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "the checkpoint object is over %d bytes (Store.MaxObjectBytes)", c.limit).
			WithCause(&client.BoundError{Key: "MaxObjectBytes", Limit: c.limit, What: "the checkpoint object"})
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type packStats struct {
	files, treeBytes int64
	seen             map[string]stamp // archive name → what the tar said
}

type stamp struct {
	size  int64
	mtime time.Time
}

// archiveName is the member name of rel under the checkpoint path p: the
// absolute path without its leading slash, so one archive laid at "/"
// puts every path back where it was.
func archiveName(p, rel string) string {
	base := strings.TrimPrefix(p, "/")
	rel = strings.TrimPrefix(strings.TrimPrefix(rel, "./"), "/")
	if rel == "" {
		return base
	}
	if base == "" {
		return rel
	}
	return base + "/" + rel
}

// packPaths streams each path's tar from agentd into one archive, its
// members renamed beneath their absolute paths, compressed with zstd, and
// written to w. Where agentd serves the exact tar (GET /v1/fs/tar/exact),
// its headers carry the nanoseconds; otherwise each path is also listed
// for them (listMtimes), a second walk of the tree.
func packPaths(ctx context.Context, sess *client.Session, paths []string, w io.Writer) (packStats, error) {
	st := packStats{seen: map[string]stamp{}}
	exact := serves(sess, ctx, protocol.OpFsReadTarExact)
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2))
	if err != nil {
		return st, err
	}
	tw := tar.NewWriter(zw)
	for _, p := range paths {
		info, err := sess.Stat(ctx, p)
		if err != nil {
			zw.Close()
			return st, err
		}
		if info.Type != protocol.FileTypeDirectory {
			zw.Close()
			return st, client.Errorf(taxonomy.KindInvalidArg, "", "checkpoint path %s is a %s; checkpoints hold directories", p, info.Type)
		}
		// The path's own directory is a member, so its mode, owner and
		// time come back too.
		if p != "/" {
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: archiveName(p, "") + "/", Mode: fileMode(info.Mode), Uid: int(info.UID), Gid: int(info.GID), ModTime: info.Mtime, Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				zw.Close()
				return st, err
			}
			st.files++
		}
		var mtimes map[string]time.Time
		if !exact {
			if mtimes, err = listMtimes(ctx, sess, p); err != nil {
				zw.Close()
				return st, err
			}
		}
		if err := copyTree(ctx, sess, p, tw, &st, exact, mtimes); err != nil {
			zw.Close()
			return st, err
		}
	}
	if err := tw.Close(); err != nil {
		zw.Close()
		return st, err
	}
	return st, zw.Close()
}

// listMtimes is every member's mtime to the nanosecond, by archive name,
// for an agentd without the exact tar: the plain tar download carries
// whole seconds (its headers are the narrowest format that holds them),
// the listing the inode's own time.
func listMtimes(ctx context.Context, sess *client.Session, p string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := sess.List(ctx, p, client.ListOptions{Depth: maxDepth}, func(fi protocol.FileInfo) error {
		if len(out) >= maxMembers {
			return client.Errorf(taxonomy.KindInvalidArg, "", "%s holds more than %d members", p, maxMembers)
		}
		out[strings.TrimPrefix(path.Clean(fi.Path), "/")] = fi.Mtime
		return nil
	})
	return out, err
}

// maxDepth is how deep a checkpoint's listing descends.
const maxDepth = 4096

func copyTree(ctx context.Context, sess *client.Session, p string, tw *tar.Writer, st *packStats, exact bool, mtimes map[string]time.Time) error {
	open := sess.OpenTar
	if exact {
		open = sess.OpenTarExact
	}
	rc, err := open(ctx, p)
	if err != nil {
		return err
	}
	defer rc.Close()
	// Large reads and writes: archive/tar reads its source in the sizes it
	// is asked for, and io.Copy would ask 32 KiB at a time.
	tr := tar.NewReader(bufio.NewReaderSize(rc, 1<<20))
	buf := make([]byte, 1<<20)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return client.Errorf(taxonomy.KindProtocol, "", "the tar of %s broke off: %w", p, err).WithCause(err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name := archiveName(p, strings.TrimSuffix(h.Name, "/"))
		if h.Typeflag == tar.TypeDir {
			name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			h.Linkname = archiveName(p, h.Linkname)
		}
		if t, ok := mtimes[strings.TrimSuffix(name, "/")]; ok && t.Unix() == h.ModTime.Unix() {
			h.ModTime = t
		}
		h.Name = name
		h.Format = tar.FormatPAX
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		st.files++
		st.seen[strings.TrimSuffix(name, "/")] = stamp{size: h.Size, mtime: h.ModTime}
		if h.Typeflag == tar.TypeReg {
			n, err := io.CopyBuffer(onlyWriter{tw}, onlyReader{tr}, buf)
			st.treeBytes += n
			if err != nil {
				var ce *client.Error
				if errors.As(err, &ce) {
					return ce
				}
				return client.Errorf(taxonomy.KindProtocol, "", "the tar of %s broke off in %s: %w", p, h.Name, err).WithCause(err)
			}
		}
	}
}

// onlyWriter and onlyReader hide ReadFrom and WriteTo, so CopyBuffer uses
// the large buffer it is given.
type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }

// fileMode reads the four octal digits FileInfo.mode carries.
func fileMode(s string) int64 {
	var m int64
	fmt.Sscanf(s, "%o", &m)
	return m
}

// changedSince lists paths again and names every member whose size or
// mtime differs from what the tar carried, or that appeared or vanished.
// afterPack, set only by this package's tests, runs between the read and
// the listing that finds what changed under it: a guest's writer is not
// scheduled on demand, so a test makes its change there instead.
var afterPack func()

func changedSince(ctx context.Context, sess *client.Session, paths []string, seen map[string]stamp) ([]string, error) {
	now := map[string]stamp{}
	for _, p := range paths {
		err := sess.List(ctx, p, client.ListOptions{Depth: maxDepth}, func(fi protocol.FileInfo) error {
			if path.Clean(fi.Path) == p {
				return nil
			}
			name := strings.TrimPrefix(fi.Path, "/")
			if fi.Type == protocol.FileTypeDirectory {
				now[name] = stamp{mtime: fi.Mtime}
				return nil
			}
			now[name] = stamp{size: int64(fi.Size), mtime: fi.Mtime}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var changed []string
	for name, was := range seen {
		is, ok := now[name]
		if !ok || is.size != was.size || !is.mtime.Truncate(time.Second).Equal(was.mtime.Truncate(time.Second)) {
			changed = append(changed, "/"+name)
		}
	}
	for name := range now {
		if _, ok := seen[name]; !ok {
			changed = append(changed, "/"+name)
		}
	}
	sort.Strings(changed)
	return changed, nil
}
