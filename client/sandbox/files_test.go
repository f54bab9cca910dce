package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

type entry struct {
	name, link, body string
	typ              byte
}

func tarOf(t testing.TB, es []entry) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return b.Bytes()
}

func extract(t testing.TB, data []byte) (string, error) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	return dir, unpack(tar.NewReader(bytes.NewReader(data)), root, dir, taxonomy.DefaultMaxDownloadBytes)
}

// Catches: DownloadDir writing outside the target directory. The wrong edits
// it names: joining entry names onto the target with filepath.Join and
// os.Create (a "../" entry or an absolute one escapes), or following a
// symlink the archive planted ("link" -> outside, then "link/x").
func TestUnpackConfined(t *testing.T) {
	outside := t.TempDir()
	for name, es := range map[string][]entry{
		"dotdot":   {{name: "../escape", body: "x", typ: tar.TypeReg}},
		"nested":   {{name: "a/../../escape", body: "x", typ: tar.TypeReg}},
		"absolute": {{name: filepath.Join(outside, "escape"), body: "x", typ: tar.TypeReg}},
		"symlink":  {{name: "link", link: outside, typ: tar.TypeSymlink}, {name: "link/escape", body: "x", typ: tar.TypeReg}},
	} {
		dir, err := extract(t, tarOf(t, es))
		if err == nil {
			t.Errorf("%s: extracted without complaint", name)
		}
		for _, p := range []string{filepath.Join(outside, "escape"), filepath.Join(filepath.Dir(dir), "escape")} {
			if _, err := os.Lstat(p); err == nil {
				t.Fatalf("%s: wrote %s, outside the target", name, p)
			}
		}
	}
	dir, err := extract(t, tarOf(t, []entry{{name: "d/", typ: tar.TypeDir}, {name: "d/f", body: "ok", typ: tar.TypeReg}, {name: "d/f", body: "new", typ: tar.TypeReg}}))
	if b, _ := os.ReadFile(filepath.Join(dir, "d", "f")); err != nil || string(b) != "new" {
		t.Fatalf("a plain tree: %q %v", b, err)
	}
}

// An archive need not list a member's directories before it (another
// daemon's tar, or one written by hand, may not): the parents are made.
// Catches the parent test negated (`dir != "."` as `==`), which makes no
// parent for a nested member and refuses a file whose directory has no
// entry of its own.
func TestUnpackMakesParentsAnArchiveDoesNotList(t *testing.T) {
	dir, err := extract(t, tarOf(t, []entry{{name: "a/b/c.txt", body: "deep", typ: tar.TypeReg}, {name: "top", body: "t", typ: tar.TypeReg}}))
	if b, _ := os.ReadFile(filepath.Join(dir, "a", "b", "c.txt")); err != nil || string(b) != "deep" {
		t.Fatalf("nested member without directory entries: %q %v", b, err)
	}
}

// A symlink in the tree arrives as the same symlink. Catches the symlink
// branch's error test negated (every link would fail the download with a
// nil cause).
func TestUnpackKeepsSymlinks(t *testing.T) {
	dir, err := extract(t, tarOf(t, []entry{{name: "f", body: "x", typ: tar.TypeReg}, {name: "l", link: "f", typ: tar.TypeSymlink}}))
	if got, lerr := os.Readlink(filepath.Join(dir, "l")); err != nil || lerr != nil || got != "f" {
		t.Fatalf("symlink: %q %v %v", got, err, lerr)
	}
}

// An archive cut inside a member fails naming that member, not with a bare
// "unexpected EOF" from the next header. Catches the copy error dropped for
// the close's (`err == nil` as `!=` before `err = cerr`): extraction goes on
// to the next header and the member that was cut goes unnamed.
func TestUnpackNamesAMemberCutShort(t *testing.T) {
	whole := tarOf(t, []entry{{name: "big.bin", body: strings.Repeat("x", 4096), typ: tar.TypeReg}})
	_, err := extract(t, whole[:512+1000]) // the header and 1000 of 4096 bytes
	if err == nil || !strings.Contains(err.Error(), "extracting big.bin") || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a member cut short: %v", err)
	}
}

// FuzzUnpack: whatever bytes the VM sends as a tar, extraction stays
// beneath its directory and never panics.
func FuzzUnpack(f *testing.F) {
	f.Add(tarOf(f, []entry{{name: "a/b", body: "hi", typ: tar.TypeReg}}))
	f.Add(tarOf(f, []entry{{name: "../x", body: "hi", typ: tar.TypeReg}}))
	f.Add(tarOf(f, []entry{{name: "l", link: "/", typ: tar.TypeSymlink}, {name: "l/x", body: "hi", typ: tar.TypeReg}}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "in")
		os.Mkdir(dir, 0o755)
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		const budget = 1 << 20
		_ = unpack(tar.NewReader(bytes.NewReader(data)), root, dir, budget)
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 {
			t.Fatalf("wrote beside the target: %v", ents)
		}
		// Whatever the archive declares (a sparse member expands to zeros),
		// the files extracted hold at most the budget.
		var total int64
		_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					total += fi.Size()
				}
			}
			return nil
		})
		if total > budget {
			t.Fatalf("extracted %d bytes past the %d-byte budget", total, budget)
		}
	})
}

