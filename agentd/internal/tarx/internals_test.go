package tarx

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/tartest"
)

// These tests reach into the extractor (its descriptor cache, its resolution
// budget) where the behaviour under test is a resource bound that the tree
// written to disk does not show.

// extractWith runs one extraction the way Extract does, but on an extractor
// the test holds: prime may adjust it after the root is open and before the
// first member, and the Openat2 seam sees it on every confined open.
func extractWith(t *testing.T, root string, archive []byte, prime func(x *extractor), onOpen func(x *extractor)) error {
	t.Helper()
	var x *extractor
	opt := Options{Log: quiet, Openat2: func(dirfd int, path string, how *unix.OpenHow) (int, error) {
		if onOpen != nil {
			onOpen(x)
		}
		return unix.Openat2(dirfd, path, how)
	}}
	x = &extractor{opt: opt, dirs: map[string]int{}}
	defer x.close()
	if err := x.openRoot(root); err != nil {
		t.Fatal(err)
	}
	if prime != nil {
		prime(x)
	}
	_, err := x.run(bytes.NewReader(archive))
	return err
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(es)
}

// The directory-descriptor cache holds at most maxCachedDirs descriptors and
// is allowed to fill to exactly that before it is trimmed. Each of 400 files
// sits in its own directory a/dNNN, so every member adds one descriptor (a/
// is cached already) until the cache is full; the next member trims it.
// Catches, in makeDirs' `len(x.dirs)+len(parts)-start > maxCachedDirs`:
//   - `>` made `>=` (the cache tops out one short, at 255),
//   - `>` made `<=` (trims before almost every member: it never passes 3),
//   - `+len(parts)` made `-len(parts)` (trims late, at 260: over the bound),
//   - `-start` made `+start` (counts the cached ancestors as new and trims
//     at 254),
//   - and dropping the trim altogether (402: the root, a/ and one per directory,
//     which an archive of many directories turns into EMFILE for the whole
//     daemon).
//
// The process's own descriptor count is checked too, so the bound is the
// one the kernel sees and not only the map's length.
func TestDirectoryCacheFillsToItsBoundThenTrims(t *testing.T) {
	const dirs = 400
	var ms []tartest.Member
	for i := range dirs {
		ms = append(ms, tartest.File(fmt.Sprintf("a/d%03d/f", i), "x"))
	}
	archive := tartest.Build(ms...)
	_, root, _ := layout(t)
	before := openFDs(t)
	most, mostFDs := 0, 0
	err := extractWith(t, root, archive, nil, func(x *extractor) {
		most = max(most, len(x.dirs))
		mostFDs = max(mostFDs, openFDs(t))
	})
	if err != nil {
		t.Fatal(err)
	}
	if most != maxCachedDirs {
		t.Fatalf("the descriptor cache peaked at %d entries, want exactly maxCachedDirs (%d)", most, maxCachedDirs)
	}
	// The cache, plus the file being written and slack for the runtime.
	if limit := before + maxCachedDirs + 4; mostFDs > limit {
		t.Fatalf("open descriptors peaked at %d during extraction, want at most %d (%d before it)", mostFDs, limit, before)
	}
	for _, i := range []int{0, maxCachedDirs - 1, maxCachedDirs, dirs - 1} {
		if got, err := os.ReadFile(filepath.Join(root, "a", fmt.Sprintf("d%03d", i), "f")); err != nil || string(got) != "x" {
			t.Fatalf("a/d%03d/f = %q, %v", i, got, err)
		}
	}
}

// The resolution budget allows exactly maxWalkSteps components across an
// archive. The extractor is primed as if earlier members had spent all but
// three of them (spending them for real takes sixteen million steps); the
// target m/m/m needs exactly three, so it lands, and with one step fewer
// left it is refused. Catches, in resolveTarget's
// `x.walkSteps++; x.walkSteps > maxWalkSteps`:
//   - `>` made `>=` (the last allowed step is refused),
//   - `++` made `--` (the count runs down, so the budget never ends and an
//     archive of links re-judged over and over costs the square of its size).
func TestResolutionBudgetEndsAtExactlyMaxWalkSteps(t *testing.T) {
	archive := tartest.Build(tartest.Symlink("l", "m/m/m"))
	_, root, _ := layout(t)
	if err := extractWith(t, root, archive, func(x *extractor) { x.walkSteps = maxWalkSteps - 3 }, nil); err != nil {
		t.Fatalf("a target of three components with three steps left: %v", err)
	}
	if got, err := os.Readlink(filepath.Join(root, "l")); err != nil || got != "m/m/m" {
		t.Fatalf("l -> %q, %v", got, err)
	}
	_, root, _ = layout(t)
	err := extractWith(t, root, archive, func(x *extractor) { x.walkSteps = maxWalkSteps - 2 }, nil)
	if statusOf(err) != 400 || !strings.Contains(err.Error(), "needs more resolution") || !strings.Contains(err.Error(), "l") {
		t.Fatalf("a target of three components with two steps left: got %v, want a 400 naming the budget", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "l")); !os.IsNotExist(err) {
		t.Fatalf("the refused link was written: %v", err)
	}
}

// Directory modes are replayed deepest first. Root (how agentd runs) may
// look up a name under a directory it cannot search, so the order only
// shows without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: the extraction
// runs on a thread locked to its goroutine with those two dropped, as a
// daemon running as an ordinary user would. p is 0400 (no search) and p/c
// is 0700: applied parent first, p/c can no longer be opened and keeps its
// creation mode. Catches: the deepest-first sort reversed (`>` made `<=` in
// applyDirModes' less).
func TestDirectoryModesApplyDeepestFirst(t *testing.T) {
	archive := tartest.Build(
		tartest.Member{Name: "p/", Type: '5', Mode: 0o400},
		tartest.Member{Name: "p/c/", Type: '5', Mode: 0o700},
	)
	_, root, _ := layout(t)
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine's exit ends the thread, so no other
		// goroutine runs with the reduced capabilities (and the runtime
		// makes new threads from a template thread, not from a locked one).
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- fmt.Errorf("capget: %w", err)
			return
		}
		data[0].Effective &^= 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- fmt.Errorf("capset: %w", err)
			return
		}
		x := &extractor{opt: Options{Log: quiet, Openat2: unix.Openat2}, dirs: map[string]int{}}
		defer x.close()
		if err := x.openRoot(root); err != nil {
			done <- err
			return
		}
		_, err := x.run(bytes.NewReader(archive))
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{"p/c", 0o700}, {"p", 0o400}} {
		fi, err := os.Lstat(filepath.Join(root, c.path))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != c.mode {
			t.Fatalf("%s has mode %o, want %o", c.path, got, c.mode)
		}
	}
	// t.TempDir's cleanup runs with full capabilities, but give p back its
	// search bit anyway so a non-root run can remove it.
	_ = os.Chmod(filepath.Join(root, "p"), 0o700)
}
