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
	if runBufferCap < 1<<20 {
		t.Fatalf("runBufferCap %d", runBufferCap)
	}
}
