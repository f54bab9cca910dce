package agentd

import (
	"bytes"
	"testing"
)

// A stream's buffer reserves what the next event needs and no more, and
// grows by doubling up to streamBufferBytes: fifty attached streams of a
// few lines each must not each hold a large buffer. The events built are
// checked too, so the sizing never costs a byte of output.
//
// Catches, in room: `need > cap` made `>=` (a buffer that fits exactly is
// reallocated), `2*cap(b.out)` made `2/cap(b.out)` (growth by exactly what
// is needed, one reallocation per event); and in output, each edit of the
// reservation `eventFrameBytes - (maxEventBytes+2)/3*4 + n` that reserves
// more than the frame needs (`-` made `+`, `/3*4` made `/3/4`, `+2` made
// `-2`), which grows a small stream's buffer for nothing.
func TestStreamBufferReservesWhatTheEventNeeds(t *testing.T) {
	frame := eventFrameBytes - (maxEventBytes+2)/3*4 // an event's text around its base64
	data := bytes.Repeat([]byte("x"), 300)           // base64: 400 bytes
	b := &streamBuffers{out: make([]byte, 0, frame+400)}
	b.output(0, stdoutKind, data)
	if cap(b.out) != frame+400 {
		t.Fatalf("an event that fits the buffer exactly grew it from %d to %d", frame+400, cap(b.out))
	}
	if want := "event: output\nid: 300\ndata: {\"offset\":0,\"stream\":\"stdout\",\"output\":\"" + string(bytes.Repeat([]byte("eHh4"), 100)) + "\"}\n\n"; string(b.out) != want {
		t.Fatalf("event %q, want %q", b.out, want)
	}

	b = &streamBuffers{out: make([]byte, 0, smallStreamBytes)}
	b.output(0, stdoutKind, []byte("hello\n"))
	if cap(b.out) != smallStreamBytes {
		t.Fatalf("one short event grew a fresh buffer from %d to %d", smallStreamBytes, cap(b.out))
	}

	b = &streamBuffers{out: make([]byte, 10, smallStreamBytes)}
	b.room(smallStreamBytes - 10)
	if cap(b.out) != smallStreamBytes {
		t.Fatalf("room for exactly the free space grew the buffer to %d", cap(b.out))
	}
	b.room(smallStreamBytes)
	if cap(b.out) != 2*smallStreamBytes || len(b.out) != 10 {
		t.Fatalf("a buffer one byte short grew to cap %d (len %d), want it doubled to %d", cap(b.out), len(b.out), 2*smallStreamBytes)
	}
	b = &streamBuffers{out: make([]byte, 0, 200<<10)}
	b.room(201 << 10)
	if cap(b.out) != streamBufferBytes {
		t.Fatalf("growth past half the full size gave cap %d, want streamBufferBytes (%d)", cap(b.out), streamBufferBytes)
	}
}
