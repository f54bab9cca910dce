package client_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestAgentdFsOps drives Stat, List, Mkdir, Move and Remove against a real
// agentd process. Wrong edits caught: List stopping after the first page (or
// looping on the last one); a missing path not reading as fs.ErrNotExist;
// Move sending replace when the caller did not ask (the refused move would
// then destroy the destination); a refusal losing its slug's wire kind.
func TestAgentdFsOps(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, "tok")
	s := session(t, d.base, "tok")
	ctx := testCtx(t)
	root := t.TempDir()

	created, err := s.Mkdir(ctx, filepath.Join(root, "a", "b"), 0)
	if err != nil || !created {
		t.Fatalf("Mkdir: %v %v", created, err)
	}
	for i := range 7 {
		if err := os.WriteFile(filepath.Join(root, "a", "b", string(rune('0'+i))), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	err = s.List(ctx, root, client.ListOptions{Depth: 3, Limit: 2}, func(e protocol.FileInfo) error {
		rel, _ := filepath.Rel(root, e.Path)
		got = append(got, rel)
		return nil
	})
	want := []string{"a", "a/b", "a/b/0", "a/b/1", "a/b/2", "a/b/3", "a/b/4", "a/b/5", "a/b/6"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("List: %v %v, want %v", got, err, want)
	}
	fi, err := s.Stat(ctx, filepath.Join(root, "a", "b", "3"))
	if err != nil || fi.Size != 1 || fi.Type != protocol.FileTypeFile {
		t.Fatalf("Stat: %+v %v", fi, err)
	}
	if _, err := s.Stat(ctx, filepath.Join(root, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat of a missing path: %v, want fs.ErrNotExist", err)
	}
	err = s.Move(ctx, filepath.Join(root, "a", "b", "0"), filepath.Join(root, "a", "b", "1"), false)
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("Move onto an existing file: %v, want a client.Error", err)
	}
	if w, _ := ce.WireKind(); w != taxonomy.WireConflict {
		t.Fatalf("Move onto an existing file: %v, want a Conflict", err)
	}
	if err := s.Move(ctx, filepath.Join(root, "a", "b", "0"), filepath.Join(root, "a", "b", "1"), true); err != nil {
		t.Fatalf("Move with replace: %v", err)
	}
	if _, err := s.Remove(ctx, filepath.Join(root, "a"), false); err == nil {
		t.Fatal("Remove of a non-empty directory without recursive succeeded")
	}
	n, err := s.Remove(ctx, filepath.Join(root, "a"), true)
	if err != nil || n != 8 { // a, b and six files
		t.Fatalf("Remove recursive: %d %v, want 8", n, err)
	}
}

// A missing path's hint names the path (issue 51.7: Stat, and so the MCP
// server's sandbox_read_file and the packages' reads, said `"" does not
// exist in the VM`). Each fs call a missing path can reach is tried against
// a real agentd. Wrong edit caught: a file call built without its path
// (call.path left empty), which the hint then quotes as "".
func TestMissingPathHintNamesThePath(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, "tok")
	s := session(t, d.base, "tok")
	ctx := testCtx(t)
	missing := filepath.Join(t.TempDir(), "nope.txt")
	calls := map[string]func() error{
		"Stat":   func() error { _, err := s.Stat(ctx, missing); return err },
		"List":   func() error { _, err := s.ListPage(ctx, missing, client.ListOptions{}); return err },
		"Remove": func() error { _, err := s.Remove(ctx, missing, false); return err },
		"Move":   func() error { return s.Move(ctx, missing, missing+".2", false) },
		"OpenFile": func() error {
			rc, err := s.OpenFile(ctx, missing, client.LineRange{})
			if err == nil {
				rc.Close()
			}
			return err
		},
		"Watch": func() error {
			w, err := s.Watch(ctx, missing, false)
			if err == nil {
				w.Close()
			}
			return err
		},
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s of a missing path: %v, want fs.ErrNotExist", name, err)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, `"" does not exist`) || !strings.Contains(msg, strconv.Quote(missing)+" does not exist in the VM") {
			t.Errorf("%s: the hint does not name %s: %s", name, missing, msg)
		}
	}
}
