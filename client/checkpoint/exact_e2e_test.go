package checkpoint

import (
	"context"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
)

// A checkpoint saves, and a restore puts back, every kind of member the
// same way whether agentd serves the exact tar routes (this build's does)
// or not (an image's older agentd: the plain download plus a listing for
// the nanoseconds, then the data filter's upload plus the fixup script),
// and the exact restore starts no command in the guest, so it needs no
// shell there. Catches: a kind the exact routes drop (a setuid bit, an
// owner, a nanosecond time, an absolute symlink, the path's own
// directory's time), Lay still running the script after an exact upload,
// or either fallback broken for old daemons.
func TestCheckpointAndRestoreKeepEveryKindWithAndWithoutExactTar(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	orig := e.launch(t)
	run(t, orig, project)
	want := run(t, orig, describe)
	for _, op := range []string{protocol.OpFsReadTarExact, protocol.OpFsWriteTarExact} {
		if !orig.Session().Serves(ctx, op) {
			t.Fatalf("this build's agentd does not list %s", op)
		}
	}
	defer func(was func(*client.Session, context.Context, string) bool) { serves = was }(serves)
	for _, exact := range []bool{true, false} {
		serves = func(*client.Session, context.Context, string) bool { return exact }
		m, err := Checkpoint(ctx, orig, e.store, Options{Paths: []string{"/tmp/proj"}})
		if err != nil {
			t.Fatalf("exact %v: %v", exact, err)
		}
		p, err := e.store.Prepare(ctx, m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		sb := e.launch(t)
		before, err := sb.Session().Execs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = Lay(ctx, sb, p)
		p.Close()
		if err != nil {
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
}
