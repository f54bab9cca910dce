package imagebuild

// COPY and ADD in a local build: sources read from the build context
// through an os.Root (never outside it), written into the image's root
// with the step's owner and mode; ADD unpacks a local tar.

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
)

// copyStep copies sources from the build context into the image.
func (b *DockerBuild) copyStep(s *imageState, sd instructions.SourcesAndDest, chown, chmod, verb string) (bool, error) {
	if len(sd.SourceContents) > 0 {
		return false, fmt.Errorf("%s with a here-document is not performed by a local build", verb)
	}
	if b.Context == "" {
		return false, fmt.Errorf("%s needs a build context, and this build has none", verb)
	}
	var mode os.FileMode
	if chmod != "" {
		m, err := strconv.ParseUint(chmod, 8, 32)
		if err != nil || m > 0o7777 {
			return false, fmt.Errorf("%s --chmod=%s: an octal mode is expected", verb, chmod)
		}
		mode = os.FileMode(m).Perm() | tarSpecialBits(int64(m))
	}
	ctxRoot, err := os.OpenRoot(b.Context)
	if err != nil {
		return false, err
	}
	defer ctxRoot.Close()
	var srcs []string
	for _, p := range sd.SourcePaths {
		rel := strings.TrimPrefix(path.Clean("/"+p), "/")
		if rel == "" {
			rel = "."
		}
		matches, err := fs.Glob(ctxRoot.FS(), rel)
		if err != nil || len(matches) == 0 {
			return false, fmt.Errorf("%s source %s: not in the build context", verb, p)
		}
		srcs = append(srcs, matches...)
	}
	dest := sd.DestPath
	if !path.IsAbs(dest) {
		dest = path.Join("/", s.Workdir, dest)
	}
	intoDir := strings.HasSuffix(sd.DestPath, "/") || len(srcs) > 1
	if !intoDir {
		// A destination the image has as a directory is copied into, as
		// Docker does; resolved inside the image's root.
		if r, err := os.OpenRoot(s.root); err == nil {
			if fi, err := r.Stat(strings.TrimPrefix(dest, "/")); err == nil && fi.IsDir() {
				intoDir = true
			}
			r.Close()
		}
	}
	unpack := verb == "ADD"
	// The key hashes the bytes and modes copied, not their names alone.
	h := sha256.New()
	for _, src := range srcs {
		if err := fs.WalkDir(ctxRoot.FS(), src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00%o\x00", p, fi.Mode())
			if fi.Mode().IsRegular() {
				f, err := ctxRoot.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = io.Copy(h, f)
				return err
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				l, _ := ctxRoot.Readlink(p)
				h.Write([]byte(l))
			}
			return nil
		}); err != nil {
			return false, fmt.Errorf("%s source %s: %w", verb, src, err)
		}
	}
	key := chainKey(s.key, verb, srcs, hex.EncodeToString(h.Sum(nil)), dest, intoDir, chown, chmod, s.Workdir, unpack)
	if s.adopt(b.Cache, key) {
		return true, nil
	}
	uid, gid := -1, -1
	if chown != "" {
		u, g, _, err := resolveUser(s.root, chown)
		if err != nil {
			return false, fmt.Errorf("%s --chown=%s: %w", verb, chown, err)
		}
		uid, gid = int(u), int(g)
	} else if os.Geteuid() == 0 {
		uid, gid = 0, 0
	}
	return b.commit(s, key, func(root *os.Root) error {
		for _, src := range srcs {
			fi, err := ctxRoot.Lstat(src)
			if err != nil {
				return err
			}
			target := strings.TrimPrefix(dest, "/")
			if unpack && fi.Mode().IsRegular() {
				// ADD unpacks a local tar archive (plain or gzip) into the
				// destination directory, as Docker does; anything else is
				// copied.
				if done, err := addArchive(ctxRoot, src, root, target); done || err != nil {
					return err
				}
			}
			if fi.IsDir() {
				// A directory's contents are copied, not the directory.
			} else if intoDir {
				target = path.Join(target, path.Base(src))
			}
			if err := copyFromContext(ctxRoot, src, root, target, uid, gid, mode); err != nil {
				return err
			}
		}
		return nil
	})
}

// copyFromContext copies src (a file or a directory's tree) from the
// context to target in the image, owned by uid:gid (-1 keeps the
// builder's) with mode (0 keeps the source's).
func copyFromContext(ctxRoot *os.Root, src string, root *os.Root, target string, uid, gid int, mode os.FileMode) error {
	return fs.WalkDir(ctxRoot.FS(), src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := path.Join(target, filepath.ToSlash(rel))
		if out == "" || out == "." {
			out = "."
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if dir := path.Dir(out); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		m := fi.Mode().Perm()
		if mode != 0 {
			m = mode
		}
		switch {
		case fi.IsDir():
			if out != "." {
				if st, err := root.Lstat(out); err == nil && !st.IsDir() {
					_ = root.Remove(out)
				}
				if err := root.Mkdir(out, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
					return err
				}
			}
		case fi.Mode().IsRegular():
			_ = root.RemoveAll(out)
			in, err := ctxRoot.Open(p)
			if err != nil {
				return err
			}
			err = copyInto(root, out, in)
			in.Close()
			if err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := ctxRoot.Readlink(p)
			if err != nil {
				return err
			}
			_ = root.RemoveAll(out)
			if err := root.Symlink(l, out); err != nil {
				return err
			}
			if uid >= 0 {
				return root.Lchown(out, uid, gid)
			}
			return nil
		default:
			return nil
		}
		if uid >= 0 && (out != "." || fi.IsDir()) {
			if err := root.Lchown(out, uid, gid); err != nil {
				return err
			}
		}
		if fi.IsDir() && mode == 0 {
			m = fi.Mode().Perm() | 0o700
		}
		return root.Chmod(out, m)
	})
}

// addArchive unpacks src into target if it is a tar archive, plain or
// gzip-compressed, and reports whether it was one. The archive's entries
// are confined to the image's root like a base layer's.
func addArchive(ctxRoot *os.Root, src string, root *os.Root, target string) (bool, error) {
	f, err := ctxRoot.Open(src)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	var r io.Reader = f
	if bytes.HasPrefix(head, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return false, nil
		}
		defer zr.Close()
		r = zr
	} else if len(head) < 262 || string(head[257:262]) != "ustar" {
		return false, nil
	}
	into := root
	if target != "" && target != "." {
		if err := root.MkdirAll(target, 0o755); err != nil {
			return false, err
		}
		if into, err = root.OpenRoot(target); err != nil {
			return false, err
		}
		defer into.Close()
	}
	if err := extractTarIn(r, into, maxImageBytes); err != nil {
		return true, fmt.Errorf("unpacking %s: %w", src, err)
	}
	return true, nil
}

// copyEntry copies the file or symlink at src to dst with its owner (as
// root) and mode.
func copyEntry(src, dst string, asRoot bool) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		l, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(l, dst); err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	default:
		return nil
	}
	if asRoot && st != nil {
		if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	return os.Chmod(dst, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
}

// copyInto writes in's bytes to a new file name under root (owner-only
// until the caller sets its mode and owner); name must not exist.
func copyInto(root *os.Root, name string, in io.Reader) error {
	f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, in)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
