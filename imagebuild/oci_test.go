package imagebuild

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

type tarEntry struct {
	name, link string
	typ        byte
	body       string
}

func tarOf(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Catches: an image layer that writes outside the root it is extracted
// into, through a "../" name, an absolute name, a symlink it planted
// (absolute or climbing), or a hard link to a host file. A pulled image is
// anyone's bytes.
func TestHostileLayerStaysInsideTheRoot(t *testing.T) {
	for name, entries := range map[string][]tarEntry{
		"dot-dot":           {{name: "../../escaped", typ: tar.TypeReg, body: "x"}},
		"absolute symlink":  {{name: "etc", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "etc/escaped", typ: tar.TypeReg, body: "x"}},
		"climbing symlink":  {{name: "up", typ: tar.TypeSymlink, link: "../../.."}, {name: "up/OUTSIDEREL/escaped", typ: tar.TypeReg, body: "x"}},
		"hard link to host": {{name: "passwd", typ: tar.TypeLink, link: "../../../../../../etc/passwd"}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			outside := filepath.Join(dir, "outside")
			root := filepath.Join(dir, "a", "b", "root")
			for _, d := range []string{outside, root, filepath.Join(dir, "a", "b", "OUTSIDEREL")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for i := range entries {
				if entries[i].link == "OUTSIDE" {
					entries[i].link = outside
				}
			}
			_ = extractTar(bytes.NewReader(tarOf(t, entries...)), root, 1<<20)
			for _, p := range []string{filepath.Join(outside, "escaped"), filepath.Join(dir, "a", "escaped"), filepath.Join(dir, "escaped"), filepath.Join(dir, "a", "b", "OUTSIDEREL", "escaped")} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the layer wrote %s outside its root", p)
				}
			}
			if fi, err := os.Lstat(filepath.Join(root, "passwd")); err == nil && fi.Mode().IsRegular() {
				if b, _ := os.ReadFile(filepath.Join(root, "passwd")); bytes.Contains(b, []byte("root:")) {
					t.Fatal("the layer hard-linked the host's /etc/passwd into the image")
				}
			}
		})
	}
}

// Catches: an artifact entry named "../x" unpacked outside the build
// context (the artifact is the caller's bytes, the context the emulator's
// state directory).
func TestHostileArtifactEntryStaysInTheContext(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range []string{"../../escaped", "/abs-escaped", "ok/file"} {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
	}
	zw.Close()
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx := filepath.Join(dir, "a", "context")
	if err := unpackContext(zr, ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escaped")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("an artifact entry landed outside the build context")
	}
	for _, p := range []string{"escaped", "abs-escaped", "ok/file"} {
		if _, err := os.Stat(filepath.Join(ctx, p)); err != nil {
			t.Fatalf("%s is not in the context: %v", p, err)
		}
	}
}

// FuzzExtractTar feeds arbitrary layer bytes to the extractor: it may
// refuse them, but never panic or write outside its root.
func FuzzExtractTar(f *testing.F) {
	f.Add(tarOf(f, tarEntry{name: "a/b", typ: tar.TypeReg, body: "x"}))
	f.Add(tarOf(f, tarEntry{name: "l", typ: tar.TypeSymlink, link: "/"}, tarEntry{name: "l/x", typ: tar.TypeReg, body: "x"}))
	f.Add(tarOf(f, tarEntry{name: "../x", typ: tar.TypeReg, body: "x"}))
	f.Add(tarOf(f, tarEntry{name: "d", typ: tar.TypeDir}, tarEntry{name: "d", typ: tar.TypeReg, body: "now a file"}, tarEntry{name: "h", typ: tar.TypeLink, link: "d"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		root := filepath.Join(dir, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = extractTar(bytes.NewReader(data), root, 1<<20)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("the extractor wrote beside its root: %v", entries)
		}
	})
}

// Catches: a layer whose header claims a file of a terabyte (a sparse
// entry reads as that many zeros) extracted until the disk is full: the
// claim is counted against the bound before a byte is written.
func TestLayerClaimingTheDiskIsRefused(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	tw.Flush()
	root := t.TempDir()
	err := extractTar(bytes.NewReader(buf.Bytes()), root, 1<<20)
	if err == nil {
		t.Fatal("a terabyte file was accepted under a 1 MiB bound")
	}
	if _, serr := os.Lstat(filepath.Join(root, "huge")); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("the claimed file was started (%v)", serr)
	}
}
