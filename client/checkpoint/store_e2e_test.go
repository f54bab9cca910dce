package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"

	"github.com/microvms/microvms/client/sandbox"
)

var teardown = sandbox.TeardownOptions{}

// List shows every checkpoint newest first; Remove deletes by name or
// digest, and deletes an object only when no other manifest names it.
// Catches: deleting a shared object with the first manifest, and a Get by
// digest that misses a named checkpoint's object.
func TestListAndRemove(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.launch(t)
	run(t, sb, "mkdir -p /tmp/w && echo same > /tmp/w/f && touch -d @1700000000 /tmp/w/f /tmp/w")
	a, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/tmp/w"}, Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/tmp/w"}, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest {
		t.Fatalf("the same tree stored twice under %s and %s", a.Digest, b.Digest)
	}
	list, err := e.store.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "b" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if got, err := e.store.Get(ctx, a.Digest); err != nil || got.Digest != a.Digest {
		t.Fatalf("Get by digest = %+v, %v", got, err)
	}
	del, err := e.store.Remove(ctx, "a")
	if err != nil || len(del) != 1 {
		t.Fatalf("Remove a deleted %v (%v); the object is b's too", del, err)
	}
	if _, ok := e.emu.Server.Object(bucket, e.store.objectKey(b.Digest)); !ok {
		t.Fatal("removing a deleted b's object")
	}
	del, err = e.store.Remove(ctx, b.Digest)
	if err != nil || len(del) != 2 {
		t.Fatalf("Remove b deleted %v (%v), want its manifest and object", del, err)
	}
	if list, _ := e.store.List(ctx); len(list) != 0 {
		t.Fatalf("left %+v", list)
	}
	if _, err := e.store.Get(ctx, "a"); err == nil {
		t.Fatal("a removed checkpoint is still found")
	}
}

// No paths: the working directory, unless that is "/" (an image without a
// WORKDIR), which is refused rather than saving the whole filesystem.
// Catches: a default that checkpoints the root.
func TestDefaultPathIsTheWorkdir(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.launch(t)
	wd := strings.TrimSpace(run(t, sb, "pwd"))
	t.Logf("the guest starts commands in %s", wd)
	m, err := Checkpoint(ctx, sb, e.store, Options{})
	if wd == "/" {
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindInvalidArg {
			t.Fatalf("a checkpoint of the root by default: %+v, %v", m, err)
		}
		return
	}
	if err != nil || len(m.Paths) != 1 || m.Paths[0] != wd {
		t.Fatalf("paths %v (%v), want the workdir %s", m.Paths, err, wd)
	}
}

// Two paths, each laid back under itself (one upload per path, confined
// there by agentd). Catches: members of one path landing under the other.
func TestTwoPathsRestoreInPlace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.launch(t)
	run(t, sb, "mkdir -p /tmp/a/x /tmp/b && echo A > /tmp/a/x/f && echo B > /tmp/b/f && ln /tmp/b/f /tmp/b/g")
	m, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/tmp/b", "/tmp/a"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(ctx, e.store, m.Digest, RestoreOptions{Launch: e.emu.Launch})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Terminate(ctx, teardown)
	got := run(t, r, "cat /tmp/a/x/f /tmp/b/f /tmp/b/g; ls /tmp/a /tmp/b | tr '\\n' ' '; [ $(stat -c %i /tmp/b/f) = $(stat -c %i /tmp/b/g) ] && echo linked")
	if got != "A\nB\nB\n/tmp/a: x  /tmp/b: f g linked\n" {
		t.Fatalf("restored: %q", got)
	}
}
