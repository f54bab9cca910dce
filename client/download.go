package client

// Download: a guest file, or a guest directory as a tar, written to a local
// file under a bound. The guest decides how many bytes come; the bound, the
// free space of the target's filesystem and sparse writing decide how many
// land on this machine's disk.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/microvms/microvms/client/internal/sparse"
	"github.com/microvms/microvms/gen/taxonomy"
)

// DownloadOptions shape Session.Download.
type DownloadOptions struct {
	// Tar reads the remote directory as an uncompressed tar (GET /v1/fs/tar)
	// and writes the archive itself, unextracted.
	Tar bool
	// MaxBytes is the most the download writes locally; 0 means
	// taxonomy.DefaultMaxDownloadBytes. Past it the download fails with a
	// TooLarge error naming the bound, and nothing is left at the target.
	MaxBytes int64
	// Progress, when set, is called with the bytes written so far.
	Progress func(written int64)
}

// DownloadMaxBytesKey is the BoundError key of a download stopped at its
// DownloadOptions.MaxBytes (not at DEFAULT_MAX_DOWNLOAD_BYTES or the disk's
// free space), so a caller that set the bound can tell it apart.
const DownloadMaxBytesKey = "the download's MaxBytes (cp --max-bytes)"

// Download copies the file at remote (with Tar, the tree at remote as a tar)
// into the local file local and reports how many bytes it wrote. The bytes
// go to a temporary sibling of local that is renamed over it only once the
// whole answer arrived: a failed download (a broken body, a bound passed, a
// full disk) never leaves a file under local, and never a partial one that
// looks whole. Runs of zero blocks are written as holes, so a sparse guest
// file stays sparse here. Two bounds stop a guest that sends without end:
// MaxBytes, and the free space of local's filesystem when the download
// started, less a reserve (the download stops before it, not at ENOSPC).
func (s *Session) Download(ctx context.Context, remote, local string, o DownloadOptions) (int64, error) {
	defer s.busy()()
	limit, key := o.MaxBytes, DownloadMaxBytesKey
	if limit <= 0 {
		limit, key = taxonomy.DefaultMaxDownloadBytes, "DEFAULT_MAX_DOWNLOAD_BYTES"
	}
	dir := filepath.Dir(local)
	tmp, err := os.CreateTemp(dir, ".microvm-cp-*")
	if err != nil {
		return 0, Errorf(taxonomy.KindInvalidArg, "", "creating %s: %v", local, err).WithCause(err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing left to remove
	op := "download of vm:" + remote
	sw := sparse.New(tmp)
	reserve := int64(0)
	if free, ok := freeBytes(dir); ok {
		// A nearly full disk keeps half of what is left, so a small file
		// still fits where 64 MiB are not free.
		reserve = min(downloadDiskReserve, free/2)
		sw.DiskLimit = free - reserve
	}
	var w io.Writer = sw
	if o.Progress != nil {
		w = &progressWriter{w: sw, f: o.Progress}
	}
	bw := &BoundedWriter{W: w, Limit: limit, Key: key, Op: op, What: "the data sent",
		Hint: "nothing was left at " + local + "; raise the bound (cp --max-bytes) if the file is meant to be that large"}
	if o.Tar {
		_, err = s.ReadTar(ctx, remote, bw)
	} else {
		_, err = s.ReadFile(ctx, remote, bw, LineRange{})
	}
	if errors.Is(err, sparse.ErrDiskLimit) {
		err = overBound(op, &BoundError{Key: fmt.Sprintf("the free space of %s less a %d-byte reserve", dir, reserve), Limit: sw.DiskLimit, What: "the data sent"},
			"nothing was left at "+local+"; free space there or download elsewhere")
	}
	if err == nil {
		err = sw.Finish()
	}
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		var ce *Error
		if !errors.As(err, &ce) {
			err = Errorf(taxonomy.KindUnexpected, "", "writing %s: %v", local, err).WithCause(err)
		}
		return 0, err
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return 0, Errorf(taxonomy.KindInvalidArg, "", "writing %s: %v", local, err).WithCause(err)
	}
	return bw.Written(), nil
}

// downloadDiskReserve is left free on the target's filesystem (half of what
// is free, when that is less): a download that would take it is refused
// before the disk is full for everyone else.
const downloadDiskReserve = 64 << 20

type progressWriter struct {
	w io.Writer
	n int64
	f func(int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	p.f(p.n)
	return n, err
}
