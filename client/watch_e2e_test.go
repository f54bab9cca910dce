package client_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// TestAgentdWatch: Session.Watch returns once the daemon's watch is in place
// and decodes its events. Wrong edit caught: Watch returning before the ready
// event (the create below could then be missed).
func TestAgentdWatch(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, "tok")
	s := session(t, d.base, "tok")
	ctx := testCtx(t)
	dir := t.TempDir()
	w, err := s.Watch(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Ready().Directories != 1 {
		t.Fatalf("ready %+v", w.Ready())
	}
	p := filepath.Join(dir, "new")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Next()
	if err != nil || ev.Gap != nil || ev.Change.Op != protocol.WatchOpCreate || ev.Change.Path != p {
		t.Fatalf("Next: %+v %v, want create %s", ev, err, p)
	}
	if _, err := s.Watch(ctx, p, false); err == nil {
		t.Fatal("a watch on a file started")
	}
}
