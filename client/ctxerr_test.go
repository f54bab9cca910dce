package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
)

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
