package agentd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

func p32(v uint32) *uint32 { return &v }
func pbool(v bool) *bool   { return &v }
func pstr(v string) *string {
	return &v
}

// wantSlug checks an fs operation's refusal: its status and ErrorBody slug.
func wantSlug(t *testing.T, what string, status int, body []byte, wantStatus int, slug string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("%s: status %d (%s), want %d", what, status, body, wantStatus)
	}
	var eb protocol.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error != slug {
		t.Fatalf("%s: body %s, want slug %s", what, body, slug)
	}
}

// TestFsStat describes a file, a directory and a symlink (not followed).
// Wrong edits caught: stat following the final symlink (type would read file,
// no target); mode printed with the type bits or in decimal; a missing path
// answered 500 or a missing ?path= answered 404.
func TestFsStat(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(file, []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(file, 0o4640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "l")
	if err := os.Symlink("f.txt", link); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stat := func(p string) *protocol.FsStatReply {
		r, err := d.client.FsStatWithResponse(ctx, &protocol.FsStatParams{Path: p}, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := stat(file)
	if r.JSON200 == nil {
		t.Fatalf("stat file: %d %s", r.StatusCode(), r.Body)
	}
	fi := r.JSON200
	if fi.Type != protocol.FileTypeFile || fi.Size != 5 || fi.Mode != "4640" || fi.Name != "f.txt" || fi.SymlinkTarget != nil {
		t.Errorf("stat file: %+v", fi)
	}
	if fi.UID != uint32(os.Getuid()) || fi.Mtime.IsZero() {
		t.Errorf("stat file owner/mtime: %+v", fi)
	}
	r = stat(link)
	if r.JSON200 == nil || r.JSON200.Type != protocol.FileTypeSymlink || r.JSON200.SymlinkTarget == nil || *r.JSON200.SymlinkTarget != "f.txt" {
		t.Errorf("stat symlink: %d %s", r.StatusCode(), r.Body)
	}
	r = stat(dir)
	if r.JSON200 == nil || r.JSON200.Type != protocol.FileTypeDirectory {
		t.Errorf("stat dir: %d %s", r.StatusCode(), r.Body)
	}
	r = stat(filepath.Join(dir, "missing"))
	wantSlug(t, "stat missing", r.StatusCode(), r.Body, 404, taxonomy.SlugPathNotFound)
	r = stat(filepath.Join(file, "under-a-file"))
	wantSlug(t, "stat under a file", r.StatusCode(), r.Body, 400, taxonomy.SlugNotADirectory)
	r, _ = d.client.FsStatWithResponse(offContract(ctx), &protocol.FsStatParams{Path: "/tmp/a\x00b"}, auth(testToken))
	wantSlug(t, "stat NUL", r.StatusCode(), r.Body, 400, taxonomy.SlugMalformedRequest)

	// No ?path= at all: the generated wrapper's refusal is JSON too, and 400.
	status, body := d.rawGet(t, "/v1/fs/stat")
	wantSlug(t, "stat without path", status, body, 400, taxonomy.SlugMalformedRequest)
	status, body = d.rawGet(t, "/v1/fs/list?path=/tmp&depth=x")
	wantSlug(t, "list depth not an integer", status, body, 400, taxonomy.SlugMalformedRequest)
}

// rawGet sends an authorized GET of pathQuery and returns status and body.
func (d *daemon) rawGet(t *testing.T, pathQuery string) (int, []byte) {
	t.Helper()
	return d.rawDo(t, http.MethodGet, pathQuery)
}

// rawDo sends an authorized, bodiless request off contract (the tests using
// it send malformed requests on purpose).
func (d *daemon) rawDo(t *testing.T, method, pathQuery string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(offContract(context.Background()), method, d.base+pathQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// listAll follows next_cursor to the end and returns every entry's path
// relative to root.
func (d *daemon) listAll(t *testing.T, root string, depth, limit uint32) []string {
	t.Helper()
	var out []string
	params := protocol.FsListParams{Path: root, Depth: &depth, Limit: &limit}
	for page := 0; page < 100000; page++ {
		r, err := d.client.FsListWithResponse(context.Background(), &params, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		if r.JSON200 == nil {
			t.Fatalf("list: %d %s", r.StatusCode(), r.Body)
		}
		if len(r.JSON200.Entries) > int(limit) {
			t.Fatalf("a page of %d entries with limit %d", len(r.JSON200.Entries), limit)
		}
		for _, e := range r.JSON200.Entries {
			rel, _ := filepath.Rel(root, e.Path)
			out = append(out, rel)
		}
		if r.JSON200.NextCursor == nil {
			return out
		}
		if len(r.JSON200.Entries) == 0 {
			t.Fatal("an empty page with a next cursor")
		}
		params.Cursor = r.JSON200.NextCursor
	}
	t.Fatal("listing never ended")
	return nil
}

// TestFsListPagesAndDepth lists a tree one level and recursively, in pages
// of every size from 1 to past the whole, and compares each with the order a
// sorted walk gives. Wrong edits caught: a page boundary repeating or
// skipping an entry (resuming at the cursor instead of after it, or losing
// the cursor's subtree); depth off by one; a symlinked directory followed;
// next_cursor set on the last page.
func TestFsListPagesAndDepth(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	root := t.TempDir()
	for _, p := range []string{"a/x/deep/1", "a/y", "a.b/z", "b", "c/d/e/f"} {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "link-to-a")); err != nil {
		t.Fatal(err)
	}
	want := map[uint32][]string{
		1: {"a", "a.b", "b", "c", "link-to-a"},
		2: {"a", "a/x", "a/y", "a.b", "a.b/z", "b", "c", "c/d", "link-to-a"},
		9: {"a", "a/x", "a/x/deep", "a/x/deep/1", "a/y", "a.b", "a.b/z", "b", "c", "c/d", "c/d/e", "c/d/e/f", "link-to-a"},
	}
	for depth, w := range want {
		for limit := uint32(1); limit <= uint32(len(w))+1; limit++ {
			got := d.listAll(t, root, depth, limit)
			if !slices.Equal(got, w) {
				t.Fatalf("depth %d limit %d: %v, want %v", depth, limit, got, w)
			}
		}
	}

	// A cursor whose entry has since gone still continues after it.
	r, err := d.client.FsListWithResponse(context.Background(), &protocol.FsListParams{
		Path: root, Depth: p32(9), Cursor: pstr("a/x/gone")}, auth(testToken))
	if err != nil || r.JSON200 == nil {
		t.Fatalf("list after a vanished cursor: %v %s", err, r.Body)
	}
	var got []string
	for _, e := range r.JSON200.Entries {
		rel, _ := filepath.Rel(root, e.Path)
		got = append(got, rel)
	}
	if !slices.Equal(got, want[9][4:]) {
		t.Errorf("after vanished cursor a/x/gone: %v, want %v", got, want[9][4:])
	}

	ctx := offContract(context.Background())
	for _, c := range []struct {
		name   string
		params protocol.FsListParams
		status int
		slug   string
	}{
		{"missing dir", protocol.FsListParams{Path: filepath.Join(root, "nope")}, 404, taxonomy.SlugPathNotFound},
		{"a file", protocol.FsListParams{Path: filepath.Join(root, "b")}, 400, taxonomy.SlugNotADirectory},
		{"limit 0", protocol.FsListParams{Path: root, Limit: p32(0)}, 400, taxonomy.SlugMalformedRequest},
		{"limit over max", protocol.FsListParams{Path: root, Limit: p32(protocol.DefaultMaxListPage + 1)}, 400, taxonomy.SlugMalformedRequest},
		{"depth 0", protocol.FsListParams{Path: root, Depth: p32(0)}, 400, taxonomy.SlugMalformedRequest},
		{"cursor climbing out", protocol.FsListParams{Path: root, Cursor: pstr("../etc")}, 400, taxonomy.SlugMalformedRequest},
		{"absolute cursor", protocol.FsListParams{Path: root, Cursor: pstr("/etc")}, 400, taxonomy.SlugMalformedRequest},
	} {
		r, err := d.client.FsListWithResponse(ctx, &c.params, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		wantSlug(t, c.name, r.StatusCode(), r.Body, c.status, c.slug)
	}
}

// TestFsMkdirMoveRemove drives the three changing operations through their
// successes and refusals. Wrong edits caught: mkdir without parents; mkdir
// over a file answering 200; move replacing an existing destination without
// replace (data loss); remove deleting a non-empty directory without
// recursive; recursive remove following a symlink out of the tree; remove of
// / accepted.
func TestFsMkdirMoveRemove(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx := context.Background()
	root := t.TempDir()

	deep := filepath.Join(root, "p", "q", "r")
	m, err := d.client.FsMkdirWithResponse(ctx, &protocol.FsMkdirParams{Path: deep, Mode: pstr("0700")}, auth(testToken))
	if err != nil || m.JSON200 == nil || !m.JSON200.Created {
		t.Fatalf("mkdir -p: %v %d %s", err, m.StatusCode(), m.Body)
	}
	if st, err := os.Stat(deep); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("mkdir -p left %v %v", st, err)
	}
	m, _ = d.client.FsMkdirWithResponse(ctx, &protocol.FsMkdirParams{Path: deep}, auth(testToken))
	if m.JSON200 == nil || m.JSON200.Created {
		t.Fatalf("mkdir again: %d %s, want 200 created false", m.StatusCode(), m.Body)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, _ = d.client.FsMkdirWithResponse(ctx, &protocol.FsMkdirParams{Path: file}, auth(testToken))
	wantSlug(t, "mkdir over a file", m.StatusCode(), m.Body, 409, taxonomy.SlugPathExists)
	m, _ = d.client.FsMkdirWithResponse(ctx, &protocol.FsMkdirParams{Path: filepath.Join(file, "sub")}, auth(testToken))
	wantSlug(t, "mkdir under a file", m.StatusCode(), m.Body, 400, taxonomy.SlugNotADirectory)
	m, _ = d.client.FsMkdirWithResponse(ctx, &protocol.FsMkdirParams{Path: deep, Mode: pstr("9")}, auth(testToken))
	wantSlug(t, "mkdir bad mode", m.StatusCode(), m.Body, 400, taxonomy.SlugMalformedRequest)

	// move: no replace by default.
	other := filepath.Join(root, "other")
	if err := os.WriteFile(other, []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	mv := func(from, to string, replace *bool) *protocol.FsMoveReply {
		r, err := d.client.FsMoveWithResponse(ctx, &protocol.FsMoveParams{From: from, To: to, Replace: replace}, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := mv(other, file, nil)
	wantSlug(t, "move onto a file", r.StatusCode(), r.Body, 409, taxonomy.SlugPathExists)
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatalf("a refused move changed the destination: %q", b)
	}
	if r := mv(other, file, pbool(true)); r.JSON200 == nil {
		t.Fatalf("move with replace: %d %s", r.StatusCode(), r.Body)
	}
	if b, _ := os.ReadFile(file); string(b) != "other" {
		t.Fatalf("move with replace left %q", b)
	}
	r = mv(other, file, nil)
	wantSlug(t, "move of a missing source", r.StatusCode(), r.Body, 404, taxonomy.SlugPathNotFound)
	r = mv(file, filepath.Join(root, "no-parent", "x"), nil)
	wantSlug(t, "move into a missing parent", r.StatusCode(), r.Body, 404, taxonomy.SlugPathNotFound)
	r = mv(filepath.Join(root, "p"), filepath.Join(root, "p", "q", "inside"), nil)
	wantSlug(t, "move into itself", r.StatusCode(), r.Body, 400, taxonomy.SlugMalformedRequest)
	r = mv(filepath.Join(root, "p", "q"), filepath.Join(root, "p"), pbool(true))
	wantSlug(t, "replace a non-empty directory", r.StatusCode(), r.Body, 409, taxonomy.SlugDirectoryNotEmpty)
	r = mv("", file, nil)
	wantSlug(t, "move without from", r.StatusCode(), r.Body, 400, taxonomy.SlugMalformedRequest)

	// remove.
	outside := t.TempDir()
	keep := filepath.Join(outside, "precious")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(deep, "escape")); err != nil {
		t.Fatal(err)
	}
	rm := func(p string, recursive *bool) *protocol.FsRemoveReply {
		r, err := d.client.FsRemoveWithResponse(ctx, &protocol.FsRemoveParams{Path: p, Recursive: recursive}, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	x := rm(filepath.Join(root, "p"), nil)
	wantSlug(t, "remove a non-empty dir", x.StatusCode(), x.Body, 409, taxonomy.SlugDirectoryNotEmpty)
	if _, err := os.Stat(deep); err != nil {
		t.Fatalf("a refused remove removed: %v", err)
	}
	x = rm(filepath.Join(root, "p"), pbool(true))
	if x.JSON200 == nil || x.JSON200.Removed != 4 { // p, q, r, escape
		t.Fatalf("remove -r: %d %s, want 4 removed", x.StatusCode(), x.Body)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("recursive remove followed a symlink out of the tree: %v", err)
	}
	x = rm(filepath.Join(root, "p"), pbool(true))
	wantSlug(t, "remove again", x.StatusCode(), x.Body, 404, taxonomy.SlugPathNotFound)
	x = rm(file, nil)
	if x.JSON200 == nil || x.JSON200.Removed != 1 {
		t.Fatalf("remove a file: %d %s", x.StatusCode(), x.Body)
	}
	x = rm("/", pbool(true))
	wantSlug(t, "remove /", x.StatusCode(), x.Body, 400, taxonomy.SlugMalformedRequest)
	x = rm("//.", pbool(true))
	wantSlug(t, "remove / spelled //.", x.StatusCode(), x.Body, 400, taxonomy.SlugMalformedRequest)
}

// TestFsOpsNeedTheToken: the new routes sit behind the same gate. Wrong edit
// caught: a new route registered outside the bearer gate.
func TestFsOpsNeedTheToken(t *testing.T) {
	d := startDaemon(t, nil)
	for _, pq := range []string{"/v1/fs/stat?path=/", "/v1/fs/list?path=/"} {
		resp, err := http.Get(d.base + pq)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s before bootstrap: %d, want 503", pq, resp.StatusCode)
		}
	}
	d.bootstrap(nil)
	for _, pq := range []string{"/v1/fs/stat?path=/", "/v1/fs/list?path=/"} {
		resp, err := http.Get(d.base + pq)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", pq, resp.StatusCode)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"a", "a/b", "", "/a", "a//b", "../x", "a/./b", "a\x00b", strings.Repeat("n", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parts, ok := parseCursor(s)
		if !ok {
			return
		}
		if strings.Join(parts, "/") != s {
			t.Fatalf("cursor %q parsed to %q, which does not join back", s, parts)
		}
		for _, p := range parts {
			if p == "" || p == "." || p == ".." || strings.ContainsAny(p, "/\x00") {
				t.Fatalf("cursor %q accepted a name %q no walk hands out", s, p)
			}
		}
		// The order is total and antisymmetric on accepted cursors.
		if c := compareWalk(parts, parts); c != 0 {
			t.Fatalf("compareWalk(x, x) = %d", c)
		}
		other := append(slices.Clone(parts), "child")
		if compareWalk(parts, other) >= 0 || compareWalk(other, parts) <= 0 || !isPrefix(parts, other) {
			t.Fatalf("a directory must sort before its children: %q", s)
		}
	})
}
