package agentd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// A remove acts on the entry the kernel resolves the path to, never on a
// lexically cleaned one. With x/link pointing at other/sub, x/link/.. is
// other (the kernel follows the link, then goes up), while cleaning the
// text gives x: the recursive remove used to delete x, the directory
// holding the link, after answering as if it removed what was asked. A
// path ending in . or .. is now refused, as rm refuses it, and a path
// through a link and up (x/link/../y) removes other/y, never x/y.
// Catches the tree walk starting from filepath.Clean(path) again.
func TestRemoveFollowsThePathTheKernelResolves(t *testing.T) {
	d := bootedDaemon(t, nil)
	ctx, cancel := context.WithTimeout(offContract(context.Background()), 30*time.Second)
	defer cancel()
	root := t.TempDir()
	x, other := filepath.Join(root, "x"), filepath.Join(root, "other")
	for _, dir := range []string{filepath.Join(x, "y", "keep"), filepath.Join(other, "sub"), filepath.Join(other, "y", "gone")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(other, "sub"), filepath.Join(x, "link")); err != nil {
		t.Fatal(err)
	}
	yes := true
	remove := func(path string, recursive bool) (int, []byte) {
		t.Helper()
		p := &protocol.FsRemoveParams{Path: path}
		if recursive {
			p.Recursive = &yes
		}
		r, err := d.client.FsRemoveWithResponse(ctx, p, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		return r.StatusCode(), r.Body
	}

	for _, c := range []struct {
		path      string
		recursive bool
	}{
		{x + "/link/..", true},
		{x + "/link/../", true},
		{x + "/link/..", false},
		{x + "/.", true},
		{x + "/y/.", false},
	} {
		status, body := remove(c.path, c.recursive)
		wantSlug(t, "remove "+c.path, status, body, 400, taxonomy.SlugMalformedRequest)
	}
	for _, kept := range []string{x, filepath.Join(x, "link"), filepath.Join(x, "y", "keep"), filepath.Join(other, "sub")} {
		if _, err := os.Lstat(kept); err != nil {
			t.Fatalf("a refused remove took %s: %v", kept, err)
		}
	}

	status, body := remove(x+"/link/../y", true)
	if status != 200 {
		t.Fatalf("remove x/link/../y: %d %s", status, body)
	}
	if _, err := os.Lstat(filepath.Join(other, "y")); !os.IsNotExist(err) {
		t.Fatalf("other/y, which x/link/../y names, is still there: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(x, "y", "keep")); err != nil {
		t.Fatalf("x/y, the lexical reading of x/link/../y, was removed: %v", err)
	}
}

// splitParent reads a remove's path from the query as the kernel would
// walk it: the base is the last component (no slash), and the parent,
// joined back with it, gives the path again up to trailing slashes, with
// no component cleaned away. Catches a split that cleans (x/link/.. read
// as x) or keeps a slash in the base.
func FuzzSplitParent(f *testing.F) {
	for _, s := range []string{"x", "/x", "x/y", "x/link/..", "x/link/../y", "x/y/", "x//y//", "//x", "/a/./b", ".", "..", "a/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		trimmed := strings.TrimRight(p, "/")
		if trimmed == "" {
			return // "/" and "" never reach the split
		}
		dir, base := splitParent(p)
		if strings.Contains(base, "/") || base == "" {
			t.Fatalf("splitParent(%q) = %q, %q: the base must be one component", p, dir, base)
		}
		if !strings.Contains(trimmed, "/") {
			if dir != "." || base != trimmed {
				t.Fatalf("splitParent(%q) = %q, %q, want \".\", %q", p, dir, base, trimmed)
			}
			return
		}
		cut := len(trimmed) - len(base) - 1
		if cut < 0 || trimmed[cut] != '/' || trimmed[cut+1:] != base {
			t.Fatalf("splitParent(%q) = %q, %q: the base is not the last component", p, dir, base)
		}
		if want := trimmed[:cut]; dir != want && !(want == "" && dir == "/") {
			t.Fatalf("splitParent(%q) = %q, %q: the parent is not the path before the base, %q", p, dir, base, want)
		}
	})
}
