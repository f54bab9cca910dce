package agentd

// A reader that drops mid-stream leaves a ghost: a subscriber nobody reads
// through, holding the pump off the bytes that reader had not been sent, so
// the stream can reattach at its cursor and lose nothing. The common cause
// is a suspend: the whole guest is frozen under an open stream, the client
// gives the connection up, and on the thaw the command carries on at full
// speed while the client is still learning that the VM runs again; without
// a ghost a fast writer overran the replay window before the reattach and
// the reader got a gap (client/sandbox TestStreamAcrossCallerSuspendLosesNoByte).
// A ghost is bounded the way a live reader is: it makes no progress, so it
// holds the pump at most one stream_stall_secs period once the ring is full,
// and then it is dropped.

// ghostSlack is how far behind a dropped reader's cursor its ghost is put:
// bytes the reader had copied out (its cursor moved) but which may never
// have reached the client, at most one stream buffer being encoded and one
// being written into a connection already gone.
const ghostSlack = 2 * streamBufferBytes

// maxGhosts bounds the ghosts one exec keeps: readers that drop and never
// come back (a viewer opened and closed over and over) must not grow the
// log without end, while a few readers reattaching at once all keep theirs.
const maxGhosts = 8

func (l *outputLog) ghosts() int {
	n := 0
	for s := range l.subs {
		if s.ghost {
			n++
		}
	}
	return n
}

// slack is ghostSlack within half the replay window, so a small window
// still lets the writer run ahead of a ghost.
func (l *outputLog) slack() uint64 {
	return uint64(min(ghostSlack, l.capacity/2))
}

// detachEarly removes a reader whose connection ended before it was sent
// the exit event, leaving a ghost in its place while the exec runs.
func (l *outputLog) detachEarly(s *subscriber) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.subs, s)
	if !l.done && l.stall > 0 && !s.stalled && l.ghosts() < maxGhosts {
		cursor := s.cursor - min(s.cursor, l.slack())
		// mark differs from cursor, so the ghost lives at least one whole
		// stall period however far the pump's current period has run.
		g := &subscriber{cursor: max(cursor, l.start), ghost: true, origin: s.cursor}
		g.mark = g.cursor + 1
		l.subs[g] = struct{}{}
	}
	l.signalProgress()
}

// claimGhost drops the ghost a reader attaching at from takes over: the one
// whose reader dropped nearest from, within the replay window (a reattach
// resumes where its client's bytes ended, a little behind where agentd's
// copy had got to). Called with l.mu held.
func (l *outputLog) claimGhost(from uint64) {
	var best *subscriber
	var bestDist uint64
	for s := range l.subs {
		if !s.ghost {
			continue
		}
		d := max(s.origin, from) - min(s.origin, from)
		if d <= uint64(l.capacity) && (best == nil || d < bestDist) {
			best, bestDist = s, d
		}
	}
	if best != nil {
		delete(l.subs, best)
	}
}

// dropStalledGhosts forgets ghosts the pump has left behind. Called with
// l.mu held.
func (l *outputLog) dropStalledGhosts() {
	for s := range l.subs {
		if s.ghost && s.stalled {
			delete(l.subs, s)
		}
	}
}
