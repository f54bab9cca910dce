package client_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/microvms/microvms/internal/fswiretap"
)

// WriteFileDurable asks a real agentd for the fsync (sync=true on the PUT)
// and WriteFile does not; both land the whole file. A recording proxy in
// front of the daemon shows the wire, since a completed fsync leaves nothing
// a test can read back.
// Catches: WriteFileDurable sending no sync (the caller's durability
// silently dropped), and WriteFile sending sync=true (every upload paying
// the fsync the default was made to avoid).
func TestWriteFileDurableAsksForTheFsync(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	tap := fswiretap.Start(t, d.base)
	ctx := testCtx(t)
	s := session(t, tap.URL, token)
	blob := randomBytes(t, 3<<20)
	plain, durable := filepath.Join(d.dir, "plain"), filepath.Join(d.dir, "durable")
	if err := s.WriteFile(ctx, plain, bytes.NewReader(blob), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFileDurable(ctx, durable, bytes.NewReader(blob), 0o600); err != nil {
		t.Fatal(err)
	}
	got := tap.Syncs()
	if len(got) != 2 || got[0] != "" || got[1] != "true" {
		t.Fatalf("sync values sent: %q, want [\"\" \"true\"]", got)
	}
	for _, p := range []string{plain, durable} {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, blob) {
			t.Fatalf("%s: %d bytes (%v), want the %d sent", p, len(b), err, len(blob))
		}
	}
	if st, err := os.Stat(durable); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("durable file mode %v (%v), want 0600", st.Mode(), err)
	}
}
