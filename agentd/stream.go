package agentd

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/internal/frames"
)

// maxEventBytes is the most raw output one SSE output event carries; the
// base64 of it stays under 64 KiB, well inside a client's line buffer.
const maxEventBytes = 48 << 10

// An attached stream builds whole events in one buffer, base64-encoding
// straight from the output ring into it, and hands the buffer to the
// connection in one write (one HTTP chunk) once it cannot take another full
// event or the reader has caught up. Large writes matter: each write is a
// chunk header, a syscall or two and a wakeup of the client.
const (
	streamBufferBytes = 256 << 10
	// eventFrameBytes bounds one output event's frame: the fixed text, the
	// longest offset and the base64 of maxEventBytes.
	eventFrameBytes = len("event: output\nid: 18446744073709551615\ndata: {\"offset\":18446744073709551615,\"stream\":\"stdout\",\"output\":\"\"}\n\n") + (maxEventBytes+2)/3*4
	// smallStreamBytes is where a stream's buffer starts: most streams carry
	// a few lines, and fifty of them at full size would be RSS for nothing.
	smallStreamBytes = 4 << 10
)

// streamBuffers is one attached stream's working memory, pooled so an attach
// costs no allocation per event (or per byte) once warm.
type streamBuffers struct {
	out []byte
}

var streamPool = sync.Pool{New: func() any { return &streamBuffers{out: make([]byte, 0, smallStreamBytes)} }}

// room makes sure n more bytes fit in out, doubling it up to its full size
// as the output needs.
func (b *streamBuffers) room(n int) {
	if need := len(b.out) + n; need > cap(b.out) {
		grown := make([]byte, len(b.out), max(need, min(2*cap(b.out), streamBufferBytes)))
		copy(grown, b.out)
		b.out = grown
	}
}

// frameChunkBytes is the most raw output one binary frame carries: half the
// stream buffer, so a buffer holds at least one whole frame and is handed to
// the connection at 128-256 KiB.
const frameChunkBytes = streamBufferBytes / 2

// settledBytes is a write that leaves nothing of its own or earlier in
// net/http's buffers: more than the response's 2 KiB buffer plus the
// connection's 4 KiB one.
const settledBytes = 8 << 10

// runHeaderHold is how long the run route holds its headers back at the
// first wait for output: /bin/true is spawned, exits and is reaped in about
// 1-2 ms here, and its answer then leaves in one write instead of three (the
// headers, the exit frame, the body's end), each a wakeup of the client. A
// caller waiting for the headers before feeding stdin (Stream.Connect) waits
// at most this much longer.
const runHeaderHold = 5 * time.Millisecond

// ExecStream follows an exec's output as SSE (or binary frames, when the
// Accept header asks for them) from ?offset= on. It only reads the exec:
// attaching, detaching or a dropped connection never touch the command. The
// body ends right after the exit event, so a body that ends without one
// means the connection broke, not the command.
func (s *Server) ExecStream(w http.ResponseWriter, r *http.Request, id protocol.ExecID, params protocol.ExecStreamParams) {
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	// The offset query wins; without it, the Last-Event-ID a standard
	// EventSource sends on reconnect is the offset its last event ended at.
	from := uint64(0)
	switch {
	case params.Offset != nil:
		from = *params.Offset
	case params.LastEventID != nil:
		from = *params.LastEventID
	}
	s.follow(w, r, e, from, false)
}

// acceptsFrames reports whether the request's Accept names the binary frame
// media type with a non-zero quality. Anything else gets SSE, as protocol v1
// always answered.
func acceptsFrames(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(mt), protocol.FramesMediaType) {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(k, "q") {
					if q, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil && q <= 0 {
						return false
					}
				}
			}
			return true
		}
	}
	return false
}

