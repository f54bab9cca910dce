package checkpoint

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// checkRelay reads the relay of the verified object b for each of m's
// paths and fails unless it is exactly the length verifyArchive counted
// (the upload's Content-Length) and a whole archive of the members beneath
// that path, renamed relative to it, with their contents.
func checkRelay(t testing.TB, b []byte, m Manifest, sizes map[layKey]int64) {
	t.Helper()
	for k := range sizes {
		dir, exact := k.dir, k.exact
		zr, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(&relay{tr: tar.NewReader(zr), dir: dir, exact: exact})
		zr.Close()
		if err != nil {
			t.Fatalf("%s: relay: %v", dir, err)
		}
		if int64(len(out)) != sizes[k] {
			t.Fatalf("%s (exact %v): relay read %d bytes, verifyArchive counted %d", dir, exact, len(out), sizes[k])
		}
		// What the relay must carry: the source's members beneath dir,
		// renamed, in order, with the same contents.
		zr, _ = zstd.NewReader(bytes.NewReader(b))
		src := tar.NewReader(zr)
		got := tar.NewReader(bytes.NewReader(out))
		for {
			h, err := src.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			want, _ := io.ReadAll(src)
			keep, err := renameFor(h, dir, exact)
			if err != nil || !keep {
				continue
			}
			g, err := got.Next()
			if err != nil {
				t.Fatalf("%s: relay ends before %s: %v", dir, h.Name, err)
			}
			body, err := io.ReadAll(got)
			if err != nil {
				t.Fatal(err)
			}
			if g.Name != h.Name || g.Linkname != h.Linkname || g.Typeflag != h.Typeflag || g.Mode != h.Mode || !bytes.Equal(body, want) {
				t.Fatalf("%s: relay holds %q -> %q (%d bytes), want %q -> %q (%d bytes)", dir, g.Name, g.Linkname, len(body), h.Name, h.Linkname, len(want))
			}
		}
		zr.Close()
		if g, err := got.Next(); err != io.EOF {
			t.Fatalf("%s: relay holds more: %v %v", dir, g, err)
		}
	}
}

// Catches: the upload's Content-Length and the relayed archive differing
// (the upload fails, or agentd reads a cut archive), members of another
// path or dir itself relayed, an absolute symlink relayed (agentd refuses
// it), or contents lost at block boundaries or behind long (PAX) names.
func TestRelayIsWhatVerifyCounted(t *testing.T) {
	long := "w/" + strings.Repeat("d", 120) + "/" + strings.Repeat("f", 150)
	var hs []*tar.Header
	add := func(h *tar.Header) { h.Format = tar.FormatPAX; hs = append(hs, h) }
	add(&tar.Header{Name: "v/", Typeflag: tar.TypeDir, Mode: 0o755})
	add(&tar.Header{Name: "v/x", Typeflag: tar.TypeReg, Size: 700, Mode: 0o600})
	add(&tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755})
	add(&tar.Header{Name: "w/" + strings.Repeat("d", 120) + "/", Typeflag: tar.TypeDir, Mode: 0o700})
	var tree int64
	for i, n := range []int64{0, 1, 511, 512, 513, 4096, 100000} {
		add(&tar.Header{Name: "w/f" + strings.Repeat("x", i), Typeflag: tar.TypeReg, Size: n, Mode: 0o644})
		tree += n
	}
	add(&tar.Header{Name: long, Typeflag: tar.TypeReg, Size: 1025, Mode: 0o4755, PAXRecords: map[string]string{"SCHILY.xattr.user.k": "v"}})
	add(&tar.Header{Name: "w/hard", Typeflag: tar.TypeLink, Linkname: "w/f"})
	add(&tar.Header{Name: "w/rel", Typeflag: tar.TypeSymlink, Linkname: "../v/x"})
	add(&tar.Header{Name: "w/abs", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"})
	tree += 700 + 1025
	m := validManifest()
	m.Paths = []string{"/v", "/w"}
	m.Files, m.TreeBytes = int64(len(hs)), tree
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for i, h := range hs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte{byte('a' + i)}, int(h.Size)))
		}
	}
	tw.Close()
	var z bytes.Buffer
	zw, _ := zstd.NewWriter(&z)
	zw.Write(raw.Bytes())
	zw.Close()
	members, sizes, err := verifyArchive(bytes.NewReader(z.Bytes()), m)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != len(hs) {
		t.Fatalf("%d members", len(members))
	}
	checkRelay(t, z.Bytes(), m, sizes)
	// What each kind of upload carries of /w beyond the plain members: the
	// exact one its own directory as ./ and the absolute symlink, the data
	// filter's neither. Catches renameFor ignoring exact either way.
	for _, exact := range []bool{false, true} {
		zr, _ := zstd.NewReader(bytes.NewReader(z.Bytes()))
		out, err := io.ReadAll(&relay{tr: tar.NewReader(zr), dir: "/w", exact: exact})
		zr.Close()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for tr := tar.NewReader(bytes.NewReader(out)); ; {
			h, err := tr.Next()
			if err != nil {
				break
			}
			names[h.Name] = true
		}
		if names["./"] != exact || names["abs"] != exact || !names["rel"] {
			t.Errorf("exact %v: the relay of /w holds ./ %v, abs %v, rel %v", exact, names["./"], names["abs"], names["rel"])
		}
	}
}
