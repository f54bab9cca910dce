package tarx

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Measure walks root without following symlinks and refuses a tree over the
// caps before a single archive byte exists, so a 413 is still possible: once
// a download's status line is out, no refusal is.
func Measure(root string, caps Caps) (members, size int64, err error) {
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := caps.stopped(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		if !packable(d.Type()) {
			return nil
		}
		members++
		if caps.MaxMembers > 0 && members > caps.MaxMembers {
			return &LimitError{Detail: fmt.Sprintf("tree under %s has more than %d members (limits.max_tar_members)", root, caps.MaxMembers)}
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			size += info.Size()
			if caps.MaxBytes > 0 && size > caps.MaxBytes {
				return &LimitError{Detail: fmt.Sprintf("tree under %s exceeds %d bytes (limits.max_tar_bytes)", root, caps.MaxBytes)}
			}
		}
		return nil
	})
	return members, size, err
}

// packable is what a download carries: the member kinds extraction accepts.
// Sockets cannot be represented, and devices and fifos would only be refused
// on the way back in.
func packable(t fs.FileMode) bool {
	return t.IsRegular() || t.IsDir() || t&fs.ModeSymlink != 0
}

// ErrTreeChanged means the tree grew past the caps between Measure and Pack,
// or a file changed size under the packer; the archive written so far is
// incomplete and the caller must not let it look complete.
var ErrTreeChanged = errors.New("the tree changed while it was being packed")

// Pack writes an uncompressed tar of the tree under root to w: symlinks as
// symlinks, repeated inodes as hard links, names relative to root. The root
// itself is not a member; extraction treats it as the destination anyway.
// Without exact each header takes the narrowest format that holds it
// (USTAR for most: whole seconds); with exact every header is PAX, so the
// modification time keeps its nanoseconds. The access and change times
// are left out: reading a tree moves its access times (so the same tree
// read twice would pack differently, and a checkpoint's digest would
// change), and no extraction can set a change time.
func Pack(w io.Writer, root string, caps Caps, exact bool) error {
	tw := tar.NewWriter(w)
	seen := map[[2]uint64]string{}
	buf := make([]byte, 256<<10)
	var members, size int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := caps.stopped(); err != nil {
			return err
		}
		if p == root || !packable(d.Type()) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		members++
		if caps.MaxMembers > 0 && members > caps.MaxMembers {
			return ErrTreeChanged
		}
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if info.IsDir() {
			hdr.Name += "/"
		}
		// PAX keeps long and non-ASCII names exact; the writer picks the
		// narrowest format that can hold each header.
		hdr.Format = tar.FormatUnknown
		if exact {
			hdr.Format, hdr.AccessTime, hdr.ChangeTime = tar.FormatPAX, time.Time{}, time.Time{}
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && info.Mode().IsRegular() && st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := seen[key]; ok {
				hdr.Typeflag = tar.TypeLink
				hdr.Linkname = first
				hdr.Size = 0
				return tw.WriteHeader(hdr)
			}
			seen[key] = name
		}
		if !info.Mode().IsRegular() {
			return tw.WriteHeader(hdr)
		}
		size += hdr.Size
		if caps.MaxBytes > 0 && size > caps.MaxBytes {
			return ErrTreeChanged
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.CopyBuffer(onlyWriter{tw}, onlyReader{f}, buf)
		if err != nil {
			if errors.Is(err, tar.ErrWriteTooLong) {
				return ErrTreeChanged
			}
			return err
		}
		if n != hdr.Size {
			return ErrTreeChanged
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// onlyWriter and onlyReader hide ReadFrom/WriteTo so CopyBuffer uses the
// large buffer instead of a 32 KiB default.
type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }
