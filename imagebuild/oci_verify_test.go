package imagebuild

import (
	"archive/tar"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// layerOf is a gzip'd layer holding one file.
func layerOf(t *testing.T, name, body string) v1.Layer {
	t.Helper()
	raw := tarOf(t, tarEntry{name: name, typ: tar.TypeReg, body: body})
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(string(raw))), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// writeLayout writes img as an OCI layout under dir.
func writeLayout(t *testing.T, dir string, img v1.Image) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
}

// forHost sets img's platform to the host's, keeping its diff_ids.
func forHost(t *testing.T, img v1.Image) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", hostPlatform().Architecture
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// Catches: a layout blob used without checking it against its digest (the
// issue-44.3 attack: a layout reusing a real manifest around a swapped
// layer was extracted and kept under the real manifest's digest, so a later
// build from the real layout got the hostile file), a mismatch that leaves
// anything in the cache, and a refusal that does not name the blob.
func TestSwappedLayoutBlobIsRefusedAndNotCached(t *testing.T) {
	real := layerOf(t, "etc/motd", "the real image\n")
	img, err := mutate.AppendLayers(empty.Image, layerOf(t, "etc/base", "first layer\n"), real)
	if err != nil {
		t.Fatal(err)
	}
	img = forHost(t, img)
	legit := filepath.Join(t.TempDir(), "legit")
	writeLayout(t, legit, img)
	realDigest, _ := real.Digest()

	// The same manifest and config; layer 2's file holds another layer.
	hostile := filepath.Join(t.TempDir(), "hostile")
	copyDir(t, legit, hostile)
	rc, err := layerOf(t, "etc/motd", "HOSTILE\n").Compressed()
	if err != nil {
		t.Fatal(err)
	}
	swapped, _ := io.ReadAll(rc)
	blob := filepath.Join(hostile, "blobs", "sha256", realDigest.Hex)
	if err := os.WriteFile(blob, swapped, 0o644); err != nil {
		t.Fatal(err)
	}

	cache := t.TempDir()
	_, err = resolveBase(t.Context(), "example.test/base:1", hostile, cache)
	var mismatch *BlobMismatchError
	if !errors.As(err, &mismatch) {
		t.Fatalf("a layout whose layer blob was swapped: %v, want a BlobMismatchError", err)
	}
	if !strings.Contains(err.Error(), realDigest.String()) || !strings.Contains(err.Error(), "layer 2 of 2") {
		t.Fatalf("the refusal names neither the blob's digest %s nor which layer: %v", realDigest, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(cache, "base")); len(entries) != 0 {
		t.Fatalf("a refused image left %d entries in the cache: %v", len(entries), entries)
	}

	b, err := resolveBase(t.Context(), "example.test/base:1", legit, cache)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.root, "etc/motd")); string(got) != "the real image\n" {
		t.Fatalf("the legitimate layout's build read %q", got)
	}
}

// Catches: a config blob read without its digest checked, and a docker-save
// tarball's layer not checked against the config's diff_id (the tarball's
// manifest is computed from its bytes, so only the diff_id can tell).
func TestSwappedConfigAndTarballLayerAreRefused(t *testing.T) {
	img, err := mutate.AppendLayers(empty.Image, layerOf(t, "etc/motd", "real\n"))
	if err != nil {
		t.Fatal(err)
	}
	img = forHost(t, img)
	t.Run("layout config", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "l")
		writeLayout(t, dir, img)
		m, _ := img.Manifest()
		blob := filepath.Join(dir, "blobs", "sha256", m.Config.Digest.Hex)
		raw, _ := os.ReadFile(blob)
		raw = []byte(strings.Replace(string(raw), `"linux"`, `"linux" `, 1))
		if err := os.WriteFile(blob, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := resolveBase(t.Context(), "x", dir, t.TempDir())
		var mismatch *BlobMismatchError
		if !errors.As(err, &mismatch) || mismatch.Blob != "config" || mismatch.Digest != m.Config.Digest.String() {
			t.Fatalf("a swapped config blob: %v", err)
		}
	})
	t.Run("layout manifest", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "l")
		writeLayout(t, dir, img)
		d, _ := img.Digest()
		blob := filepath.Join(dir, "blobs", "sha256", d.Hex)
		raw, _ := os.ReadFile(blob)
		if err := os.WriteFile(blob, append(raw, ' '), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := resolveBase(t.Context(), "x", dir, t.TempDir())
		var mismatch *BlobMismatchError
		if !errors.As(err, &mismatch) || mismatch.Blob != "manifest" || mismatch.Digest != d.String() {
			t.Fatalf("a manifest blob that is not the index's: %v", err)
		}
	})
	t.Run("docker-save layer", func(t *testing.T) {
		// A layer whose bytes are another layer's, under the real one's
		// diff_id in the config.
		cf, _ := img.ConfigFile()
		other, err := mutate.AppendLayers(empty.Image, layerOf(t, "etc/motd", "HOSTILE\n"))
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		other, err = mutate.ConfigFile(other, cf)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "save.tar")
		if err := tarball.WriteToFile(file, nil, other); err != nil {
			t.Fatal(err)
		}
		cache := t.TempDir()
		_, err = resolveBase(t.Context(), "x", file, cache)
		var mismatch *BlobMismatchError
		if !errors.As(err, &mismatch) || !strings.Contains(mismatch.Blob, "diff_id") {
			t.Fatalf("a docker-save layer that is not its diff_id's: %v", err)
		}
		if entries, _ := os.ReadDir(filepath.Join(cache, "base")); len(entries) != 0 {
			t.Fatalf("a refused image left %v in the cache", entries)
		}
	})
}

// Catches: a registry blob whose bytes are not its digest's extracted or
// cached (go-containerregistry checks what it pulls; this keeps a change
// of reader, or a cache written before the check, from losing that).
func TestTamperedRegistryBlobIsRefusedAndNotCached(t *testing.T) {
	real := layerOf(t, "etc/motd", "the real image\n")
	img, err := mutate.AppendLayers(empty.Image, real)
	if err != nil {
		t.Fatal(err)
	}
	img = forHost(t, img)
	digest, _ := real.Digest()
	rc, _ := layerOf(t, "etc/motd", "HOSTILE\n").Compressed()
	hostile, _ := io.ReadAll(rc)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var tamper atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tamper.Load() && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+digest.String()) {
			_, _ = w.Write(hostile)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "http://") + "/base:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", t.TempDir())
	tamper.Store(true)
	cache := t.TempDir()
	_, err = resolveBase(t.Context(), ref.String(), "", cache)
	if err == nil || !strings.Contains(err.Error(), digest.Hex) || !strings.Contains(err.Error(), "layer 1 of 1") {
		t.Fatalf("a registry layer whose bytes are not its digest's: %v", err)
	}
	for _, d := range []string{"base", "refs"} {
		if entries, _ := os.ReadDir(filepath.Join(cache, d)); len(entries) != 0 {
			t.Fatalf("a refused pull left %v in the cache's %s", entries, d)
		}
	}
	tamper.Store(false)
	b, err := resolveBase(t.Context(), ref.String(), "", cache)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.root, "etc/motd")); string(got) != "the real image\n" {
		t.Fatalf("the honest registry's pull read %q", got)
	}
}