// A tree whose data passes the download bound is refused naming
// DEFAULT_MAX_DOWNLOAD_BYTES, with the member being written removed. Wrong
// edits caught: unpack copying members with io.Copy unbounded (the second
// file arrives whole and err is nil), the budget counted per member rather
// than for the whole tree (each 600 KiB member fits a 1 MiB budget alone),
// and the cut member left behind looking whole.
func TestUnpackStopsAtTheDownloadBound(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	member := strings.Repeat("x", 600<<10)
	data := tarOf(t, []entry{{name: "a", body: member, typ: tar.TypeReg}, {name: "b", body: member, typ: tar.TypeReg}})
	err = unpack(tar.NewReader(bytes.NewReader(data)), root, dir, 1<<20)
	if !errors.Is(err, client.ErrOverBound) || client.KindOf(err) != taxonomy.KindProtocol || !strings.Contains(err.Error(), "DEFAULT_MAX_DOWNLOAD_BYTES") {
		t.Fatalf("past the bound: %v, want TooLarge naming DEFAULT_MAX_DOWNLOAD_BYTES", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a")); err != nil || fi.Size() != int64(len(member)) {
		t.Fatalf("the member within the bound: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the member cut at the bound is still there: %v", err)
	}
}

// Zero blocks arrive as bytes and are written as holes: a 64 MiB member of
// zeros takes (almost) no disk here and keeps its length. Wrong edit caught:
// writing members with a plain io.Copy (64 MiB of blocks), or dropping
// Finish (the file ends at its last non-zero byte: length 4096, not 64 MiB).
func TestUnpackWritesZerosAsHoles(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	body := make([]byte, 64<<20)
	copy(body, "head") // one non-zero block, then holes
	data := tarOf(t, []entry{{name: "sparse.img", body: string(body), typ: tar.TypeReg}})
	if err := unpack(tar.NewReader(bytes.NewReader(data)), root, dir, 1<<30); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "sparse.img"))
	if err != nil || fi.Size() != int64(len(body)) {
		t.Fatalf("length %v (%v), want %d", fi, err, len(body))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 > 1<<20 {
		t.Fatalf("%d bytes on disk for 4 bytes of data: zeros were written, not skipped", st.Blocks*512)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "sparse.img"))
	if !bytes.Equal(got, body) {
		t.Fatal("the content read back differs")
	}
}

// ReadFile against a guest that sends a file without end: it stops one
// byte past MAX_READ_FILE_BYTES with an InvalidArg error naming that bound,
// having held no more than it. This is the engine's read op. Wrong edits
// caught: reading without the bound (the whole 256 MiB sent is held), and the refusal as InvalidArg without the bound's name.
func TestReadFileStopsAtItsBound(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, emulator.Options{})
	chunk := bytes.Repeat([]byte("E"), 1<<20)
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/fs/file" {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("{}"))
			return
		}
		for range 256 { // 256 MiB, four times the bound
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer hostile.Close()
	arn := f.emu.AddImage("hostile")
	sb, err := Launch(ctx, f.cp, Options{Image: arn, Wait: fast, Now: f.clock.Now,
		SessionOptions: []client.Option{client.WithHTTPClient(&http.Client{Transport: &toVM{addr: strings.TrimPrefix(hostile.URL, "http://")}})}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx, TeardownOptions{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = sb.ReadFile(ctx, "/big")
	runtime.ReadMemStats(&after)
	if !errors.Is(err, client.ErrOverBound) || client.KindOf(err) != taxonomy.KindInvalidArg || !strings.Contains(err.Error(), "MAX_READ_FILE_BYTES") {
		t.Fatalf("an endless file: %v, want InvalidArg naming MAX_READ_FILE_BYTES", err)
	}
	t.Logf("ReadFile of an endless file allocated %d MiB", (after.TotalAlloc-before.TotalAlloc)>>20)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 5*MaxReadFileBytes/2 {
		t.Fatalf("ReadFile allocated %d bytes against a %d-byte bound", alloc, MaxReadFileBytes)
	}
}

// A file of exactly the bound is whole; one byte more is over. Wrong edits
// caught: `len(b) == limit` treated as over without probing (a file of
// exactly MaxReadFileBytes refused), and the probe byte dropped (over never
// reported, the file silently cut at the bound).
func TestReadAtMostBoundary(t *testing.T) {
	for _, tc := range []struct {
		n    int
		over bool
	}{{0, false}, {99, false}, {100, false}, {101, true}, {5000, true}} {
		b, over, err := readAtMost(bytes.NewReader(bytes.Repeat([]byte("x"), tc.n)), 100)
		if err != nil || over != tc.over || len(b) != min(tc.n, 100) {
			t.Errorf("%d bytes: %d read, over %v, %v; want %d, %v", tc.n, len(b), over, err, min(tc.n, 100), tc.over)
		}
	}
}
