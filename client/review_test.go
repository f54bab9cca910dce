package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a cap checked after appending (the buffer holds more than its
// limit), growth by doubling past the limit (the memory is not bounded by
// it), a refused write that still appends part of p, and a cap one short
// (a write that exactly fills the limit refused).
func TestCapBuffer(t *testing.T) {
	b := capBuffer{limit: 10}
	if !b.write([]byte("abcdef")) || b.String() != "abcdef" {
		t.Fatalf("first write: %q", b.String())
	}
	if b.write([]byte("ghijk")) {
		t.Fatal("a write past the limit was accepted")
	}
	if b.String() != "abcdef" || cap(b.b) > 10 {
		t.Fatalf("after a refused write: %q, capacity %d", b.String(), cap(b.b))
	}
	if !b.write([]byte("ghij")) || b.String() != "abcdefghij" || cap(b.b) > 10 {
		t.Fatalf("a write exactly to the limit: %q, capacity %d", b.String(), cap(b.b))
	}
	b.reset()
	if b.String() != "" || b.b != nil {
		t.Fatal("reset kept the bytes")
	}
	if runBufferCap < 1<<20 {
		t.Fatalf("runBufferCap %d", runBufferCap)
	}
}

// Catches: every context error mapped to the Timeout kind (a cancellation
// read as "the deadline passed"), a deadline mapped to Interrupted, a
// cancellation given a wire kind, and the context error dropped from the
// chain.
func TestCtxErr(t *testing.T) {
	c := ctxErr(context.Canceled, "op %s", "x")
	if _, hasWire := c.WireKind(); c.Kind() != taxonomy.KindInterrupted || hasWire || !errors.Is(c, context.Canceled) || c.Message() != "op x" {
		t.Fatalf("cancelled: %v kind %v", c, c.Kind())
	}
	d := ctxErr(context.DeadlineExceeded, "op %s", "y")
	if w, _ := d.WireKind(); d.Kind() != taxonomy.KindTimeout || w != taxonomy.WireExecTimeout || !errors.Is(d, context.DeadlineExceeded) || !strings.Contains(d.Error(), "op y") {
		t.Fatalf("deadline: %v kind %v", d, d.Kind())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := KindOf(timeoutOr(ctx, "id-1", errors.New("x"))); got != taxonomy.KindInterrupted {
		t.Fatalf("timeoutOr on a cancelled ctx: %v", got)
	}
}
