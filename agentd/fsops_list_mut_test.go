package agentd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// cursorOfLen builds a well-formed cursor (names of at most nameMax bytes
// joined by slashes) exactly n bytes long.
func cursorOfLen(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(strings.Repeat("z", min(200, n-b.Len())))
	}
	return b.String()
}

// TestListBoundsAreInclusive: each bound FsList and parseCursor enforce lets
// its last value through and refuses the next one. A cursor need not name an
// entry that exists; the page simply continues after where it would sort.
// Catches, in FsList, `*p.Limit > protocol.DefaultMaxListPage` made `>=`
// (a page of max_list_page refused); in parseCursor `len(c) >= pathMax*4`
// made `>` or `pathMax/4`, `len(n) > nameMax` made `>=`, and
// `strings.IndexByte(c, 0) >= 0` made `> 0` (a cursor starting with NUL let
// through).
func TestListBoundsAreInclusive(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx, cancel := context.WithTimeout(offContract(context.Background()), 30*time.Second)
	defer cancel()
	root := t.TempDir()
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(root, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	maxCursor := cursorOfLen(pathMax*4 - 1)
	if len(maxCursor) != pathMax*4-1 {
		t.Fatalf("cursorOfLen built %d bytes, want %d", len(maxCursor), pathMax*4-1)
	}
	for _, c := range []struct {
		name   string
		params protocol.FsListParams
		status int
	}{
		{"limit max_list_page", protocol.FsListParams{Path: root, Limit: p32(protocol.DefaultMaxListPage)}, 200},
		{"cursor of pathMax*4-1 bytes", protocol.FsListParams{Path: root, Cursor: pstr(maxCursor)}, 200},
		{"cursor of pathMax*4 bytes", protocol.FsListParams{Path: root, Cursor: pstr(maxCursor + "z")}, 400},
		{"cursor name of nameMax bytes", protocol.FsListParams{Path: root, Cursor: pstr("a/" + strings.Repeat("n", nameMax))}, 200},
		{"cursor name of nameMax+1 bytes", protocol.FsListParams{Path: root, Cursor: pstr("a/" + strings.Repeat("n", nameMax+1))}, 400},
		{"cursor starting with NUL", protocol.FsListParams{Path: root, Cursor: pstr("\x00a")}, 400},
	} {
		r, err := d.client.FsListWithResponse(ctx, &c.params, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		if c.status != 200 {
			wantSlug(t, c.name, r.StatusCode(), r.Body, c.status, taxonomy.SlugMalformedRequest)
			continue
		}
		if r.JSON200 == nil {
			t.Errorf("%s: %d %s, want 200", c.name, r.StatusCode(), r.Body)
		}
	}
}

// TestListedSymlinkTargetsAreReadWhole: a listing reads each symlink's
// target with readlinkat, which starts with a 256-byte buffer and grows it
// while the target fills it, since a full buffer may hold a cut target.
// Targets of exactly 256 bytes, just past it, and of the longest Linux
// allows (PATH_MAX-1) must come back whole.
// Catches, in readlinkat, `n < size` made `<=` (a target cut at 256 bytes)
// or negated (a target that fills the buffer is returned cut there),
// `pathMax*4` made `pathMax/4` (a target of 1 KiB or more is read as too
// long, and the entry is listed without one), `size <= pathMax*4` negated
// (no read at all: no entry has a target) and `err != nil` negated (every
// target read as empty).
func TestListedSymlinkTargetsAreReadWhole(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	want := map[string]string{}
	for _, n := range []int{256, 300, pathMax - 1} {
		name := fmt.Sprintf("l%d", n)
		want[name] = strings.Repeat("t", n)
		if err := os.Symlink(want[name], filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := d.client.FsListWithResponse(ctx, &protocol.FsListParams{Path: dir}, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	if r.JSON200 == nil || len(r.JSON200.Entries) != len(want) {
		t.Fatalf("list: %d %.300s, want %d entries", r.StatusCode(), r.Body, len(want))
	}
	for _, e := range r.JSON200.Entries {
		if e.SymlinkTarget == nil {
			t.Errorf("%s: no target", e.Name)
		} else if *e.SymlinkTarget != want[e.Name] {
			t.Errorf("%s: a target of %d bytes, want %d", e.Name, len(*e.SymlinkTarget), len(want[e.Name]))
		}
	}
}
