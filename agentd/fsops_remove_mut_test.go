package agentd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestRemoveRefusalsSayWhatToDo: a non-recursive remove of a non-empty
// directory is answered by FsRemove's own refusal, which tells the caller
// the way out (recursive=true), and an rmdir error that is not "not empty"
// keeps its own meaning. /proc/self/fd is such a path: lstat sees a
// directory, and procfs refuses the rmdir with EPERM, which must not read as
// directory_not_empty (nothing is removed either way).
// Catches, in FsRemove, `err == unix.ENOTEMPTY` made `!=` (ENOTEMPTY falls
// through to fsOpError's generic detail; EPERM reads as not empty) and
// `err == unix.EEXIST` made `!=` (every other rmdir error reads as not empty).
func TestRemoveRefusalsSayWhatToDo(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx, cancel := context.WithTimeout(offContract(context.Background()), 30*time.Second)
	defer cancel()
	root := t.TempDir()
	full := filepath.Join(root, "full")
	if err := os.MkdirAll(filepath.Join(full, "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := d.client.FsRemoveWithResponse(ctx, &protocol.FsRemoveParams{Path: full}, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	wantSlug(t, "remove a non-empty dir", r.StatusCode(), r.Body, 409, taxonomy.SlugDirectoryNotEmpty)
	var eb protocol.ErrorBody
	if err := json.Unmarshal(r.Body, &eb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(eb.Detail, "pass recursive=true") {
		t.Errorf("remove a non-empty dir: detail %q does not point at recursive=true", eb.Detail)
	}

	r, err = d.client.FsRemoveWithResponse(ctx, &protocol.FsRemoveParams{Path: "/proc/self/fd"}, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	wantSlug(t, "remove /proc/self/fd", r.StatusCode(), r.Body, 500, taxonomy.SlugFsFailed)
}

// TestRecursiveRemoveReadsPastOneBatch: removeTree reads a directory's names
// 1024 at a time, so a directory of more than 1024 entries needs a second
// read. Every entry must go and be counted.
// Catches, in removeTree, `rerr != nil || len(names) == 0` with either half
// negated (the walk stops after the first batch, the final rmdir meets a
// directory still holding entries, and the remove fails).
func TestRecursiveRemoveReadsPastOneBatch(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "many")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const files = 1100
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := d.client.FsRemoveWithResponse(ctx, &protocol.FsRemoveParams{Path: dir, Recursive: pbool(true)}, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	if r.JSON200 == nil || r.JSON200.Removed != files+1 {
		t.Fatalf("remove -r of %d files: %d %s, want %d removed", files, r.StatusCode(), r.Body, files+1)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("the directory is still there: %v", err)
	}
}

// TestRecursiveRemoveNeverClaimsATreeItLeft: a recursive remove that races
// a writer still creating files in the tree may fail (the last rmdir finds
// the directory not empty), but it must never answer 200 while the
// directory is still there. Whether the race is met depends on the
// scheduling, so the test repeats it until one remove fails that way; it
// passes, saying so, if no attempt meets it. (On ext4, whose readdir goes in
// hash order, and on tmpfs the first attempt met it in every trial.)
// Catches, in removeTree, the final rmdir's `err != unix.ENOENT` made `==`
// (an rmdir refused as not empty is ignored and the remove counted as done).
func TestRecursiveRemoveNeverClaimsATreeItLeft(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx, cancel := context.WithTimeout(offContract(context.Background()), 60*time.Second)
	defer cancel()
	for attempt := range 20 {
		dir := filepath.Join(t.TempDir(), "busy")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 500 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if os.WriteFile(filepath.Join(dir, fmt.Sprintf("w%d", i)), nil, 0o644) != nil {
					return // the directory is gone
				}
			}
		}()
		r, err := d.client.FsRemoveWithResponse(ctx, &protocol.FsRemoveParams{Path: dir, Recursive: pbool(true)}, auth(testToken))
		close(stop)
		<-stopped
		if err != nil {
			t.Fatal(err)
		}
		_, lerr := os.Lstat(dir)
		switch {
		case r.StatusCode() == 200 && lerr == nil:
			t.Fatalf("attempt %d: remove -r answered %s, but the directory is still there", attempt, r.Body)
		case r.StatusCode() == 200:
			continue // the walk outran the writer; try again
		}
		if lerr != nil {
			t.Fatalf("attempt %d: remove -r failed (%d %s), yet the directory is gone: %v", attempt, r.StatusCode(), r.Body, lerr)
		}
		t.Logf("attempt %d met the race: %d %s", attempt, r.StatusCode(), r.Body)
		return
	}
	t.Log("no attempt met the race; nothing was shown")
}
