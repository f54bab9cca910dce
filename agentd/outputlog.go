package agentd

import (
	"sort"
	"sync"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// streamKind says which pipe bytes came from; both share one offset space.
type streamKind uint8

const (
	stdoutKind streamKind = iota
	stderrKind
)

func (k streamKind) String() string {
	if k == stderrKind {
		return "stderr"
	}
	return "stdout"
}

// exitStatus is how an exec ended. Written once by finish and never taken, so
// "is it over" and "how did it end" stay answerable after an ack releases the
// output.
type exitStatus struct {
	code, signal      *int32
	truncated         bool
	writersMayBeAlive bool
	usage             *protocol.ExecUsage // stdout/stderr bytes filled in by finish
	oomKilled         bool
}

// segment marks where a run of bytes from one pipe begins.
type segment struct {
	off  uint64
	kind streamKind
}

// subscriber is one attached stream's position, held in the log so the output
// pump can see who still needs the bytes it is about to overwrite.
type subscriber struct {
	cursor  uint64 // next offset this reader copies out
	stalled bool   // left behind: the pump no longer waits for it
	mark    uint64 // cursor when the pump started waiting, to detect no progress
	// reading is true between a next that handed out a view of the ring and
	// the consumed that releases it: the reader is encoding those bytes straight
	// from the ring, outside the lock, so the pump must not overwrite them
	// whatever the stall state. A reader does only CPU work while it holds a
	// view (it writes to its connection after consumed), so this never waits on
	// the network.
	reading bool
	// ghost: no connection reads through this subscriber; it holds the
	// bytes a reader that dropped mid-stream was not sent (outputlog_ghost.go).
	ghost  bool
	origin uint64 // a ghost's: the cursor of the reader that dropped
}

// outputLog is one exec's output: the head of each stream, kept for poll and
// ack up to max_output_bytes (truncated marks the cut), and the tail of both
// in one offset space, kept in a ring of stream_replay_bytes for SSE replay.
// The ring grows on demand, so an idle exec costs nothing.
//
// A reader that keeps up loses nothing: before the pump overwrites bytes an
// attached reader has not copied out, it waits for that reader — but only
// while the reader makes progress. A reader that makes none for
// StreamStallTimeout is left behind and told about the bytes it missed with a
// gap event, so a dead connection never holds a child's pipe for long.
type outputLog struct {
	mu       sync.Mutex
	ring     []byte
	capacity int
	start    uint64 // offset of the oldest byte still in the ring
	total    uint64 // bytes ever published; the next byte's offset
	segs     []segment
	segHead  int

	head      [2]head
	headCap   int
	written   [2]uint64 // bytes each pipe delivered, also past the head cap
	truncated bool

	subs     map[*subscriber]struct{}
	wake     chan struct{} // closed when bytes arrive or the exec ends; nil if no one waits
	progress chan struct{} // closed when a reader advances; nil unless the pump waits
	stall    time.Duration

	done bool
	exit exitStatus

	// graceEnd is when the pump stops waiting for a first stream
	// (stream_attach_grace_secs after the start); everAttached is set by the
	// first attach. Until one of them, bytes nobody has read stay in the
	// ring: the usual client starts an exec and attaches one round trip
	// later, and a fast writer filled the 1 MiB window before that (the
	// CLI's exec --stream of head -c 256M lost its first 0.2-0.6 MiB).
	graceEnd     time.Time
	everAttached bool
}

func newOutputLog(replay, headCap int64, stall, attachGrace time.Duration) *outputLog {
	l := &outputLog{capacity: int(replay), headCap: int(headCap), stall: stall}
	if attachGrace > 0 {
		l.graceEnd = time.Now().Add(attachGrace)
	}
	return l
}

// publish appends bytes read from one pipe. Bytes past the head cap still go
// to the ring: a stream reader past max_output_bytes has been keeping up and
// has no reason to stop receiving.
func (l *outputLog) publish(kind streamKind, p []byte) {
	if len(p) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keepHead(kind, p)
	for len(p) > 0 {
		n := min(len(p), l.capacity)
		l.makeRoom(uint64(n))
		l.write(kind, p[:n])
		p = p[n:]
	}
	l.wakeReaders()
}

// keepHead appends p to kind's head, up to the head cap. Called with l.mu held.
func (l *outputLog) keepHead(kind streamKind, p []byte) {
	l.written[kind] += uint64(len(p)) // every path that publishes keeps a head
	h := &l.head[kind]
	if room := l.headCap - h.n; room > 0 {
		n := min(room, len(p))
		h.write(p[:n], l.headCap)
		if n < len(p) {
			l.truncated = true
		}
	} else if l.headCap >= 0 {
		l.truncated = true
	}
}

// makeRoom waits, within the stall budget, until no reader still needs the n
// oldest bytes of a full ring. Called with l.mu held; may release it while
// waiting, so it re-checks from scratch after every wait.
func (l *outputLog) makeRoom(n uint64) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	waiting := false
	for {
		newStart := l.start
		if end := l.total + n; end > uint64(l.capacity) {
			newStart = max(newStart, end-uint64(l.capacity))
		}
		blocked := false
		for s := range l.subs {
			if s.cursor < newStart && (!s.stalled || s.reading) {
				if !waiting {
					s.mark = s.cursor
				}
				blocked = true
			}
		}
		graceLeft := time.Duration(0)
		if !l.everAttached && newStart > l.start && !l.graceEnd.IsZero() {
			graceLeft = time.Until(l.graceEnd)
		}
		if !blocked && graceLeft <= 0 {
			return
		}
		waiting = true
		// The readers we wait for may be parked waiting for these very bytes.
		l.wakeReaders()
		if l.progress == nil {
			l.progress = make(chan struct{})
		}
		ch := l.progress
		if !blocked {
			// Only the attach grace holds the pump: wait for a first stream
			// (attach signals progress) or the grace's end, then re-check.
			grace := time.NewTimer(graceLeft)
			l.mu.Unlock()
			select {
			case <-ch:
			case <-grace.C:
			}
			grace.Stop()
			l.mu.Lock()
			continue
		}
		if timer == nil {
			timer = time.NewTimer(l.stall)
		}
		l.mu.Unlock()
		expired := false
		select {
		case <-ch:
		case <-timer.C:
			expired = true
		}
		l.mu.Lock()
		if expired {
			// Whoever made no progress over a whole stall period is left
			// behind; the others earned another period.
			for s := range l.subs {
				if !s.stalled && !s.reading && s.cursor < l.total && s.cursor == s.mark {
					s.stalled = true
				}
				s.mark = s.cursor
			}
			l.dropStalledGhosts()
			timer.Reset(l.stall)
		}
	}
}

