package checkpoint

import (
	"context"
	"testing"

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
