// Package testimage makes small OCI base images for tests of local
// Dockerfile builds, hermetically: one layer holding a few of the host's
// programs and the shared libraries they load, written as an OCI image
// layout or a `docker save` tarball with go-containerregistry.
//
// It must never be imported by non-test code.
package testimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// baseBinaries are the host programs the test base image carries, with
// the shared libraries ldd says they need: enough for a shell RUN step to
// make files and directories, change owners and say who it runs as.
var baseBinaries = []string{"sh", "mkdir", "cat", "chown", "id", "stat", "rm", "ls"}

// Base makes a one-layer base image from the host's programs, as
// an OCI image layout (or, with dockerSave, a `docker save` tarball), and
// returns its path. It has a user "builder" (1000:1000) and a file owned
// by it, so the image's own ids are exercised from the base up.
func Base(t testing.TB, dockerSave bool) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDir := func(p string) {
		for _, d := range parents(p) {
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	addFile := func(p string, data []byte, mode int64, uid int) {
		addDir(filepath.Dir(p))
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), Uid: uid, Gid: uid}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, b := range baseBinaries {
		src, err := exec.LookPath(b)
		if err != nil {
			t.Fatalf("the host lacks %s for the test base image: %v", b, err)
		}
		files := []string{src}
		out, err := exec.Command("ldd", src).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", src, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					files = append(files, f)
				}
			}
		}
		for i, f := range files {
			dst := strings.TrimPrefix(f, "/")
			if i == 0 {
				dst = "bin/" + b
			}
			if seen[dst] {
				continue
			}
			seen[dst] = true
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			addFile(dst, data, 0o755, 0)
		}
	}
	addFile("etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nbuilder:x:1000:1000::/home/builder:/bin/sh\n"), 0o644, 0)
	addFile("etc/group", []byte("root:x:0:\nbuilder:x:1000:\n"), 0o644, 0)
	addFile("home/builder/base-owned", []byte("the base's\n"), 0o644, 1000)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env = []string{"PATH=/bin", "FROM_BASE=yes"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if dockerSave {
		p := filepath.Join(dir, "base.tar")
		tag, _ := name.NewTag("example.test/base:1")
		if err := tarball.WriteToFile(p, tag, img); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := filepath.Join(dir, "layout")
	lp, err := layout.Write(p, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})); err != nil {
		t.Fatal(err)
	}
	return p
}

func parents(p string) []string {
	var out []string
	for p != "." && p != "/" && p != "" {
		out = append([]string{p}, out...)
		p = filepath.Dir(p)
	}
	return out
}
