package agentd

import (
	"bytes"
	"testing"
	"time"
)

// TestHeadChunksDoubleAndAreNeverRegrown: a head holds its bytes in chunks
// of 4 KiB, 8 KiB, ... up to headChunkMax, each filled to its capacity before
// the next is made, and the last one no bigger than what is left under the
// cap. That is what lets snapshot share chunks with later writes and keeps a
// big head from being copied as it grows.
// Catches, in head.write, `2*cap(...)` made `2/cap(...)` (one-byte chunks),
// `limit-h.n` made `limit+h.n` (a last chunk past the cap) and
// `cap(last)-len(last)` made `+` (a chunk appended past its capacity, which
// reallocates it).
func TestHeadChunksDoubleAndAreNeverRegrown(t *testing.T) {
	const limit = 3<<20 + 100
	var h head
	var want []byte
	for i := 0; len(want) < limit; i++ {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, min(3001, limit-len(want)))
		h.write(p, limit)
		want = append(want, p...)
	}
	var got []byte
	wantCap := 4096
	for i, c := range h.chunks {
		if i == len(h.chunks)-1 {
			wantCap = min(wantCap, limit-len(got))
		}
		if cap(c) != wantCap || len(c) != cap(c) {
			t.Fatalf("chunk %d of %d: len %d cap %d, want a full chunk of %d", i, len(h.chunks), len(c), cap(c), wantCap)
		}
		got = append(got, c...)
		wantCap = min(2*wantCap, headChunkMax)
	}
	if h.n != limit || !bytes.Equal(got, want) {
		t.Fatalf("head holds %d bytes (n %d), want the %d written", len(got), h.n, len(want))
	}
}

// TestRingGrowsOnlyWhenAWritePassesItsEnd: the replay ring starts empty and
// grows (doubling, at least 4 KiB, at most the capacity) only when a write
// would pass its end; a write that ends exactly at its end leaves it alone.
// Catches, in outputLog.write, `end > uint64(len(l.ring))` made `>=` (a ring
// filled exactly is doubled for nothing).
func TestRingGrowsOnlyWhenAWritePassesItsEnd(t *testing.T) {
	l := newOutputLog(1<<16, 1<<20, time.Second, 0)
	for _, s := range []struct {
		n, ring int
	}{{100, 4096}, {3996, 4096}, {1, 8192}, {8191, 16384}, {1 << 16, 1 << 16}} {
		l.publish(stdoutKind, bytes.Repeat([]byte{'x'}, s.n))
		if len(l.ring) != s.ring {
			t.Fatalf("after %d bytes in all: ring of %d, want %d", l.total, len(l.ring), s.ring)
		}
	}
}

// TestSegmentsStayBoundedAsTheWindowMoves: output alternating between the
// pipes makes a segment per write; the ones wholly before the window are
// dropped and the slice compacted, so a long interleaved run holds about
// twice the segments the window spans, not one per write ever made. Run with
// a window spanning few segments and one spanning many, as the compaction
// test has a fixed floor (64) and a proportional half.
// Catches, in outputLog.write, `len(l.segs)/2` made `*2`, `l.segHead > 64`
// made `<= 64`, and `l.segHead > len(l.segs)/2` made `<=` (each stops
// compaction for good once the run is long enough).
func TestSegmentsStayBoundedAsTheWindowMoves(t *testing.T) {
	for _, capacity := range []int64{4096, 1 << 16} {
		l := newOutputLog(capacity, 0, time.Second, 0)
		const writes, size = 20000, 100
		live := int(capacity)/size + 2
		p := bytes.Repeat([]byte{'x'}, size)
		for i := range writes {
			l.publish(streamKind(i%2), p)
		}
		if len(l.segs) > 2*live+66 {
			t.Errorf("window of %d bytes, %d writes of %d: %d segments held (%d live), want at most %d",
				capacity, writes, size, len(l.segs), len(l.segs)-l.segHead, 2*live+66)
		}
		// The window's bytes still map to their pipes.
		for off := l.start; off < l.total; off += size / 2 {
			kind, end := l.segmentAt(off)
			if want := streamKind(off / size % 2); kind != want || end != min(off/size*size+size, l.total) {
				t.Fatalf("window of %d: byte %d in %v up to %d, want %v up to %d", capacity, off, kind, end, want, off/size*size+size)
			}
		}
	}
}

// TestReadAcrossTheRingsEnd: a run that wraps past the end of the ring is
// handed out in two views, the tail of the ring and then its start, each
// holding the bytes written at those offsets.
// Catches, in outputLog.next, `len(l.ring)-i` made `+` (a view past the
// ring's end).
func TestReadAcrossTheRingsEnd(t *testing.T) {
	l := newOutputLog(4096, 0, time.Second, 0)
	var all []byte
	for _, n := range []int{3000, 2000} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(len(all) + i)
		}
		l.publish(stdoutKind, p)
		all = append(all, p...)
	}
	s := l.attach(3000)
	var got []int
	for s.cursor < l.total {
		st := l.next(s, 1<<20)
		if st.kind != stepOutput || st.off != s.cursor {
			t.Fatalf("at %d: step %+v, want output", s.cursor, st)
		}
		if !bytes.Equal(st.data, all[st.off:st.off+uint64(len(st.data))]) {
			t.Fatalf("the view at %d does not hold the bytes written there", st.off)
		}
		got = append(got, len(st.data))
		l.consumed(s, len(st.data))
	}
	if len(got) != 2 || got[0] != 1096 || got[1] != 904 {
		t.Fatalf("views of %v bytes, want [1096 904]", got)
	}
}

