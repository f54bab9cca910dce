package imagebuild

// A local build's layers: each file-changing step is a snapshot named by
// its parent and its inputs (a repeat build adopts it), made by hard-linking
// its parent and applying the step's overlay upper layer (whiteouts and
// opaque directories included).

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// chainKey names a step's result: its parent's key and everything the step
// depends on.
func chainKey(parent string, parts ...any) string {
	raw, _ := json.Marshal(parts)
	h := sha256.Sum256(append([]byte(parent+"\n"), raw...))
	return hex.EncodeToString(h[:])
}

// stepDir is where the snapshot named key lives.
func stepDir(cache, key string) string { return filepath.Join(cache, "steps", key) }

// adopt moves s onto the snapshot named key if it has been made already.
func (s *imageState) adopt(cache, key string) bool {
	dir := stepDir(cache, key)
	if _, err := os.Stat(filepath.Join(dir, "complete")); err != nil {
		return false
	}
	s.key, s.root = key, filepath.Join(dir, "root")
	return true
}

// workdirStep makes the WORKDIR in the image when it is missing (a
// snapshot of its own); an existing one leaves the image as it is. The
// path is resolved inside the image's root.
func (b *DockerBuild) workdirStep(s *imageState) (bool, error) {
	rel := strings.TrimPrefix(s.Workdir, "/")
	if rel == "" {
		return true, nil
	}
	if r, err := os.OpenRoot(s.root); err == nil {
		_, serr := r.Stat(rel)
		r.Close()
		if serr == nil {
			return true, nil
		}
	}
	key := chainKey(s.key, "WORKDIR", s.Workdir)
	if s.adopt(b.Cache, key) {
		return true, nil
	}
	return b.commit(s, key, func(root *os.Root) error { return root.MkdirAll(rel, 0o755) })
}

// commit makes the snapshot named key: the parent's root linked file by
// file, then change applied to it, renamed into the cache only when
// complete.
func (b *DockerBuild) commit(s *imageState, key string, change func(*os.Root) error) (bool, error) {
	steps := filepath.Join(b.Cache, "steps")
	if err := os.MkdirAll(steps, 0o700); err != nil {
		return false, err
	}
	tmp, err := os.MkdirTemp(steps, ".step-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	// The snapshot shares every unchanged file's inode with its parent:
	// the builder only ever replaces a file, never writes one in place,
	// and a guest sees a snapshot only as an overlay's lower layer. It
	// stays 0700: an image's setuid files are nobody else's to reach.
	newRoot := filepath.Join(tmp, "root")
	if err := linkTree(s.root, newRoot); err != nil {
		return false, fmt.Errorf("snapshotting the image root: %w", err)
	}
	root, err := os.OpenRoot(newRoot)
	if err != nil {
		return false, err
	}
	err = change(root)
	root.Close()
	if err != nil {
		return false, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), []byte(key+"\n"), 0o600); err != nil {
		return false, err
	}
	dir := stepDir(b.Cache, key)
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return false, err
	}
	s.key, s.root = key, filepath.Join(dir, "root")
	return false, nil
}

// linkTree recreates src at dst: directories made anew (with src's owner
// and mode), every other entry hard-linked. src is a snapshot the builder
// made, so no path in it leads elsewhere.
func linkTree(src, dst string) error {
	asRoot := os.Geteuid() == 0
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if !d.IsDir() {
			err := os.Link(p, out)
			if errors.Is(err, syscall.EMLINK) {
				// An inode at the filesystem's link limit (a busybox
				// image's hundreds of links, once per snapshot): a copy.
				return copyEntry(p, out, asRoot)
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.Mkdir(out, 0o700); err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && asRoot {
			if err := os.Lchown(out, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
		return os.Chmod(out, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	})
}

// applyUpper applies an overlay upper layer (a RUN's changes) to root: a
// whiteout (a 0:0 character device) deletes, an opaque directory replaces
// the parent's, anything else replaces what is there. Owners are the host's
// ids less offset: the image's. The files' sizes add up to at most budget:
// a sparse file takes no room on the step's tmpfs but its full size once
// copied into the cache.
func applyUpper(upper string, root *os.Root, offset int, budget int64) error {
	asRoot := os.Geteuid() == 0
	return filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(upper, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&fs.ModeCharDevice != 0 && st != nil && st.Rdev == 0 {
			return root.RemoveAll(rel)
		}
		uid, gid := 0, 0
		if st != nil {
			uid, gid = max(int(st.Uid)-offset, 0), max(int(st.Gid)-offset, 0)
		}
		perm := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch {
		case fi.IsDir():
			if cur, err := root.Lstat(rel); err == nil && (!cur.IsDir() || opaque(p)) {
				if err := root.RemoveAll(rel); err != nil {
					return err
				}
			}
			if err := root.Mkdir(rel, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		case fi.Mode().IsRegular():
			if budget -= fi.Size(); budget < 0 {
				return fmt.Errorf("%s: the step's files add up to more than its writable layer's bound (LOCAL_GUEST_WRITABLE_MIB)", rel)
			}
			if err := root.RemoveAll(rel); err != nil {
				return err
			}
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			err = copyInto(root, rel, in)
			in.Close()
			if err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := root.RemoveAll(rel); err != nil {
				return err
			}
			if err := root.Symlink(l, rel); err != nil {
				return err
			}
			if asRoot {
				return root.Lchown(rel, uid, gid)
			}
			return nil
		default:
			return nil // fifos, sockets, devices: not part of an image
		}
		if asRoot {
			if err := root.Lchown(rel, uid, gid); err != nil {
				return err
			}
		}
		return root.Chmod(rel, perm)
	})
}

// opaque reports an overlay directory that hides the lower one's contents.
func opaque(dir string) bool {
	for _, attr := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		buf := make([]byte, 8)
		if n, err := unix.Lgetxattr(dir, attr, buf); err == nil && n > 0 && buf[0] == 'y' {
			return true
		}
	}
	return false
}
