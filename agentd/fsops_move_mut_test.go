package agentd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestMoveNamesWhichEndIsMissing: both missing-path refusals of a move are
// the same 404 path_not_found, so only the detail tells a caller whether to
// fix from or to. A missing from must say "nothing is at from", and a
// present from with no parent for to must blame the parent of to.
// Catches, in FsMove, `unix.Lstat(p.From, &st) != nil` made `== nil` (the
// two details swapped).
func TestMoveNamesWhichEndIsMissing(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, from, to, detail string }{
		{"missing from", filepath.Join(root, "absent"), filepath.Join(root, "dest"), "nothing is at from"},
		{"missing parent of to", file, filepath.Join(root, "no-parent", "dest"), "the parent of to does not exist"},
	}
	for _, c := range cases {
		for _, replace := range []*bool{nil, pbool(true)} {
			r, err := d.client.FsMoveWithResponse(ctx, &protocol.FsMoveParams{From: c.from, To: c.to, Replace: replace}, auth(testToken))
			if err != nil {
				t.Fatal(err)
			}
			what := c.name
			if replace != nil {
				what += " (replace)"
			}
			wantSlug(t, what, r.StatusCode(), r.Body, 404, taxonomy.SlugPathNotFound)
			var eb protocol.ErrorBody
			if err := json.Unmarshal(r.Body, &eb); err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(eb.Detail, ": "+c.detail) {
				t.Errorf("%s: detail %q, want it to end %q", what, eb.Detail, c.detail)
			}
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "x" {
		t.Fatalf("a refused move disturbed from: %q %v", b, err)
	}
}

// TestMoveIntoItselfIsLexical pins moveIntoItself, which decides whether an
// EINVAL from renameat2 means "to is inside from" or "this filesystem lacks
// RENAME_NOREPLACE, check and rename instead". On a filesystem with the flag
// only the first EINVAL occurs, so a wrong answer shows only on one without
// it (9p, NFS, a FUSE server without rename2), which a test cannot mount:
// there, answering "inside" for every pair refuses every move without
// replace. Hence a direct test.
// Catches, in moveIntoItself, `t == f` made `t != f` (every other pair
// counts as inside, and from itself does not).
func TestMoveIntoItselfIsLexical(t *testing.T) {
	for _, c := range []struct {
		from, to string
		want     bool
	}{
		{"/a/b", "/a/b", true},
		{"/a/b/", "/a/b", true},
		{"/a/b", "/a/b/c", true},
		{"/a/b", "/a/b/c/d/", true},
		{"/", "/x", true},
		{"/a/b", "/a/bc", false},
		{"/a/b", "/a", false},
		{"/a/b", "/x/y", false},
		{"/a/b/c", "/a/b", false},
	} {
		if got := moveIntoItself(c.from, c.to); got != c.want {
			t.Errorf("moveIntoItself(%q, %q) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}
