package imagebuild

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Every blob of a base image is checked against the digest (and size) that
// names it before anything made from it is used or kept: the manifest
// against the digest the index or the reference gave, the config against
// the manifest's descriptor, each layer's bytes against the manifest's
// descriptor and its uncompressed stream against the config's diff_id. The
// cache is keyed by the manifest's digest, so an unchecked blob would let
// a layout that reuses a real manifest around a swapped layer poison every
// later build from the real image (issue 44.3). go-containerregistry checks
// what it pulls from a registry, but reads an OCI layout's and a
// docker-save tarball's blobs as they are; its verifying reader is
// internal, so the same check (sha256 and length, at end of stream) is
// made here for all three.

// BlobMismatchError is a base image's blob whose bytes are not the ones
// its digest names.
type BlobMismatchError struct {
	Blob   string // which blob: "manifest", "config", "layer 2 of 3", ...
	Digest string // the digest the image names it by
	Got    string // the digest (or size) its bytes have
}

func (e *BlobMismatchError) Error() string {
	return fmt.Sprintf("the base image's %s %s does not match its digest (its bytes are %s); it is refused and nothing of it is cached", e.Blob, e.Digest, e.Got)
}

// checkedImage is an image whose layers are read through verifying
// readers; verdict is the first mismatch any of them found, or a layer
// that was not read to its end.
type checkedImage struct {
	v1.Image
	layers []v1.Layer

	mu     sync.Mutex
	err    error
	unread map[int]bool
}

func (c *checkedImage) Layers() ([]v1.Layer, error) { return c.layers, nil }

func (c *checkedImage) record(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil && c.err == nil {
		c.err = err
	}
	if err == nil {
		delete(c.unread, i)
	}
}

// verdict is nil only once every layer was read whole and matched.
func (c *checkedImage) verdict() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	for i := range c.unread {
		return fmt.Errorf("the base image's layer %d of %d was not read to its end, so it is not verified", i+1, len(c.layers))
	}
	return nil
}

// verifiedImage checks img's config now and wraps its layers so that
// extracting them checks them.
func verifiedImage(img v1.Image) (*checkedImage, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("reading the base image's manifest: %w", err)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the base image's config: %w", err)
	}
	if err := checkBytes("config", raw, m.Config.Digest, m.Config.Size); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the base image's config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("reading the base image's layers: %w", err)
	}
	if len(layers) != len(m.Layers) || len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("the base image's manifest names %d layers, its config %d diff_ids", len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	c := &checkedImage{Image: img, unread: map[int]bool{}}
	for i, l := range layers {
		which := fmt.Sprintf("layer %d of %d", i+1, len(layers))
		c.unread[i] = true
		c.layers = append(c.layers, &checkedLayer{Layer: l, img: c, i: i, which: which, desc: m.Layers[i], diffID: cf.RootFS.DiffIDs[i]})
	}
	return c, nil
}

// checkBytes checks a blob held whole.
func checkBytes(which string, b []byte, want v1.Hash, size int64) error {
	got, n, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if got != want {
		return &BlobMismatchError{Blob: which, Digest: want.String(), Got: got.String()}
	}
	if n != size {
		return &BlobMismatchError{Blob: which, Digest: want.String(), Got: fmt.Sprintf("%d bytes, not the %d its descriptor says", n, size)}
	}
	return nil
}

// checkedLayer reads a layer's blob checked against the manifest's
// descriptor and its uncompressed stream checked against the diff_id.
type checkedLayer struct {
	v1.Layer
	img    *checkedImage
	i      int
	which  string
	desc   v1.Descriptor
	diffID v1.Hash
}

func (l *checkedLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *checkedLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *checkedLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *checkedLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }

func (l *checkedLayer) Compressed() (io.ReadCloser, error) {
	rc, err := l.Layer.Compressed()
	if err != nil {
		return nil, err
	}
	// Its failure is the layer's too: a decompressor or tar reader may
	// take it for an end of stream.
	return &verifyingReader{rc: rc, h: sha256.New(), want: l.desc.Digest, size: l.desc.Size, which: l.which, done: l.failed}, nil
}

// failed records err, if any, as the layer's verdict.
func (l *checkedLayer) failed(err error) {
	if err != nil {
		l.img.record(l.i, err)
	}
}

// compressedOnly hides the inner layer's own Uncompressed, so partial's
// decompression reads the checked blob.
type compressedOnly struct{ l *checkedLayer }

func (c compressedOnly) Digest() (v1.Hash, error)            { return c.l.Digest() }
func (c compressedOnly) Compressed() (io.ReadCloser, error)  { return c.l.Compressed() }
func (c compressedOnly) Size() (int64, error)                { return c.l.Size() }
func (c compressedOnly) MediaType() (types.MediaType, error) { return c.l.MediaType() }

func (l *checkedLayer) Uncompressed() (io.ReadCloser, error) {
	var rc io.ReadCloser
	var err error
	if l.desc.MediaType == types.OCIUncompressedLayer || l.desc.MediaType == types.OCIUncompressedRestrictedLayer {
		rc, err = l.Compressed() // the blob is the tar: one check covers both
	} else {
		var dl v1.Layer
		if dl, err = partial.CompressedToLayer(compressedOnly{l}); err == nil {
			rc, err = dl.Uncompressed()
		}
	}
	if err != nil {
		l.failed(fmt.Errorf("reading the base image's %s: %w", l.which, err))
		return nil, err
	}
	return &verifyingReader{rc: rc, h: sha256.New(), want: l.diffID, size: -1, which: l.which + " (uncompressed, its diff_id)", done: func(err error) { l.img.record(l.i, err) }}, nil
}

// verifyingReader hashes what it reads and, at the end of the stream,
// fails unless the hash (and, with size >= 0, the length) is want's. Its
// Close reads the rest first: a tar reader stops at the archive's end
// marker, and bytes after it are part of the blob too.
type verifyingReader struct {
	rc    io.ReadCloser
	h     hash.Hash
	n     int64
	want  v1.Hash
	size  int64
	which string
	err   error // the verdict, once reached
	ended bool
	done  func(error)
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.ended {
		if v.err != nil {
			return 0, v.err
		}
		return 0, io.EOF
	}
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.size >= 0 && v.n > v.size {
		return n, v.end(&BlobMismatchError{Blob: v.which, Digest: v.want.String(), Got: fmt.Sprintf("more than the %d bytes its descriptor says", v.size)})
	}
	if errors.Is(err, io.EOF) {
		got := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", v.h.Sum(nil))}
		switch {
		case got != v.want:
			return n, v.end(&BlobMismatchError{Blob: v.which, Digest: v.want.String(), Got: got.String()})
		case v.size >= 0 && v.n != v.size:
			return n, v.end(&BlobMismatchError{Blob: v.which, Digest: v.want.String(), Got: fmt.Sprintf("%d bytes, not the %d its descriptor says", v.n, v.size)})
		}
		_ = v.end(nil)
		return n, io.EOF
	}
	if err != nil {
		return n, v.end(fmt.Errorf("reading the base image's %s: %w", v.which, err))
	}
	return n, nil
}

func (v *verifyingReader) end(err error) error {
	if !v.ended {
		v.ended, v.err = true, err
		if v.done != nil {
			v.done(err)
		}
	}
	return err
}

func (v *verifyingReader) Close() error {
	if !v.ended {
		// Bounded by the blob's size (a longer one fails as it passes it)
		// or, uncompressed, by the decompressor's input: the layer bound.
		_, _ = io.CopyN(io.Discard, v, maxImageBytes)
	}
	cerr := v.rc.Close()
	if v.err != nil {
		return v.err
	}
	return cerr
}
