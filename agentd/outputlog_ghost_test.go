package agentd

import (
	"bytes"
	"testing"
	"time"
)

// published runs l.publish of p in the background; the channel closes
// when it returned.
func published(l *outputLog, p []byte) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); l.publish(stdoutKind, p) }()
	return done
}

// TestADroppedReaderKeepsItsBytesForAReattach: a reader whose connection
// ended mid-stream (a suspend, a network cut) leaves a ghost, so a writer
// that runs a whole replay window ahead waits until the reader reattaches
// near where it dropped, and the reattached reader reads on with no gap.
// Catches: detachEarly made a plain detach (the writer overwrites the bytes
// at once and the reattach reads a gap), a ghost at the reader's cursor
// rather than behind it by the slack (the bytes it copied out but never
// sent are overwritten), and a reattach that does not claim the ghost (the
// writer stays held by a ghost nobody reads through).
func TestADroppedReaderKeepsItsBytesForAReattach(t *testing.T) {
	const window = 4096
	l := newOutputLog(window, 0, time.Hour, 0)
	l.publish(stdoutKind, bytes.Repeat([]byte{'a'}, 3000))
	s := l.attach(0)
	readTo(t, l, s, 3000)
	// The client got only 2000 of the 3000 bytes copied out before its
	// connection went.
	l.detachEarly(s)
	done := published(l, bytes.Repeat([]byte{'b'}, 2*window))
	select {
	case <-done:
		t.Fatal("a writer ran a whole window past a reader that dropped mid-stream without waiting for it")
	case <-time.After(50 * time.Millisecond):
	}
	r := l.attach(2000)
	var got bytes.Buffer
	for range 1000 { // bounded: the writer needs a few window's worth of reads
		if r.cursor == 3000+2*window {
			break
		}
		st := l.next(r, window)
		switch st.kind {
		case stepGap:
			t.Fatalf("the reattached reader got a gap: %+v", st)
		case stepOutput:
			got.Write(st.data)
			l.consumed(r, len(st.data))
		case stepWait:
			select {
			case <-st.wait:
			case <-time.After(10 * time.Second):
				t.Fatal("the writer stayed held with the reattached reader caught up: a ghost nobody claimed holds it")
			}
		}
	}
	<-done
	want := append(bytes.Repeat([]byte{'a'}, 1000), bytes.Repeat([]byte{'b'}, 2*window)...)
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("the reattached reader read %d bytes, want %d", got.Len(), len(want))
	}
}

// TestAGhostNobodyClaimsIsLeftBehind: a reader that dropped and never came
// back holds the writer no longer than a live reader that stopped reading
// would: it is left behind after its stall periods, and so is every later
// ghost (the log forgets them). Catches a ghost exempt from the stall check
// or never dropped (the command would wait forever for a client that is
// gone), and a ghost for a reader that received the exit event.
func TestAGhostNobodyClaimsIsLeftBehind(t *testing.T) {
	const window = 4096
	l := newOutputLog(window, 0, 10*time.Millisecond, 0)
	s := l.attach(0)
	l.publish(stdoutKind, bytes.Repeat([]byte{'a'}, 1000))
	readTo(t, l, s, 1000)
	l.detachEarly(s)
	select {
	case <-published(l, bytes.Repeat([]byte{'b'}, 3*window)):
	case <-time.After(time.Minute):
		t.Fatal("a ghost nobody claimed held the writer for a minute at a 10 ms stall timeout")
	}
	l.mu.Lock()
	n := len(l.subs)
	l.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d subscribers left after the ghost was left behind, want 0", n)
	}
	// A reader of an exec that already ended leaves none.
	l.finish(exitStatus{}, func() {})
	s = l.attach(l.total)
	l.detachEarly(s)
	if len(l.subs) != 0 {
		t.Fatalf("a ghost for a finished exec")
	}
}

// Catches a log that keeps a ghost for every reader that ever dropped: a
// viewer opened and closed over and over on a quiet exec would grow it
// without end.
func TestGhostsAreBounded(t *testing.T) {
	l := newOutputLog(4096, 0, time.Hour, 0)
	l.publish(stdoutKind, []byte("x"))
	for i := range uint64(10 * maxGhosts) {
		// Each reader far from every ghost before it: it claims none.
		l.detachEarly(l.attach(i * 4 * 4096))
	}
	if n := l.ghosts(); n > maxGhosts {
		t.Fatalf("%d ghosts kept, want at most %d", n, maxGhosts)
	}
}
