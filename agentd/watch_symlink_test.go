package agentd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// A recursive watch of a symlink to a directory watches the directory it
// names, as a plain watch of the same link does, and reports paths under
// the link as the caller wrote it. Catches walking the root as given
// (filepath.WalkDir treats a symlinked root as a leaf: the watch answered
// ready with 0 directories and then stayed silent).
func TestRecursiveWatchFollowsASymlinkedRoot(t *testing.T) {
	d := bootedDaemon(t, nil)
	real := t.TempDir()
	if err := os.Mkdir(filepath.Join(real, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	w := d.watch(t, link, true) // fails unless ready counts at least one directory
	top := filepath.Join(link, "top")
	if err := os.WriteFile(filepath.Join(real, "top"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.expect(protocol.WatchOpCreate, top)
	if err := os.WriteFile(filepath.Join(real, "sub", "deep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.expect(protocol.WatchOpCreate, filepath.Join(link, "sub", "deep"))
}
