package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// GET /v1/fs/watch follows a directory's changes through inotify, by way of
// fsnotify (the Go field's standard wrapper: it owns the inotify descriptor,
// decodes its variable-length records and handles IN_Q_OVERFLOW). Between
// the kernel and the connection sits one bounded queue per watch; a reader
// too slow to keep it from filling loses the events that did not fit, and
// learns which by a gap event, as an exec stream's reader learns of lost
// output.

// watchQueue is the bounded queue between the inotify reader and the SSE
// writer. Every event gets a sequence number as it arrives, kept or not, so
// the numbers a gap covers are exactly the ones dropped.
type watchQueue struct {
	mu      sync.Mutex
	events  []queuedEvent
	cap     int
	next    uint64 // the sequence number the next arrival gets
	dropped uint64 // arrivals dropped since the last take, ending at next
	wake    chan struct{}
}

// queuedEvent is one kept event and how many arrivals were dropped just
// before it (the gap to report first).
type queuedEvent struct {
	ev            protocol.WatchEvent
	droppedBefore uint64
}

func newWatchQueue(capacity int) *watchQueue {
	return &watchQueue{cap: capacity, wake: make(chan struct{}, 1)}
}

// push queues one event, or counts it dropped when the queue is full.
func (q *watchQueue) push(op protocol.WatchOp, path string) {
	q.mu.Lock()
	seq := q.next
	q.next++
	if len(q.events) >= q.cap {
		q.dropped++
	} else {
		q.events = append(q.events, queuedEvent{ev: protocol.WatchEvent{Seq: seq, Op: op, Path: path}, droppedBefore: q.dropped})
		q.dropped = 0
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take hands over everything queued, plus a trailing gap (from, to) when
// arrivals were dropped after the last kept one.
func (q *watchQueue) take(into []queuedEvent) ([]queuedEvent, *protocol.GapEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	into = append(into[:0], q.events...)
	q.events = q.events[:0]
	var gap *protocol.GapEvent
	if q.dropped > 0 {
		gap = &protocol.GapEvent{From: q.next - q.dropped, To: q.next}
		q.dropped = 0
	}
	return into, gap
}

// FsWatch serves the watch stream.
func (s *Server) FsWatch(w http.ResponseWriter, r *http.Request, p protocol.FsWatchParams) {
	if bad := opPathFault("path", p.Path); bad != "" {
		writeError(w, taxonomy.SlugMalformedRequest, bad)
		return
	}
	st, err := os.Stat(p.Path)
	if err != nil {
		fsOpError(w, "watch "+p.Path, unwrapPathError(err))
		return
	}
	if !st.IsDir() {
		writeError(w, taxonomy.SlugNotADirectory, "watch "+p.Path+": only a directory can be watched")
		return
	}
	recursive := p.Recursive != nil && *p.Recursive
	// Each watch holds an inotify instance from a per-uid pool (128 by
	// default) the guest's own services share: 100 uncapped watches left a
	// root process on the host able to open 28.
	select {
	case s.watchSlots <- struct{}{}:
		defer func() { <-s.watchSlots }()
	default:
		writeError(w, taxonomy.SlugAtCapacity, fmt.Sprintf("%d watches are open (limits.max_watches); retry when one ends", cap(s.watchSlots)))
		return
	}
	wt, err := fsnotify.NewBufferedWatcher(256)
	if err != nil {
		fsOpError(w, "watch "+p.Path+": inotify", err)
		return
	}
	defer wt.Close()
	dirs := 0
	add := func(dir string) error {
		if err := wt.Add(dir); err != nil {
			return err
		}
		dirs++
		return nil
	}
	if recursive {
		// WalkDir takes a root that is a symlink as a leaf and never descends;
		// with a trailing slash the kernel resolves it, as the Stat above did.
		// Below the root, links are not followed (no loops).
		walkRoot := p.Path
		if !strings.HasSuffix(walkRoot, "/") {
			walkRoot += "/"
		}
		err = filepath.WalkDir(walkRoot, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if path == walkRoot {
					return err
				}
				return nil // vanished or unreadable below the root: not watched
			}
			if d.IsDir() {
				return add(path)
			}
			return nil
		})
	} else {
		err = add(p.Path)
	}
	if err != nil {
		s.log.Warn("watch setup failed", "path", p.Path, "err", err)
		fsOpError(w, "watch "+p.Path+" (inotify watches exhausted?)", unwrapPathError(err))
		return
	}

	q := newWatchQueue(protocol.DefaultWatchQueueEvents)
	root := filepath.Clean(p.Path)
	rootGone := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	go func() {
		var goneOnce sync.Once
		for {
			select {
			case <-done:
				return
			case ev, ok := <-wt.Events:
				if !ok {
					return
				}
				op, keep := watchOp(ev.Op)
				if !keep {
					continue
				}
				if recursive && op == protocol.WatchOpCreate {
					if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
						_ = wt.Add(ev.Name) // a watch limit hit here is logged by nobody; the subtree goes unreported
					}
				}
				q.push(op, ev.Name)
				if (op == protocol.WatchOpRemove || op == protocol.WatchOpRename) && filepath.Clean(ev.Name) == root {
					goneOnce.Do(func() { close(rootGone) })
				}
			case err, ok := <-wt.Errors:
				if !ok {
					return
				}
				if errors.Is(err, fsnotify.ErrEventOverflow) {
					// The kernel's own queue overflowed: an unknown number of
					// events is gone. Counted as one dropped event so the
					// reader sees a gap.
					q.mu.Lock()
					q.next++
					q.dropped++
					q.mu.Unlock()
					select {
					case q.wake <- struct{}{}:
					default:
					}
					continue
				}
				s.log.Warn("watch error", "path", p.Path, "err", err)
			}
		}
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var buf []byte
	emit := func(event string, id uint64, withID bool, data any) {
		b, _ := json.Marshal(data)
		buf = append(buf, "event: "...)
		buf = append(buf, event...)
		if withID {
			buf = append(buf, "\nid: "...)
			buf = strconv.AppendUint(buf, id, 10)
		}
		buf = append(buf, "\ndata: "...)
		buf = append(buf, b...)
		buf = append(buf, "\n\n"...)
	}
	flush := func() bool {
		if len(buf) == 0 {
			return true
		}
		_, err := w.Write(buf)
		buf = buf[:0]
		return err == nil && rc.Flush() == nil
	}
	emit("ready", 0, false, protocol.WatchReady{Path: p.Path, Recursive: recursive, Directories: uint(dirs)})
	if !flush() {
		return
	}
	keepalive := time.NewTicker(s.cfg.SSEKeepalive)
	defer keepalive.Stop()
	var batch []queuedEvent
	gone := false
	for {
		select {
		case <-q.wake:
		case <-rootGone:
			gone = true
		case <-keepalive.C:
			if _, err := w.Write([]byte(":\n\n")); err != nil || rc.Flush() != nil {
				return
			}
			continue
		case <-r.Context().Done():
			return
		case <-s.stopping:
			return
		}
		var gap *protocol.GapEvent
		batch, gap = q.take(batch)
		for _, qe := range batch {
			if n := qe.droppedBefore; n > 0 {
				emit("gap", qe.ev.Seq, true, protocol.GapEvent{From: qe.ev.Seq - n, To: qe.ev.Seq})
			}
			emit("fs", qe.ev.Seq+1, true, qe.ev)
		}
		if gap != nil {
			emit("gap", gap.To, true, *gap)
		}
		if !flush() {
			return
		}
		if gone {
			return
		}
	}
}

// watchOp maps an fsnotify operation to the wire's, dropping chmod (an
// attribute change, which the protocol does not report).
func watchOp(op fsnotify.Op) (protocol.WatchOp, bool) {
	switch {
	case op.Has(fsnotify.Create):
		return protocol.WatchOpCreate, true
	case op.Has(fsnotify.Write):
		return protocol.WatchOpWrite, true
	case op.Has(fsnotify.Remove):
		return protocol.WatchOpRemove, true
	case op.Has(fsnotify.Rename):
		return protocol.WatchOpRename, true
	}
	return "", false
}