// write copies one chunk (at most capacity bytes) into the ring. Called with
// l.mu held and room already made.
func (l *outputLog) write(kind streamKind, p []byte) {
	l.grow(l.total + uint64(len(p)))
	i := int(l.total % uint64(l.capacity))
	k := copy(l.ring[i:], p)
	copy(l.ring, p[k:])
	l.advance(kind, uint64(len(p)))
}

// grow widens a ring that has not reached its capacity to hold offsets up
// to end. Called with l.mu held.
func (l *outputLog) grow(end uint64) {
	if len(l.ring) < l.capacity && end > uint64(len(l.ring)) {
		// Still growing, so nothing has wrapped and [0, total) is contiguous.
		size := max(int(min(end, uint64(l.capacity))), 2*len(l.ring), 4096)
		size = min(size, l.capacity)
		grown := make([]byte, size)
		copy(grown, l.ring[:l.total])
		l.ring = grown
	}
}

// advance records n bytes of kind just placed at the ring's write position
// (total modulo capacity). Called with l.mu held.
func (l *outputLog) advance(kind streamKind, n uint64) {
	end := l.total + n
	if l.segHead == len(l.segs) || l.segs[len(l.segs)-1].kind != kind {
		l.segs = append(l.segs, segment{off: l.total, kind: kind})
	}
	l.total = end
	if end > uint64(l.capacity) {
		l.start = max(l.start, end-uint64(l.capacity))
	}
	// Drop segments wholly before the window; keep the one the window starts in.
	for l.segHead+1 < len(l.segs) && l.segs[l.segHead+1].off <= l.start {
		l.segHead++
	}
	if l.segHead > 64 && l.segHead > len(l.segs)/2 {
		l.segs = append(l.segs[:0], l.segs[l.segHead:]...)
		l.segHead = 0
	}
}

func (l *outputLog) wakeReaders() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

// finish records how the exec ended and wakes every reader for the exit
// event. onDone runs under the lock, so whoever sees the exit event (or the
// done flag) also sees everything onDone published, e.g. the phase change.
func (l *outputLog) finish(st exitStatus, onDone func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st.truncated = l.truncated
	if st.usage != nil {
		st.usage.StdoutBytes, st.usage.StderrBytes = l.written[stdoutKind], l.written[stderrKind]
	}
	l.exit = st
	l.done = true
	onDone()
	l.wakeReaders()
}

// exitStatus is the recorded end (zero until finish), kept after release.
func (l *outputLog) exitStatus() exitStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exit
}

// attach registers a reader at offset from.
func (l *outputLog) attach(from uint64) *subscriber {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &subscriber{cursor: from}
	if l.subs == nil {
		l.subs = make(map[*subscriber]struct{})
	}
	l.claimGhost(from)
	l.subs[s] = struct{}{}
	if !l.everAttached {
		// A pump held by the attach grace re-checks: this reader now
		// speaks for itself.
		l.everAttached = true
		l.signalProgress()
	}
	return s
}

