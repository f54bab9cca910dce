package imagebuild

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// A Dockerfile's FROM is an OCI image, read with go-containerregistry: the
// library crane, ko and most registry tooling are built on, which speaks
// every registry's auth flow (Docker credential helpers through
// authn.DefaultKeychain), both manifest media types and image indexes, and
// reads OCI image layouts and `docker save` tarballs the same way. Its
// flattened root (mutate.Extract applies every layer and its whiteouts) is
// kept by digest under the build cache, so a base is pulled and extracted
// once per machine.

// maxImageBytes bounds the files a base image's root may hold once
// extracted: generous for any real base (they run to a few GiB), a stop
// for a layer whose headers (or sparse entries) claim the disk.
const maxImageBytes = 64 << 30

// baseImage is a resolved, extracted FROM.
type baseImage struct {
	digest string // the image's manifest digest, sha256:...
	root   string // its flattened root filesystem
	config v1.Config
}

// hostPlatform is the platform a base is picked for: guests run on the host.
func hostPlatform() v1.Platform {
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// openBaseImage reads the image at file (an OCI image layout directory or
// a `docker save` tarball) or, with file empty, pulls ref from its
// registry with the user's Docker credentials.
func openBaseImage(ctx context.Context, ref, file string) (v1.Image, error) {
	if file != "" {
		return imageFromFile(file)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("FROM %s is not an image reference: %w", ref, err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithPlatform(hostPlatform()))
	if err != nil {
		return nil, fmt.Errorf("pulling FROM %s (give an OCI layout or a docker-save tarball with --base-image on a machine that cannot reach its registry): %w", ref, err)
	}
	return img, nil
}

func imageFromFile(file string) (v1.Image, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("the base image: %w", err)
	}
	if !fi.IsDir() {
		img, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			return nil, fmt.Errorf("the base image %s is not a docker-save tarball of one image: %w", file, err)
		}
		return img, nil
	}
	idx, err := layout.ImageIndexFromPath(file)
	if err != nil {
		return nil, fmt.Errorf("the base image %s is not an OCI image layout: %w", file, err)
	}
	return pickImage(idx, file)
}

// pickImage finds the host's image in an index: the one matching the
// host's platform, else the only image there is.
func pickImage(idx v1.ImageIndex, file string) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	want := hostPlatform()
	var only *v1.Descriptor
	images := 0
	for i, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			return pickImage(child, file)
		case d.MediaType.IsImage():
			images++
			only = &m.Manifests[i]
			if d.Platform != nil && d.Platform.Satisfies(want) {
				return checkedManifest(idx, d)
			}
		}
	}
	if images == 1 && (only.Platform == nil || only.Platform.OS == "") {
		return checkedManifest(idx, *only)
	}
	return nil, fmt.Errorf("the OCI layout %s holds no image for %s/%s", file, want.OS, want.Architecture)
}

// checkedManifest is the image d names in idx, its manifest's bytes
// checked against d: the cache is keyed by that digest.
func checkedManifest(idx v1.ImageIndex, d v1.Descriptor) (v1.Image, error) {
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the base image's manifest %s: %w", d.Digest, err)
	}
	if err := checkBytes("manifest", raw, d.Digest, d.Size); err != nil {
		return nil, err
	}
	return img, nil
}

// extractBase makes img's flattened root under cache (once per digest) and
// returns it.
func extractBase(img v1.Image, cache string) (*baseImage, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("reading the base image's digest: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the base image's config: %w", err)
	}
	if cf.OS != "" && cf.OS != "linux" || cf.Architecture != "" && cf.Architecture != runtime.GOARCH {
		return nil, fmt.Errorf("the base image %s is %s/%s, but local guests run on this host (linux/%s)", digest, cf.OS, cf.Architecture, runtime.GOARCH)
	}
	b := &baseImage{digest: digest.String(), config: cf.Config}
	dir := filepath.Join(cache, "base", digest.Hex)
	b.root = filepath.Join(dir, "root")
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return b, nil
	}
	// Nothing is extracted, let alone kept under the digest, before every
	// blob the manifest names has been checked against it.
	checked, err := verifiedImage(img)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cache, "base"), 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(cache, "base"), ".extract-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Mkdir(filepath.Join(tmp, "root"), 0o755); err != nil {
		return nil, err
	}
	rc := mutate.Extract(checked)
	err = extractTar(rc, filepath.Join(tmp, "root"), maxImageBytes)
	rc.Close()
	if verr := checked.verdict(); verr != nil {
		err = verr // a blob's mismatch is the cause, whatever the tar made of it
	}
	if err != nil {
		return nil, fmt.Errorf("extracting the base image %s: %w", digest, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), []byte(digest.String()+"\n"), 0o600); err != nil {
		return nil, err
	}
	_ = os.RemoveAll(dir) // an incomplete one a crash left
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	return b, nil
}

// resolveBase opens and extracts FROM ref (or the image at file). A pulled
// reference's digest is remembered, so a machine that has pulled it once
// builds from it again offline.
func resolveBase(ctx context.Context, ref, file, cache string) (*baseImage, error) {
	refFile := filepath.Join(cache, "refs", refKey(ref))
	img, err := openBaseImage(ctx, ref, file)
	if err != nil {
		if file == "" {
			if b, ok := cachedRef(refFile, cache); ok {
				return b, nil
			}
		}
		return nil, err
	}
	b, err := extractBase(img, cache)
	if err != nil {
		return nil, err
	}
	if file == "" {
		raw, _ := json.Marshal(b.config)
		_ = os.MkdirAll(filepath.Dir(refFile), 0o700)
		_ = os.WriteFile(refFile, []byte(b.digest+"\n"+string(raw)), 0o600)
	}
	return b, nil
}

func refKey(ref string) string {
	h := sha256.Sum256([]byte(ref))
	return hex.EncodeToString(h[:])
}

func cachedRef(refFile, cache string) (*baseImage, bool) {
	raw, err := os.ReadFile(refFile)
	if err != nil {
		return nil, false
	}
	digest, cfg, _ := strings.Cut(string(raw), "\n")
	b := &baseImage{digest: digest}
	if json.Unmarshal([]byte(cfg), &b.config) != nil {
		return nil, false
	}
	hexd := strings.TrimPrefix(digest, "sha256:")
	if _, err := os.Stat(filepath.Join(cache, "base", hexd, "complete")); err != nil {
		return nil, false
	}
	b.root = filepath.Join(cache, "base", hexd, "root")
	return b, true
}

// extractTar writes a flattened image tar into dst. Every path is resolved
// inside dst through os.Root, so an entry naming "../x", or one reached
// through a symlink the archive planted, cannot write outside it. Owners
// are kept when running as root (they are the image's ids; a guest sees
// them through an idmapped mount); device nodes are not made.
func extractTar(r io.Reader, dst string, budget int64) error {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	return extractTarIn(r, root, budget)
}

// extractTarIn is extractTar into an open root.
func extractTarIn(r io.Reader, root *os.Root, budget int64) error {
	asRoot := os.Geteuid() == 0
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if rel == "" {
			continue
		}
		if dir := path.Dir(rel); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
		mode := os.FileMode(h.Mode).Perm() | tarSpecialBits(h.Mode)
		switch h.Typeflag {
		case tar.TypeDir:
			if fi, err := root.Lstat(rel); err == nil && !fi.IsDir() {
				_ = root.Remove(rel)
			}
			if err := root.Mkdir(rel, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		case tar.TypeReg:
			// Counted before a byte is written: a header may claim any
			// size, a sparse entry reads as that many bytes of zeros.
			if budget -= h.Size; h.Size < 0 || budget < 0 {
				return fmt.Errorf("%s: the image's files add up to more than the extraction bound", h.Name)
			}
			_ = root.RemoveAll(rel)
			f, err := root.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			_ = root.RemoveAll(rel)
			if err := root.Symlink(h.Linkname, rel); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		case tar.TypeLink:
			_ = root.RemoveAll(rel)
			target := strings.TrimPrefix(path.Clean("/"+h.Linkname), "/")
			if err := root.Link(target, rel); err != nil {
				return fmt.Errorf("%s: hard link to %s: %w", h.Name, h.Linkname, err)
			}
			continue // the link shares its target's owner and mode
		default:
			continue // devices and fifos: a guest's /dev is its own
		}
		if asRoot {
			if err := root.Lchown(rel, h.Uid, h.Gid); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := root.Chmod(rel, mode); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
	}
}

// tarSpecialBits is the setuid, setgid and sticky bits of a tar mode.
func tarSpecialBits(m int64) os.FileMode {
	var out os.FileMode
	if m&0o4000 != 0 {
		out |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}
