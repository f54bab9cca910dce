package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/internal/sparse"
	"github.com/microvms/microvms/gen/taxonomy"
)

// MaxReadFileBytes is the most ReadFile returns in one slice
// (taxonomy.MaxReadFileBytes, MAX_READ_FILE_BYTES). A larger file is
// refused rather than held whole; stream it with Session().OpenFile.
const MaxReadFileBytes = taxonomy.MaxReadFileBytes

// ReadFile returns the whole file at path in the VM. A missing file is an
// error for which errors.Is(err, fs.ErrNotExist) holds and whose message
// quotes the path. A file over MaxReadFileBytes is refused with an
// InvalidArg error naming MAX_READ_FILE_BYTES (client.ErrOverBound in its
// chain), having held no more than that bound.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	sess, err := s.runningSession()
	if err != nil {
		return nil, err
	}
	rc, err := sess.OpenFile(ctx, path, client.LineRange{})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, over, err := readAtMost(rc, MaxReadFileBytes)
	if err != nil {
		return nil, err
	}
	if over {
		// InvalidArg, as it always was: reading this file whole is the
		// request refused, whether the file is large or the guest hostile.
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "%s is over %d bytes (MAX_READ_FILE_BYTES); stream it with Session().OpenFile, or download it, instead of reading it whole", path, MaxReadFileBytes).
			WithCause(&client.BoundError{Key: "MAX_READ_FILE_BYTES", Limit: MaxReadFileBytes, What: path})
	}
	return b, nil
}

// WriteFile writes data to the file at path in the VM, creating its parent
// directories. A zero mode leaves the daemon's default.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	sess, err := s.runningSession()
	if err != nil {
		return err
	}
	return sess.WriteFile(ctx, path, bytes.NewReader(data), mode)
}

// UploadDir copies the local directory tree at local into dir in the VM. The
// tree is streamed as a tar archive while it is walked, never held whole;
// the daemon extracts it confined beneath dir. Regular files, directories
// and symbolic links are sent; anything else (a socket, a device) is
// refused by name.
func (s *Sandbox) UploadDir(ctx context.Context, local, dir string) error {
	sess, err := s.runningSession()
	if err != nil {
		return err
	}
	st, err := os.Stat(local)
	if err != nil {
		return client.Errorf(taxonomy.KindInvalidArg, "", "upload source %s: %w", local, err).WithCause(err)
	}
	if !st.IsDir() {
		return client.Errorf(taxonomy.KindInvalidArg, "", "upload source %s is not a directory; send a single file with WriteFile", local)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(packDir(local, pw)) }()
	err = sess.WriteTar(ctx, dir, pr)
	pr.CloseWithError(errors.New("upload finished"))
	return err
}

// packDir writes the tree at root to w as an uncompressed tar, with paths
// relative to root.
func packDir(root string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode().IsRegular(), info.IsDir():
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return client.Errorf(taxonomy.KindInvalidArg, "", "%s is a %s, which a directory upload cannot carry; remove it or upload around it", p, info.Mode().Type())
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// DownloadDir copies the directory tree at dir in the VM into the local
// directory local, creating it. The tree arrives as a tar stream and is
// extracted as it is read, every entry confined beneath local (os.Root): an
// entry naming a path outside it is refused, and no entry is ever written
// through a link that leads out. Existing files are overwritten. At most
// taxonomy.DefaultMaxDownloadBytes of member data are written, with runs of
// zero blocks (a sparse member's holes among them) left as holes; past the
// bound the download fails with a TooLarge error naming
// DEFAULT_MAX_DOWNLOAD_BYTES, and the member it was writing is removed.
func (s *Sandbox) DownloadDir(ctx context.Context, dir, local string) error {
	sess, err := s.runningSession()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(local, 0o755); err != nil {
		return client.Errorf(taxonomy.KindInvalidArg, "", "download target %s: %w", local, err).WithCause(err)
	}
	root, err := os.OpenRoot(local)
	if err != nil {
		return client.Errorf(taxonomy.KindInvalidArg, "", "download target %s: %w", local, err).WithCause(err)
	}
	defer root.Close()
	rc, err := sess.OpenTar(ctx, dir)
	if err != nil {
		return err
	}
	defer rc.Close()
	return unpack(tar.NewReader(rc), root, local, taxonomy.DefaultMaxDownloadBytes)
}

// unpack extracts tr beneath root, writing at most budget bytes of member
// data in all.
func unpack(tr *tar.Reader, root *os.Root, local string, budget int64) error {
	written := int64(0)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.FromSlash(strings.TrimPrefix(h.Name, "./"))
		if name == "" || name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return client.Errorf(taxonomy.KindProtocol, "", "the archive names %q, outside %s; nothing past it was extracted", h.Name, local)
		}
		mode := fs.FileMode(h.Mode).Perm()
		if dir := filepath.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("extracting %s into %s: %w", h.Name, local, err)
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("extracting %s into %s: %w", h.Name, local, err)
			}
			_ = root.Chmod(name, mode|0o700)
		case tar.TypeReg:
			_ = root.Remove(name) // never write through whatever was there
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return fmt.Errorf("extracting %s into %s: %w", h.Name, local, err)
			}
			sw := sparse.New(f)
			bw := &client.BoundedWriter{W: sw, Limit: budget - written, Key: "DEFAULT_MAX_DOWNLOAD_BYTES", Op: "download of a tree into " + local,
				What: fmt.Sprintf("the archive's data (at %s)", h.Name), Hint: "download a smaller tree, or the large file alone with cp --max-bytes"}
			_, err = io.Copy(bw, tr)
			written += bw.Written()
			if err == nil {
				err = sw.Finish()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = root.Remove(name) // never a partial file that looks whole
				var ce *client.Error
				if errors.As(err, &ce) {
					return ce
				}
				return fmt.Errorf("extracting %s into %s: %w", h.Name, local, err)
			}
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(h.Linkname, name); err != nil {
				return fmt.Errorf("extracting %s into %s: %w", h.Name, local, err)
			}
		default:
			return client.Errorf(taxonomy.KindProtocol, "", "the archive entry %q is of tar type %q, which DownloadDir does not extract", h.Name, h.Typeflag)
		}
	}
}

// readAtMost reads r to its end, or to limit bytes and then one more to
// learn whether there was more (over), doubling its buffer up to limit: at
// most twice limit is allocated in all (io.ReadAll grows large buffers a
// quarter at a time, about five times).
func readAtMost(r io.Reader, limit int) (b []byte, over bool, err error) {
	b = make([]byte, 0, min(64<<10, limit))
	for {
		if len(b) == cap(b) {
			if len(b) == limit {
				var one [1]byte
				n, err := io.ReadFull(r, one[:])
				if err == io.EOF {
					err = nil
				}
				return b, n > 0, err
			}
			nb := make([]byte, len(b), min(2*cap(b), limit))
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, false, nil
		}
		if err != nil {
			return b, false, err
		}
	}
}
