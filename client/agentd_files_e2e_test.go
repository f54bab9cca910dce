package client_test

// Files against a real agentd.

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestAgentdFiles covers file and tar transfer.
func TestAgentdFiles(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	s := session(t, d.base, token)
	root := d.dir

	// Catches: a body re-encoded as text (NUL and \xff lost), a mode sent in
	// decimal (0o600 as "384" is an invalid or different mode), and parents
	// not created.
	t.Run("UploadDownloadRoundTrip", func(t *testing.T) {
		ctx := testCtx(t)
		blob := randomBytes(t, 1<<20+7)
		p := filepath.Join(root, "up", "deep", "blob.bin")
		if err := s.WriteFile(ctx, p, bytes.NewReader(blob), 0o640); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		n, err := s.ReadFile(ctx, p, &got, client.LineRange{})
		if err != nil || n != int64(len(blob)) || !bytes.Equal(got.Bytes(), blob) {
			t.Fatalf("download: %d bytes, equal %v, %v", n, bytes.Equal(got.Bytes(), blob), err)
		}
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("mode on disk: %v %v", fi.Mode(), err)
		}
	})

	// Catches: 0-based lines, an exclusive end, start and end swapped, and an
	// unset bound sent as 0 instead of omitted.
	t.Run("LineRanges", func(t *testing.T) {
		ctx := testCtx(t)
		p := filepath.Join(root, "lines.txt")
		if err := s.WriteFile(ctx, p, strings.NewReader("one\ntwo\nthree\nfour\n"), 0); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			r    client.LineRange
			want string
		}{
			{client.LineRange{Start: 2, End: 3}, "two\nthree\n"},
			{client.LineRange{Start: 3}, "three\nfour\n"},
			{client.LineRange{End: 2}, "one\ntwo\n"},
			{client.LineRange{Start: 4, End: 4}, "four\n"},
			{client.LineRange{}, "one\ntwo\nthree\nfour\n"},
		} {
			var b bytes.Buffer
			if _, err := s.ReadFile(ctx, p, &b, c.r); err != nil || b.String() != c.want {
				t.Errorf("lines %+v: %q %v; want %q", c.r, b.String(), err, c.want)
			}
		}
	})

	// Catches: a tar body sent with a text encoding or truncated, members
	// placed outside the target, and a download that drops binary contents.
	t.Run("TarRoundTrip", func(t *testing.T) {
		ctx := testCtx(t)
		files := map[string][]byte{
			"a.txt":       []byte("alpha\n"),
			"sub/b.bin":   randomBytes(t, 70000),
			"sub/c/d.txt": {},
		}
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		for _, dir := range []string{"sub/", "sub/c/"} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"a.txt", "sub/b.bin", "sub/c/d.txt"} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(files[name]))}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(files[name]); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, "tarroot")
		if err := s.WriteTar(ctx, dst, &tb); err != nil {
			t.Fatal(err)
		}
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(dst, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("extracted %s: %d bytes, %v", name, len(got), err)
			}
		}
		var back bytes.Buffer
		if _, err := s.ReadTar(ctx, dst, &back); err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(&back)
		seen := map[string]bool{}
		for range 100 {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			name := strings.TrimPrefix(path.Clean(h.Name), "./")
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			want, ok := files[name]
			if !ok || !bytes.Equal(body, want) {
				t.Fatalf("downloaded member %q: %d bytes, known %v", h.Name, len(body), ok)
			}
			seen[name] = true
		}
		if len(seen) != len(files) {
			t.Fatalf("downloaded members %v, want %d files", seen, len(files))
		}
	})

	// Catches: a file 404 that errors.Is cannot match to fs.ErrNotExist, or
	// one classified as anything but the NotFound wire kind.
	t.Run("MissingIsErrNotExist", func(t *testing.T) {
		ctx := testCtx(t)
		_, err := s.ReadFile(ctx, filepath.Join(root, "no", "such", "file"), io.Discard, client.LineRange{})
		if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, client.WireKindError(taxonomy.WireNotFound)) {
			t.Fatalf("missing file: %v", err)
		}
		_, err = s.ReadTar(ctx, filepath.Join(root, "no-such-dir"), io.Discard)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("missing tar root: %v", err)
		}
	})
}
