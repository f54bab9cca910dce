package agentd

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// maxEventBytes is the most raw output one SSE output event carries; the
// base64 of it stays under 64 KiB.
const maxEventBytes = 48 << 10

// streamBuffers are one attached stream's working memory, pooled so an attach
// costs no allocation per event (or per byte) once warm.
type streamBuffers struct {
	raw []byte
	enc []byte
	num []byte
	bw  *bufio.Writer
}

var streamPool = sync.Pool{New: func() any {
	return &streamBuffers{
		raw: make([]byte, maxEventBytes),
		enc: make([]byte, base64.StdEncoding.EncodedLen(maxEventBytes)),
		num: make([]byte, 0, 24),
		bw:  bufio.NewWriterSize(nil, 128<<10),
	}
}}

// ExecStream follows an exec's output as SSE from ?offset= on. It only reads
// the exec: attaching, detaching or a dropped connection never touch the
// command. The body ends right after the exit event, so a body that ends
// without one means the connection broke, not the command.
func (s *Server) ExecStream(w http.ResponseWriter, r *http.Request, id protocol.ExecID, params protocol.ExecStreamParams) {
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	from := uint64(0)
	if params.Offset != nil {
		from = *params.Offset
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	// A buffering proxy would otherwise hold events until its buffer fills,
	// turning a live stream into a batch delivered at exit.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	buf := streamPool.Get().(*streamBuffers)
	buf.bw.Reset(w)
	defer func() {
		buf.bw.Reset(nil)
		streamPool.Put(buf)
	}()
	sub := e.log.attach(from)
	defer e.log.detach(sub)

	flush := func() bool {
		if buf.bw.Flush() != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !flush() {
		return
	}
	keepalive := time.NewTimer(s.cfg.SSEKeepalive)
	defer keepalive.Stop()
	for {
		st := e.log.next(sub, buf.raw)
		switch st.kind {
		case stepOutput:
			if !buf.output(st.off, st.stream, buf.raw[:st.n]) {
				return
			}
			continue
		case stepGap:
			s.log.Debug("stream reader missed bytes", "exec_id", id, "from", st.off, "to", st.to)
			if !buf.gap(st.off, st.to) {
				return
			}
			continue
		case stepExit:
			buf.exit(st.exit, st.total)
			flush()
			return
		}
		// Nothing to send right now: push out what is buffered, then wait.
		if !flush() {
			return
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
			if _, err := buf.bw.WriteString(":\n\n"); err != nil || !flush() {
				return
			}
			keepalive.Reset(s.cfg.SSEKeepalive)
			goto wait
		case <-r.Context().Done():
			return
		case <-s.stopping:
			return
		}
	}
}

func (b *streamBuffers) output(off uint64, kind streamKind, data []byte) bool {
	bw := b.bw
	bw.WriteString("event: " + protocol.EventOutput + "\ndata: {\"offset\":")
	b.num = strconv.AppendUint(b.num[:0], off, 10)
	bw.Write(b.num)
	bw.WriteString(",\"stream\":\"")
	bw.WriteString(kind.String())
	bw.WriteString("\",\"output\":\"")
	n := base64.StdEncoding.EncodedLen(len(data))
	encodeBase64(b.enc[:n], data)
	bw.Write(b.enc[:n])
	_, err := bw.WriteString("\"}\n\n")
	return err == nil
}

func (b *streamBuffers) gap(from, to uint64) bool {
	bw := b.bw
	bw.WriteString("event: " + protocol.EventGap + "\ndata: {\"from\":")
	b.num = strconv.AppendUint(b.num[:0], from, 10)
	bw.Write(b.num)
	bw.WriteString(",\"to\":")
	b.num = strconv.AppendUint(b.num[:0], to, 10)
	bw.Write(b.num)
	_, err := bw.WriteString("}\n\n")
	return err == nil
}

func (b *streamBuffers) exit(st exitStatus, total uint64) {
	data, _ := json.Marshal(protocol.ExitEvent{
		ExitCode:          st.code,
		Signal:            st.signal,
		Truncated:         st.truncated,
		WritersMayBeAlive: st.writersMayBeAlive,
		Offset:            total,
	})
	b.bw.WriteString("event: " + protocol.EventExit + "\ndata: ")
	b.bw.Write(data)
	b.bw.WriteString("\n\n")
}