// follow writes e's events from offset from, as SSE or binary frames, until
// the exit event, the client leaving or shutdown, and reports whether the
// exit event was written to a connection not known to be gone: the run route
// releases the exec only then. With run, the first flush waits up to
// runHeaderHold for the exec to end, so a short command's whole answer
// (headers, output, exit, the body's end) leaves in one write.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, e *execEntry, from uint64, run bool) bool {
	asFrames := acceptsFrames(r)
	h := w.Header()
	if asFrames {
		h.Set("Content-Type", protocol.FramesMediaType)
	} else {
		h.Set("Content-Type", "text/event-stream")
	}
	h.Set("Vary", "Accept")
	h.Set("Cache-Control", "no-cache")
	// A buffering proxy would otherwise hold events until its buffer fills,
	// turning a live stream into a batch delivered at exit.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	buf := streamPool.Get().(*streamBuffers)
	defer func() {
		if cap(buf.out) > streamBufferBytes {
			buf.out = nil // a one-off large frame (an exit event); not worth keeping
		}
		buf.out = buf.out[:0]
		streamPool.Put(buf)
	}()
	sub := e.log.attach(from)
	sent := false // the exit event was handed to the connection
	defer func() {
		if sent {
			e.log.detach(sub)
		} else {
			// The connection ended first: hold its bytes for a reattach.
			e.log.detachEarly(sub)
		}
	}()

	// write hands everything built so far to the connection as one chunk.
	// settled is true while everything written is on the wire but the
	// chunk's closing CRLF: a write of at least settledBytes passes both of
	// net/http's buffers (and pushes out whatever they held before it).
	settled := false
	write := func() bool {
		if len(buf.out) == 0 {
			return true
		}
		_, err := w.Write(buf.out)
		settled = len(buf.out) >= settledBytes
		buf.out = buf.out[:0]
		return err == nil
	}
	// flush pushes out what is buffered before a wait. After a large write
	// only the 2-byte CRLF is left: a flush would send it alone, one more
	// syscall, segment and wakeup of the client for no payload (a chunked
	// reader hands over a chunk's bytes without waiting for its CRLF, which
	// goes out with the next chunk or the body's end).
	flush := func() bool {
		if !write() {
			return false
		}
		if settled {
			return true
		}
		settled = true
		return rc.Flush() == nil
	}
	chunk, frameMax := maxEventBytes, eventFrameBytes
	if asFrames {
		chunk, frameMax = frameChunkBytes, frames.HeaderBytes+frameChunkBytes
	}
	// No flush up front: the headers go out with the first events, or at
	// the first wait. A short command's whole stream (headers, its output,
	// the exit event and the chunked terminator) then leaves in one write
	// when the handler returns.
	keepalive := time.NewTimer(s.cfg.SSEKeepalive)
	defer keepalive.Stop()
	var hold time.Duration
	if run {
		hold = runHeaderHold
	}
	for {
		if len(buf.out)+frameMax > streamBufferBytes && !write() {
			return false
		}
		st := e.log.next(sub, chunk)
		switch st.kind {
		case stepOutput:
			// Encoding from the ring holds the pump off these bytes; nothing
			// between next and consumed may block.
			if asFrames {
				buf.frame(st.off, st.stream, st.data)
			} else {
				buf.output(st.off, st.stream, st.data)
			}
			e.log.consumed(sub, len(st.data))
			continue
		case stepGap:
			s.log.Debug("stream reader missed bytes", "exec_id", e.id, "from", st.off, "to", st.to)
			if asFrames {
				buf.gapFrame(st.off, st.to)
			} else {
				buf.gap(st.off, st.to)
			}
			continue
		case stepExit:
			if asFrames {
				buf.exitFrame(st.exit, st.total)
			} else {
				buf.exit(st.exit, st.total)
			}
			// The server flushes when the handler returns, together with
			// the body's terminating chunk. A client that went away before
			// that is seen by the request's context (the server reads the
			// connection in the background); a flush here would catch no
			// more and cost a write and a wakeup of the client per exec.
			sent = true
			return write() && r.Context().Err() == nil
		}
		if hold > 0 {
			// The run route's first wait: a short command ends within it.
			t := time.NewTimer(hold)
			hold = 0
			select {
			case <-st.wait:
				t.Stop()
				continue
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return false
			case <-s.stopping:
				t.Stop()
				return false
			}
		}
		// Nothing to send right now: push out what is buffered, then wait.
		if !flush() {
			return false
		}
		if !keepalive.Stop() {
			select {
			case <-keepalive.C:
			default:
			}
		}
		keepalive.Reset(s.cfg.SSEKeepalive)
	wait:
		select {
		case <-st.wait:
		case <-keepalive.C:
			// A silent command (a harness thinking, a build linking) must not
			// look like a dead connection to whatever sits in between.
			if asFrames {
				buf.out = frames.AppendHeader(buf.out, protocol.FrameKeepalive, 0, 0)
			} else {
				buf.out = append(buf.out, ":\n\n"...)
			}
			if !flush() {
				return false
			}
			keepalive.Reset(s.cfg.SSEKeepalive)
			goto wait
		case <-r.Context().Done():
			return false
		case <-s.stopping:
			return false
		}
	}
}

