package checkpoint

import (
	"context"
	"testing"

	"github.com/microvms/microvms/client"
)

// A restore puts back every kind of member the same way whether agentd
// serves the exact extraction (this build's does) or not (an image's older
// agentd: the data filter's upload, then the fixup script), and the exact
// path starts no command in the guest, so it needs no shell there.
// Catches: a kind the exact extraction drops (a setuid bit, an owner, a
// nanosecond time, an absolute symlink, the path's own directory's time),
// Lay still running the script after an exact upload, or the fallback
// broken for old daemons.
func TestRestoreKeepsEveryKindWithAndWithoutExactExtraction(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	orig := e.launch(t)
	run(t, orig, project)
	want := run(t, orig, describe)
	m, err := Checkpoint(ctx, orig, e.store, Options{Paths: []string{"/tmp/proj"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.store.Prepare(ctx, m.Digest)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, exact := range []bool{true, false} {
		sb := e.launch(t)
		if !sb.Session().Serves(ctx, "fsWriteTarExact") {
			t.Fatal("this build's agentd does not list PUT /v1/fs/tar/exact")
		}
		exactServed = func(context.Context, *client.Session) bool { return exact }
		before, err := sb.Session().Execs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := Lay(ctx, sb, p); err != nil {
			t.Fatalf("exact %v: %v", exact, err)
		}
		after, err := sb.Session().Execs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The script's run is one exec agentd holds afterwards; the exact
		// path must leave none.
		if ran := len(after) > len(before); ran == exact {
			t.Errorf("exact %v: the guest's execs went from %d to %d", exact, len(before), len(after))
		}
		if got := run(t, sb, describe); got != want {
			t.Errorf("exact %v: the restored tree differs:\n%s\nwant:\n%s", exact, got, want)
		}
	}
	exactServed = servesExact
}
