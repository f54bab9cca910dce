package client

import (
	"testing"
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
	// A write that exactly fills the capacity there is does not grow it.
	// Catches the growth test made `need >= cap` (a reallocation, doubling
	// the memory, for bytes that already fit).
	g := capBuffer{limit: 1 << 20}
	g.write(make([]byte, 100))
	c := cap(g.b)
	if !g.write(make([]byte, c-100)) || cap(g.b) != c {
		t.Fatalf("filling a capacity of %d grew it to %d", c, cap(g.b))
	}
	if runBufferCap < 1<<20 {
		t.Fatalf("runBufferCap %d", runBufferCap)
	}
}