// readTo copies s's bytes out of l until its cursor reaches to.
func readTo(t *testing.T, l *outputLog, s *subscriber, to uint64) {
	t.Helper()
	for s.cursor < to {
		st := l.next(s, int(to-s.cursor))
		if st.kind != stepOutput {
			t.Fatalf("at %d: step %+v, want output", s.cursor, st)
		}
		l.consumed(s, len(st.data))
	}
}

// TestPumpDoesNotWaitForAReaderPastWhatItOverwrites: a reader whose cursor is
// exactly where the window's new start will be needs none of the bytes the
// write overwrites, so the write goes ahead at once; with an hour's stall
// timeout, waiting for it would hold the pump for an hour.
// Catches, in makeRoom, `s.cursor < newStart` made `<=`.
func TestPumpDoesNotWaitForAReaderPastWhatItOverwrites(t *testing.T) {
	l := newOutputLog(4096, 0, time.Hour, 0)
	l.publish(stdoutKind, bytes.Repeat([]byte{'a'}, 4096))
	s := l.attach(0)
	readTo(t, l, s, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.publish(stdoutKind, bytes.Repeat([]byte{'b'}, 100))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		l.detach(s) // let the pump go
		<-done
		t.Fatal("a write overwriting only bytes the reader had read waited for it")
	}
	if st := l.next(s, 1<<20); st.kind != stepOutput || st.off != 100 {
		t.Fatalf("the reader's next step: %+v, want output from 100", st)
	}
}

// TestACaughtUpReaderIsNeverLeftBehind: while the pump waits (here for a
// reader holding a view of the ring, which it waits for whatever the stall
// timeout), each stall period leaves behind only readers that still have
// bytes to read and made no progress. A reader that has read everything is
// idle, not slow: marking it stalled would stop the pump waiting for it
// later, and it would lose bytes it could have had.
// Catches, in makeRoom, `s.cursor < l.total` made `<=` in the stall check
// (a caught-up reader is stalled at the second period it sits still).
func TestACaughtUpReaderIsNeverLeftBehind(t *testing.T) {
	l := newOutputLog(4096, 0, time.Millisecond, 0)
	holder, idle := l.attach(0), l.attach(0)
	l.publish(stdoutKind, bytes.Repeat([]byte{'a'}, 4096))
	readTo(t, l, idle, 4096)
	view := l.next(holder, 1<<20)
	if view.kind != stepOutput {
		t.Fatalf("holder's step %+v, want output", view)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.publish(stdoutKind, bytes.Repeat([]byte{'b'}, 100))
	}()
	// Some hundred stall periods pass while the holder keeps the pump waiting.
	time.Sleep(200 * time.Millisecond)
	l.consumed(holder, len(view.data))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the pump did not go on once the view was released")
	}
	l.mu.Lock()
	stalled := idle.stalled
	l.mu.Unlock()
	if stalled {
		t.Fatal("a reader that had read every byte was marked stalled")
	}
}

// TestNextHandsOutOnePipesRunWithoutAnEmptyGap: a reader at the window's
// start has missed nothing, so its first step is output, not a gap from the
// start to itself; and a reader that starts inside a run gets the rest of
// that run only, then the other pipe's run, each under its own pipe.
// Catches, in outputLog.next, `s.cursor < l.start` made `<=` (an empty gap
// step) and `segEnd-s.cursor` made `+` (a view past the end of its run,
// carrying the other pipe's bytes under the first one's name).
func TestNextHandsOutOnePipesRunWithoutAnEmptyGap(t *testing.T) {
	l := newOutputLog(4096, 0, time.Second, 0)
	l.publish(stdoutKind, bytes.Repeat([]byte{'o'}, 100))
	l.publish(stderrKind, bytes.Repeat([]byte{'e'}, 100))
	s := l.attach(50)
	for _, want := range []struct {
		kind   streamKind
		off    uint64
		n      int
		filler byte
	}{{stdoutKind, 50, 50, 'o'}, {stderrKind, 100, 100, 'e'}} {
		st := l.next(s, 1<<20)
		if st.kind != stepOutput || st.stream != want.kind || st.off != want.off || len(st.data) != want.n ||
			!bytes.Equal(st.data, bytes.Repeat([]byte{want.filler}, want.n)) {
			t.Fatalf("at %d: step kind %d, %v, off %d, %d bytes; want output of %d bytes of %v from %d",
				s.cursor, st.kind, st.stream, st.off, len(st.data), want.n, want.kind, want.off)
		}
		l.consumed(s, len(st.data))
	}
	if st := l.next(s, 1<<20); st.kind != stepWait {
		t.Fatalf("after the last byte: step kind %d, want a wait", st.kind)
	}
	if st := l.next(l.attach(0), 1<<20); st.kind != stepOutput || st.off != 0 {
		t.Fatalf("a reader at the window's start: step kind %d from %d, want output from 0", st.kind, st.off)
	}
}
