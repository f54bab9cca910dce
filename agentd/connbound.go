package agentd

import (
	"container/list"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// connTable holds every open connection in accept order and keeps their
// number at or under the bound (limits.max_connections, never more than half
// the descriptor limit). Past the bound a newcomer is still accepted and room
// is made by closing someone else: 21,000 idle unauthenticated connections
// once filled the descriptor table, and an authenticated health then waited
// 21.8 s in the accept backoff. Which connection goes:
//
//  1. the oldest one outside a handler that never carried an authenticated
//     request (new, idle, or still sending its headers);
//  2. else the oldest idle one that did;
//  3. else, every held connection being inside a handler, the newcomer.
//
// So a flood can only ever evict itself, and an authenticated request gets in.
type connTable struct {
	bound int
	mu    sync.Mutex
	conns list.List // of *connSlot, oldest first
	shed  atomic.Int64
}

// connSlot is one connection's place in the table.
type connSlot struct {
	elem *list.Element
	// authed is set once a request on this connection passed the bearer gate.
	authed atomic.Bool
	// inHandler is set while a handler runs a request of this connection.
	inHandler atomic.Bool
	closer    func() error
}

// connBound is the running bound: configured, capped at half RLIMIT_NOFILE so
// the other half stays for files, pipes and terminals.
func connBound(configured int64) int {
	bound := max(configured, 1)
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur != unix.RLIM_INFINITY {
		bound = min(bound, max(int64(rl.Cur/2), 1))
	}
	return int(bound)
}

// admit records a new connection, closing another (or reporting that this one
// must be closed) when the table is full. closer closes the new connection.
func (t *connTable) admit(closer func() error) (*connSlot, bool) {
	slot := &connSlot{closer: closer}
	var victim *connSlot
	t.mu.Lock()
	if t.conns.Len() >= t.bound {
		victim = t.pickVictim()
		if victim == nil {
			t.mu.Unlock()
			t.shed.Add(1)
			return nil, false
		}
		t.conns.Remove(victim.elem)
		victim.elem = nil
	}
	slot.elem = t.conns.PushBack(slot)
	t.mu.Unlock()
	if victim != nil {
		t.shed.Add(1)
		_ = victim.closer()
	}
	return slot, true
}

// pickVictim is the connection to close for a newcomer, or nil. Called with mu held.
func (t *connTable) pickVictim() *connSlot {
	var idleAuthed *connSlot
	for e := t.conns.Front(); e != nil; e = e.Next() {
		s := e.Value.(*connSlot)
		if s.inHandler.Load() {
			continue
		}
		if !s.authed.Load() {
			return s
		}
		if idleAuthed == nil {
			idleAuthed = s
		}
	}
	return idleAuthed
}

// release removes a closed connection; closing twice releases once.
func (t *connTable) release(s *connSlot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.elem != nil {
		t.conns.Remove(s.elem)
		s.elem = nil
	}
}

// open is the number of connections held.
func (t *connTable) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conns.Len()
}
