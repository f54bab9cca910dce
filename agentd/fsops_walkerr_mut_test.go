package agentd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestListFailsWhenASubdirectoryCannotBeOpened: a recursive listing that
// cannot open a directory it should descend into fails, naming it, rather
// than answering 200 with that subtree silently left out. As root no
// permission bits refuse the open, so the test runs out of descriptors
// instead: the walk holds one per level, and with the soft RLIMIT_NOFILE
// lowered to a few above what the process holds, a chain of directories
// deeper than that fails at openat with EMFILE.
// Catches, in lister.walk, `err == unix.ELOOP` or `err == unix.ENOENT` made
// `!=` (any other openat error skips the subtree), and in listDir
// `err != nil && err != errPageFull` with its first half negated (every
// walk error dropped).
func TestListFailsWhenASubdirectoryCannotBeOpened(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx, cancel := context.WithTimeout(offContract(context.Background()), 30*time.Second)
	defer cancel()
	root := t.TempDir()
	const levels = 64
	deepest := filepath.Join(root, strings.Repeat("d/", levels))
	if err := os.MkdirAll(deepest, 0o755); err != nil {
		t.Fatal(err)
	}
	params := &protocol.FsListParams{Path: root, Depth: p32(levels + 1)}
	// The same listing with descriptors to spare lists every level, and
	// leaves a kept-alive connection for the request below.
	r, err := d.client.FsListWithResponse(ctx, params, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	if r.JSON200 == nil || len(r.JSON200.Entries) != levels {
		t.Fatalf("list with descriptors to spare: %d %.300s, want %d entries", r.StatusCode(), r.Body, levels)
	}

	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	// New descriptors take the lowest free numbers, so a limit of the count
	// held plus a margin leaves about that margin free.
	const margin = 16
	low := old
	low.Cur = uint64(len(fds) + margin)
	if low.Cur >= old.Cur {
		t.Skipf("soft RLIMIT_NOFILE %d is already too low to lower", old.Cur)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	r, err = d.client.FsListWithResponse(ctx, params, auth(testToken))
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode() != 500 {
		t.Fatalf("list deeper than the descriptors left: %d %.300s, want 500", r.StatusCode(), r.Body)
	}
	wantSlug(t, "list deeper than the descriptors left", r.StatusCode(), r.Body, 500, taxonomy.SlugFsFailed)
	if !strings.Contains(string(r.Body), "too many open files") {
		t.Errorf("the refusal does not name EMFILE: %s", r.Body)
	}
}