// frame appends one stdout or stderr frame carrying data as it is.
func (b *streamBuffers) frame(off uint64, kind streamKind, data []byte) {
	b.room(frames.HeaderBytes + len(data))
	typ := protocol.FrameStdout
	if kind == stderrKind {
		typ = protocol.FrameStderr
	}
	b.out = frames.Append(b.out, typ, off, data)
}

// gapFrame appends a gap frame; its payload is the gap event's JSON.
func (b *streamBuffers) gapFrame(from, to uint64) {
	b.room(128)
	k := len(b.out)
	out := frames.AppendHeader(b.out, protocol.FrameGap, from, 0)
	out = append(out, "{\"from\":"...)
	out = strconv.AppendUint(out, from, 10)
	out = append(out, ",\"to\":"...)
	out = strconv.AppendUint(out, to, 10)
	out = append(out, '}')
	binary.BigEndian.PutUint32(out[k+9:], uint32(len(out)-k-frames.HeaderBytes))
	b.out = out
}

// exitFrame appends the exit frame; its payload is the exit event's JSON.
func (b *streamBuffers) exitFrame(st exitStatus, total uint64) {
	data := exitJSON(st, total)
	b.out = frames.Append(b.out, protocol.FrameExit, total, data)
}

func exitJSON(st exitStatus, total uint64) []byte {
	data, _ := json.Marshal(protocol.ExitEvent{
		ExitCode:          st.code,
		Signal:            st.signal,
		Truncated:         st.truncated,
		WritersMayBeAlive: st.writersMayBeAlive,
		Offset:            total,
		Usage:             st.usage,
		OomKilled:         oomField(st),
	})
	return data
}

// Every event's id line carries the offset a reconnect resumes at: just
// past the event. It comes before the data line, so a frame still ends with
// its one data line and the client's parser reads it in place.

// output appends one output event carrying data, base64-encoded in place.
func (b *streamBuffers) output(off uint64, kind streamKind, data []byte) {
	n := base64.StdEncoding.EncodedLen(len(data))
	b.room(eventFrameBytes - (maxEventBytes+2)/3*4 + n)
	out := append(b.out, "event: "+protocol.EventOutput+"\nid: "...)
	out = strconv.AppendUint(out, off+uint64(len(data)), 10)
	out = append(out, "\ndata: {\"offset\":"...)
	out = strconv.AppendUint(out, off, 10)
	out = append(out, ",\"stream\":\""...)
	out = append(out, kind.String()...)
	out = append(out, "\",\"output\":\""...)
	k := len(out)
	out = out[:k+n]
	encodeBase64(out[k:], data)
	b.out = append(out, "\"}\n\n"...)
}

func (b *streamBuffers) gap(from, to uint64) {
	b.room(128)
	out := append(b.out, "event: "+protocol.EventGap+"\nid: "...)
	out = strconv.AppendUint(out, to, 10)
	out = append(out, "\ndata: {\"from\":"...)
	out = strconv.AppendUint(out, from, 10)
	out = append(out, ",\"to\":"...)
	out = strconv.AppendUint(out, to, 10)
	b.out = append(out, "}\n\n"...)
}

func (b *streamBuffers) exit(st exitStatus, total uint64) {
	data := exitJSON(st, total)
	b.out = append(b.out, "event: "+protocol.EventExit+"\nid: "...)
	b.out = strconv.AppendUint(b.out, total, 10)
	b.out = append(b.out, "\ndata: "...)
	b.out = append(b.out, data...)
	b.out = append(b.out, "\n\n"...)
}

// oomField is oom_killed as the wire carries it: present once usage is.
func oomField(st exitStatus) *bool {
	if st.usage == nil {
		return nil
	}
	v := st.oomKilled
	return &v
}