func (l *outputLog) detach(s *subscriber) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.subs, s)
	l.signalProgress()
}

func (l *outputLog) signalProgress() {
	if l.progress != nil {
		close(l.progress)
		l.progress = nil
	}
}

// step is what a reader does next.
type step struct {
	kind   stepKind
	stream streamKind
	off    uint64 // output: first byte's offset; gap: from
	data   []byte // output: a view of the ring, valid until consumed
	to     uint64 // gap: end, exclusive
	exit   exitStatus
	total  uint64
	wait   <-chan struct{}
}

type stepKind uint8

const (
	stepWait stepKind = iota
	stepOutput
	stepGap
	stepExit
)

// next hands the reader its next run of bytes (one pipe's, at most limit, not
// across the ring's end) as a view of the ring, or reports a gap, the end,
// or a channel to wait on. After an output step the reader must call consumed
// once it has copied the view out, and before it does anything that can
// block: the pump cannot reuse those bytes until then.
func (l *outputLog) next(s *subscriber, limit int) step {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.cursor < l.start {
		from := s.cursor
		s.cursor = l.start
		s.stalled = false
		l.signalProgress()
		return step{kind: stepGap, off: from, to: l.start}
	}
	if s.cursor < l.total {
		kind, segEnd := l.segmentAt(s.cursor)
		i := int(s.cursor % uint64(l.capacity))
		n := int(min(segEnd-s.cursor, uint64(limit), uint64(len(l.ring)-i)))
		s.reading = true
		return step{kind: stepOutput, stream: kind, off: s.cursor, data: l.ring[i : i+n : i+n]}
	}
	if l.done {
		return step{kind: stepExit, exit: l.exit, total: l.total}
	}
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return step{kind: stepWait, wait: l.wake}
}

// consumed releases the view the last output step handed out and moves the
// reader past it. The ring may have been replaced while the reader held the
// view (it grows on demand); the view stayed valid because the pump only
// writes to the new one.
func (l *outputLog) consumed(s *subscriber, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.reading = false
	s.cursor += uint64(n)
	l.signalProgress()
}

// segmentAt returns the pipe of the byte at off and where its run ends.
func (l *outputLog) segmentAt(off uint64) (streamKind, uint64) {
	segs := l.segs[l.segHead:]
	i := sort.Search(len(segs), func(i int) bool { return segs[i].off > off }) - 1
	if i < 0 {
		i = 0
	}
	end := l.total
	if i+1 < len(segs) {
		end = segs[i+1].off
	}
	return segs[i].kind, end
}

// outcome is the head of each stream and the exit status, for poll and ack.
// The heads are snapshots: their bytes never change, whatever the pump
// appends later.
func (l *outputLog) outcome() (stdout, stderr head, st exitStatus, done bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head[stdoutKind].snapshot(), l.head[stderrKind].snapshot(), l.exit, l.done
}

// head is the first bytes of one stream, up to the head cap, kept in chunks
// that double up to headChunkMax. Growing it never copies what it holds:
// append's regrowth would copy a multi-MiB head several times over and leave
// every old array behind as garbage, which is RSS until the next GC.
type head struct {
	chunks [][]byte
	n      int
}

const headChunkMax = 1 << 20

// write appends p; the head never grows past limit.
func (h *head) write(p []byte, limit int) {
	for len(p) > 0 {
		k := len(h.chunks)
		if k == 0 || len(h.chunks[k-1]) == cap(h.chunks[k-1]) {
			size := 4096
			if k > 0 {
				size = min(2*cap(h.chunks[k-1]), headChunkMax)
			}
			h.chunks = append(h.chunks, make([]byte, 0, max(min(size, limit-h.n), 1)))
			k++
		}
		last := h.chunks[k-1]
		m := min(len(p), cap(last)-len(last))
		h.chunks[k-1] = append(last, p[:m]...)
		h.n += m
		p = p[m:]
	}
}

// snapshot copies the chunk list, so later writes (which only append past
// each chunk's current length) do not show through.
func (h *head) snapshot() head {
	return head{chunks: append([][]byte(nil), h.chunks...), n: h.n}
}

// release drops the heads and the replay ring once an ack has handed the
// output over (the pumps are done by then, so nothing writes to either
// again). A stream attached later is told the released bytes are gone with a
// gap event, then gets the exit event; a reader still encoding from a view of
// the old ring keeps that array alive until it lets go. Kept until the entry
// is collected, the ring of every acked exec would hold up to
// stream_replay_bytes for exec_ttl_secs: six 256 MiB streams in a row left
// 6 MiB resident for fifteen minutes.
func (l *outputLog) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.head = [2]head{}
	l.ring = nil
	l.start = l.total
	l.segs = nil
	l.segHead = 0
}
