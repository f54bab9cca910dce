package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/frames"
)

// EventKind is the kind of one SSE event from an exec stream.
type EventKind uint8

// The three event kinds agentd sends; any other event name is dropped.
const (
	EventOutput EventKind = iota + 1 // a chunk of stdout or stderr
	EventGap                         // bytes the reader will never see
	EventExit                        // the exec finished; always last
)

func (k EventKind) String() string {
	switch k {
	case EventOutput:
		return protocol.EventOutput
	case EventGap:
		return protocol.EventGap
	case EventExit:
		return protocol.EventExit
	}
	return "unknown"
}

// Event is one decoded stream event. For EventOutput, Data is the decoded
// chunk and is only valid until the next call to Stream.Next: the stream
// reuses one buffer so reading does not allocate per chunk.
type Event struct {
	Kind   EventKind
	Stream protocol.StreamKind // EventOutput: stdout or stderr
	Offset uint64              // EventOutput: offset of Data[0] in the shared byte space
	Data   []byte              // EventOutput
	Gap    protocol.GapEvent   // EventGap: [From, To) is lost
	Exit   protocol.ExitEvent  // EventExit
}

// sseParser splits an SSE body into frames and decodes agentd's three event
// payloads. Lines are read in place from a bufio.Reader. A frame whose one
// data line is followed at once by the blank line (every frame agentd sends)
// is parsed where it lies, in the reader's buffer; any other frame's data is
// assembled in a reused buffer. Base64 is decoded into another reused
// buffer, so steady-state parsing does no allocation per byte or per event.
type sseParser struct {
	r    *bufio.Reader
	long []byte // a line longer than the bufio buffer, assembled here
	data []byte // the current frame's data field, when it is not in place
	out  []byte // decoded output bytes
	name EventKind
	// sawName is true when the frame named an event at all; a frame with an
	// unknown name is dropped, while a nameless frame is SSE's default
	// "message", which agentd does not send and is dropped too.
	sawName bool
	unknown bool
	hasData bool
}

const sseBufferSize = 256 << 10

func newSSEParser(r io.Reader) *sseParser {
	return &sseParser{r: bufio.NewReaderSize(r, sseBufferSize)}
}

func (p *sseParser) reset(r io.Reader) {
	p.r.Reset(r)
	p.resetFrame()
}

func (p *sseParser) resetFrame() {
	p.data, p.name, p.sawName, p.unknown, p.hasData = p.data[:0], 0, false, false, false
}

// readLine returns the next line without its terminator. The slice is valid
// until the next call.
func (p *sseParser) readLine() ([]byte, error) {
	line, err := p.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		p.long = append(p.long[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = p.r.ReadSlice('\n')
			p.long = append(p.long, line...)
		}
		line = p.long
	}
	if err != nil {
		// A final line without a newline is an incomplete frame: the body was
		// cut. Reporting it as a clean end would make a cut look finished.
		if err == io.EOF && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

var (
	fieldEvent = []byte("event")
	fieldData  = []byte("data")
	nameOutput = []byte(protocol.EventOutput)
	nameGap    = []byte(protocol.EventGap)
	nameExit   = []byte(protocol.EventExit)
)

// nextFrame reads until a blank line completes a frame with a known event
// name and data, and returns its kind and data. Comments (keepalives),
// unknown events, and id/retry fields are skipped. At the end of the body it
// returns io.EOF (clean frame boundary) or io.ErrUnexpectedEOF.
func (p *sseParser) nextFrame() (EventKind, []byte, error) {
	for {
		line, err := p.readLine()
		if err != nil {
			if err == io.EOF && (p.hasData || p.sawName) {
				err = io.ErrUnexpectedEOF
			}
			p.resetFrame()
			return 0, nil, err
		}
		if len(line) == 0 {
			kind, ok := p.name, p.sawName && !p.unknown && p.hasData
			data := p.data
			p.resetFrame()
			if ok {
				return kind, data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment: agentd's keepalive
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch {
		case bytes.Equal(field, fieldEvent):
			p.sawName = true
			switch {
			case bytes.Equal(value, nameOutput):
				p.name, p.unknown = EventOutput, false
			case bytes.Equal(value, nameGap):
				p.name, p.unknown = EventGap, false
			case bytes.Equal(value, nameExit):
				p.name, p.unknown = EventExit, false
			default:
				p.unknown = true
			}
		case bytes.Equal(field, fieldData):
			if !p.hasData && p.sawName && !p.unknown && p.endsFrame() {
				// The frame's only data line: hand it out in place. It stays
				// valid until the next read, and the caller is done with it
				// by then.
				kind := p.name
				p.resetFrame()
				return kind, value, nil
			}
			if p.hasData {
				p.data = append(p.data, '\n')
			}
			p.data = append(p.data, value...)
			p.hasData = true
		}
	}
}

// endsFrame consumes the blank line that ends the frame if it is already
// in the reader's buffer, so reading it cannot move the line just read.
// When it is not buffered yet (or another line comes first) it reports
// false and reads nothing: the caller copies the data and reads on.
func (p *sseParser) endsFrame() bool {
	n := p.r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := p.r.Peek(min(n, 2)) // within the buffered bytes: no read, no move
	switch {
	case b[0] == '\n':
		_, _ = p.r.Discard(1)
		return true
	case len(b) == 2 && b[0] == '\r' && b[1] == '\n':
		_, _ = p.r.Discard(2)
		return true
	}
	return false
}

// next reads the next known event and decodes its payload.
func (p *sseParser) next(ev *Event) error {
	kind, data, err := p.nextFrame()
	if err != nil {
		return err
	}
	*ev = Event{Kind: kind}
	switch kind {
	case EventOutput:
		off, stream, b64, ok := scanOutput(data)
		if ok {
			if n, err := p.decode(b64, b64Decode); err == nil {
				ev.Offset, ev.Stream, ev.Data = off, stream, p.out[:n]
				return nil
			}
		}
		// The slow path: anything the scanner declined, including a payload
		// whose output has JSON escapes, goes through encoding/json.
		var o protocol.OutputEvent
		if err := json.Unmarshal(data, &o); err != nil {
			return malformedEvent(kind, err)
		}
		if o.Stream != protocol.StreamStdout && o.Stream != protocol.StreamStderr {
			return malformedEvent(kind, fmt.Errorf("stream %q is neither stdout nor stderr", o.Stream))
		}
		n, err := p.decode([]byte(o.Output), base64.StdEncoding.Decode)
		if err != nil {
			return malformedEvent(kind, fmt.Errorf("output is not base64: %w", err))
		}
		ev.Offset, ev.Stream, ev.Data = o.Offset, o.Stream, p.out[:n]
	case EventGap:
		if err := json.Unmarshal(data, &ev.Gap); err != nil {
			return malformedEvent(kind, err)
		}
		if ev.Gap.To < ev.Gap.From {
			return malformedEvent(kind, fmt.Errorf("gap [%d, %d) ends before it starts", ev.Gap.From, ev.Gap.To))
		}
	case EventExit:
		if err := json.Unmarshal(data, &ev.Exit); err != nil {
			return malformedEvent(kind, err)
		}
	}
	return nil
}

// errMalformed marks a frame agentd should never send; the stream fails
// rather than reconnecting into the same bytes.
var errMalformed = errors.New("malformed SSE event")

func malformedEvent(kind EventKind, err error) error {
	return Errorf(taxonomy.KindProtocol, "", "execStream: a %s event is malformed: %w", kind, errors.Join(errMalformed, err))
}

// scanOutput is the allocation-free fast path for the one hot payload,
// {"offset":N,"stream":"stdout","output":"<base64>"} in any key order. It
// gives up (ok false) on anything else — escapes, unknown keys, odd
// whitespace — and the caller falls back to encoding/json.
func scanOutput(b []byte) (offset uint64, stream protocol.StreamKind, b64 []byte, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, "", nil, false
	}
	var seen uint8
	for {
		i = skipWS(b, i+1)
		if i >= len(b) || b[i] != '"' {
			return 0, "", nil, false
		}
		key, j, good := scanString(b, i)
		if !good {
			return 0, "", nil, false
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return 0, "", nil, false
		}
		i = skipWS(b, i+1)
		switch string(key) { // the compiler does not allocate for this conversion
		case "offset":
			if seen&1 != 0 {
				return 0, "", nil, false
			}
			seen |= 1
			start := i
			var v uint64
			for i < len(b) && b[i] >= '0' && b[i] <= '9' {
				d := uint64(b[i] - '0')
				if v > (1<<64-1-d)/10 {
					return 0, "", nil, false
				}
				v = v*10 + d
				i++
			}
			if i == start || (b[start] == '0' && i-start > 1) {
				return 0, "", nil, false
			}
			offset = v
		case "stream":
			if seen&2 != 0 || i >= len(b) || b[i] != '"' {
				return 0, "", nil, false
			}
			seen |= 2
			s, j, good := scanString(b, i)
			if !good {
				return 0, "", nil, false
			}
			switch string(s) {
			case "stdout":
				stream = protocol.StreamStdout
			case "stderr":
				stream = protocol.StreamStderr
			default:
				return 0, "", nil, false
			}
			i = j
		case "output":
			if seen&4 != 0 || i >= len(b) || b[i] != '"' {
				return 0, "", nil, false
			}
			seen |= 4
			// Not validated byte by byte: the caller's base64 decode rejects
			// anything outside the alphabet, and falls back to encoding/json
			// when it does. That also lets the end be found without a pass
			// over the whole string: agentd sends output last, so once the
			// other two keys are read the string should end at the
			// payload's last quote. If it ends sooner, the slice holds a
			// quote, which is not base64, and the caller falls back.
			var end int
			if seen == 7 {
				end = bytes.LastIndexByte(b[i+1:], '"')
			} else {
				end = bytes.IndexByte(b[i+1:], '"')
			}
			if end < 0 {
				return 0, "", nil, false
			}
			b64, i = b[i+1:i+1+end], i+1+end+1
		default:
			return 0, "", nil, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, "", nil, false
		}
		if b[i] == '}' {
			if seen != 7 || skipWS(b, i+1) != len(b) {
				return 0, "", nil, false
			}
			return offset, stream, b64, true
		}
		if b[i] != ',' {
			return 0, "", nil, false
		}
	}
}

// decode base64-decodes b64 into the reused output buffer: with b64Decode
// on the fast path, which fails on CR and LF (in a raw JSON string they are
// invalid, so encoding/json judges those payloads), and with the standard
// decoder on the unescaped string of the slow path.
func (p *sseParser) decode(b64 []byte, decode func(dst, src []byte) (int, error)) (int, error) {
	// Slack past DecodedLen, so a decoder's last vector store always fits.
	if n := base64.StdEncoding.DecodedLen(len(b64)) + 16; cap(p.out) < n {
		p.out = make([]byte, n)
	}
	return decode(p.out[:cap(p.out)], b64)
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the contents of the JSON string starting at b[i] == '"'
// and the index after its closing quote. Escapes and control characters
// and non-ASCII bytes (which encoding/json would rewrite as U+FFFD when
// they are not valid UTF-8; base64 never contains them) are declined,
// leaving them to encoding/json.
func scanString(b []byte, i int) ([]byte, int, bool) {
	rest := b[i+1:]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, 0, false
	}
	s := rest[:end]
	for _, c := range s {
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, 0, false
		}
	}
	return s, i + 1 + end + 1, true
}

// Stream follows one exec's output over SSE. It reconnects at its byte
// cursor when the body ends without an exit event or goes silent for longer
// than the idle timeout, surfaces every gap, and ends with io.EOF after the
// exit event. It is not safe for concurrent use.
type Stream struct {
	e        *Exec
	ctx      context.Context
	cursor   uint64
	p        *sseParser
	body     io.ReadCloser
	cancel   context.CancelCauseFunc
	attempts int   // consecutive reattaches without progress
	lastErr  error // why the last connection ended or failed to open
	cut      bool  // lastErr is a body that ended or broke without an exit event
	done     bool
	err      error
	pending  *Event // a synthetic gap to deliver before the next event
	ev       Event

	// run, when set, is the start request the first connection sends as
	// POST /v1/exec/run (Session.StartStream); once the daemon has answered
	// it, reconnects resume through GET /v1/exec/{id}/stream.
	run *protocol.StartRequest
	// runBody: the open body is the run route's, so its exit event means
	// the daemon released the exec.
	runBody  bool
	released bool
	ranRun   bool // the run route answered this stream's first connection
	fr       *frames.Reader
	binary   bool // the open body is frames, not SSE
}

// Stream follows the exec's output from offset (0 for the start). Nothing is
// sent until Connect or the first Next.
func (e *Exec) Stream(ctx context.Context, offset uint64) *Stream {
	return &Stream{e: e, ctx: ctx, cursor: offset}
}

// Cursor is the offset just past the last byte delivered or skipped by a gap:
// where a reconnect resumes.
func (st *Stream) Cursor() uint64 { return st.cursor }

// Close releases the connection.
func (st *Stream) Close() error {
	st.closeBody()
	st.done = true
	if st.err == nil {
		st.err = io.EOF
	}
	return nil
}

func (st *Stream) closeBody() {
	if st.body != nil {
		st.body.Close()
		st.body = nil
	}
	if st.cancel != nil {
		st.cancel(nil)
		st.cancel = nil
	}
}

func (st *Stream) fail(err error) (Event, error) {
	st.closeBody()
	st.done, st.err = true, err
	return Event{}, err
}

// Next returns the next event. After the exit event it returns io.EOF; on a
// failure it returns an *Error (Timeout when the caller's context ended,
// Retryable when the connection kept dropping, Protocol for a malformed
// event) and every later call returns the same.
func (st *Stream) Next() (Event, error) {
	if st.done {
		return Event{}, st.err
	}
	if st.pending != nil {
		ev := *st.pending
		st.pending = nil
		return ev, nil
	}
	for {
		if err := st.ctx.Err(); err != nil {
			return st.fail(ctxErr(err, "execStream %s: %v at offset %d; the exec was left as it was", st.e.id, err, st.cursor))
		}
		if err := st.open(); err != nil {
			return Event{}, err
		}
		err := st.read()
		if err != nil {
			if errors.Is(err, errMalformed) {
				return st.fail(err)
			}
			// The body ended without an exit event, the idle timer fired, or
			// the connection broke: the exec is untouched, so reattach at the
			// cursor.
			if b, ok := st.body.(*idleBody); ok {
				if c := b.cause(); c != nil {
					err = c
				}
			}
			st.closeBody()
			st.attempts++
			st.lastErr, st.cut = err, true
			continue
		}
		switch st.ev.Kind {
		case EventOutput:
			ev := &st.ev
			end := ev.Offset + uint64(len(ev.Data))
			if end <= st.cursor {
				continue // already delivered before a reconnect
			}
			if ev.Offset < st.cursor { // overlap: deliver only the new tail
				ev.Data = ev.Data[st.cursor-ev.Offset:]
				ev.Offset = st.cursor
			}
			st.attempts = 0
			if ev.Offset > st.cursor {
				// Bytes skipped without a gap event: surface them as one
				// rather than let the reader believe the output is whole.
				gap := Event{Kind: EventGap, Gap: protocol.GapEvent{From: st.cursor, To: ev.Offset}}
				out := *ev
				st.pending = &out
				st.cursor = end
				return gap, nil
			}
			st.cursor = end
			return *ev, nil
		case EventGap:
			st.attempts = 0
			if st.ev.Gap.To > st.cursor {
				// Follow the daemon past the lost range, or every reconnect is
				// told about the same gap again.
				st.cursor = st.ev.Gap.To
			}
			return st.ev, nil
		case EventExit:
			ev := st.ev
			st.released = st.runBody
			// The body ends right after the exit event: reading its end lets
			// the connection be reused for the next exchange.
			if st.runBody || st.binary {
				// Only agentd's own additions are known to end there.
				_, _ = io.CopyN(io.Discard, st.body, 4<<10)
			}
			st.closeBody()
			st.done, st.err = true, io.EOF
			return ev, nil
		}
	}
}

// Released reports whether the daemon already released the exec, as an ack
// would: the stream reached its exit event over the run route
// (Session.StartStream). A caller then has nothing to ack; Exec.Release or
// Ack would answer already_acked.
func (st *Stream) Released() bool { return st.released }

// read reads the open body's next event into st.ev, from SSE or frames.
func (st *Stream) read() error {
	if !st.binary {
		return st.p.next(&st.ev)
	}
	for {
		f, err := st.fr.Next()
		if err != nil {
			if errors.Is(err, frames.ErrMalformed) {
				return Errorf(taxonomy.KindProtocol, "", "execStream: %w", errors.Join(errMalformed, err))
			}
			return err
		}
		st.ev = Event{}
		switch f.Type {
		case protocol.FrameKeepalive:
			continue
		case protocol.FrameStdout, protocol.FrameStderr:
			st.ev = Event{Kind: EventOutput, Stream: protocol.StreamStdout, Offset: f.Offset, Data: f.Payload}
			if f.Type == protocol.FrameStderr {
				st.ev.Stream = protocol.StreamStderr
			}
		case protocol.FrameGap:
			st.ev.Kind = EventGap
			if err := json.Unmarshal(f.Payload, &st.ev.Gap); err != nil {
				return malformedEvent(EventGap, err)
			}
			if st.ev.Gap.To < st.ev.Gap.From {
				return malformedEvent(EventGap, fmt.Errorf("gap [%d, %d) ends before it starts", st.ev.Gap.From, st.ev.Gap.To))
			}
		case protocol.FrameExit:
			st.ev.Kind = EventExit
			if err := json.Unmarshal(f.Payload, &st.ev.Exit); err != nil {
				return malformedEvent(EventExit, err)
			}
		}
		return nil
	}
}

// Connect opens the stream's connection now rather than at the first Next,
// retrying as Next does, and returns once the daemon has answered. From then
// on the daemon counts this stream as a reader of the exec's output: it holds
// the child back rather than overwrite, in its replay window, bytes the
// stream has not read yet. Before that nothing holds the child back, so feed
// a child's stdin only after Connect: a child that writes as it reads (cat)
// can otherwise run a whole replay window ahead of a stream that has not
// connected yet, and those bytes come back as a gap. Connect on a stream that
// is already open, or that ended at its exit event, returns nil. When it
// fails the stream has failed: every later Next returns the same error.
// Like Next, it is bounded by the Stream's context, not by a context of its
// own.
func (st *Stream) Connect() error {
	if st.done {
		if st.err == io.EOF {
			return nil
		}
		return st.err
	}
	if err := st.ctx.Err(); err != nil {
		_, err = st.fail(ctxErr(err, "execStream %s: %v at offset %d; the exec was left as it was", st.e.id, err, st.cursor))
		return err
	}
	return st.open()
}

// open makes sure a connection is open at the cursor, reattaching with
// backoff within the reattach budget. On a failure it fails the stream and
// returns the stream's error.
func (st *Stream) open() error {
	for st.body == nil {
		if err := st.ctx.Err(); err != nil {
			_, err = st.fail(ctxErr(err, "execStream %s: %v at offset %d; the exec was left as it was", st.e.id, err, st.cursor))
			return err
		}
		if st.attempts > 0 {
			if st.attempts > st.e.s.maxReattach {
				_, err := st.fail(st.exhausted())
				return err
			}
			if err := sleepCtx(st.ctx, reattachBackoff(st.attempts)); err != nil {
				continue
			}
		}
		if err := st.attach(); err != nil {
			if KindOf(err) == taxonomy.KindRetryable {
				st.attempts++
				st.lastErr, st.cut = err, false
				continue
			}
			_, err = st.fail(err)
			return err
		}
	}
	return nil
}

// ErrStreamCut is in the chain of the error Stream.Next returns when it gave
// up because the stream's bodies kept ending (or going silent past the idle
// timeout) without an exit event: the daemon answered, so the endpoint and
// token are good, but the output never reached its end. It says nothing about
// the exec, which is left as it was; its record still holds the outcome.
// The error's kind is Retryable (wire kind Transport): a later Stream at the
// cursor may get through. A stream that could not connect at all fails
// with the connection's own error instead, without ErrStreamCut.
var ErrStreamCut = errors.New("the exec stream kept ending without an exit event")

// exhausted is the error for a stream out of reattaches, naming why the last
// connection ended.
func (st *Stream) exhausted() error {
	if st.cut {
		return WireErrorf(taxonomy.WireTransport, "execStream %s: the stream ended %d times without an exit event; the exec was left as it was, last offset %d: %w",
			st.e.id, st.attempts, st.cursor, errors.Join(ErrStreamCut, st.lastErr))
	}
	if st.lastErr != nil {
		// The last failure was opening a connection; keep its own wire kind
		// (Transport, NotBootstrapped, ...) so the caller is told what to fix.
		wire := taxonomy.WireTransport
		var e *Error
		if errors.As(st.lastErr, &e) {
			w, ok := e.WireKind()
			if !ok {
				return e
			}
			wire = w
		}
		return WireErrorf(wire, "execStream %s: gave up after %d attempts at offset %d: %w", st.e.id, st.attempts, st.cursor, st.lastErr)
	}
	return WireErrorf(taxonomy.WireTransport, "execStream %s: the connection dropped %d times without an exit event; last offset %d", st.e.id, st.attempts, st.cursor)
}

func reattachBackoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt-1, 5)
	return d
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// attach opens one connection at the cursor. The idle timer starts before
// the request is sent, so a server that never answers counts too.
func (st *Stream) attach() error {
	actx, cancel := context.WithCancelCause(st.ctx)
	idle := st.e.s.idleTimeout
	timer := time.AfterFunc(idle, func() { cancel(errStreamIdle) })
	offset := st.cursor
	// Binary frames are asked for by content negotiation, which needs no
	// discovery: SSE stays acceptable, a daemon that does not know frames
	// (the reference) ignores the preference and answers SSE, and the body
	// is read by the content type it came with.
	accept := protocol.FramesMediaType + ", text/event-stream;q=0.5"
	c := call{
		op: protocol.OpExecStream, resumesItself: true,
		build: func(server string) (*http.Request, error) {
			req, err := protocol.NewExecStreamRequest(server, st.e.id, &protocol.ExecStreamParams{Offset: &offset})
			if err == nil {
				req.Header.Set("Accept", accept)
			}
			return req, err
		},
	}
	if run := st.run; run != nil {
		c = call{op: protocol.OpExecRun, resumesItself: true, command: run.Command,
			build: func(server string) (*http.Request, error) {
				req, err := protocol.NewExecRunRequest(server, *run)
				if err == nil {
					req.Header.Set("Accept", accept)
				}
				return req, err
			}}
	}
	resp, err := st.e.s.send(actx, c)
	if err != nil {
		timer.Stop()
		cancel(nil)
		if st.ctx.Err() == nil && context.Cause(actx) == errStreamIdle {
			return WireErrorf(taxonomy.WireTransport, "execStream %s: no answer within the idle timeout %s", st.e.id, idle).WithCause(errStreamIdle)
		}
		return err
	}
	// The daemon answered the run: the exec exists, so a reconnect resumes
	// it through the stream route.
	st.runBody, st.run = st.run != nil, nil
	st.ranRun = st.ranRun || st.runBody
	body := &idleBody{rc: resp.Body, timer: timer, idle: idle, ctx: actx}
	st.body, st.cancel = body, func(c error) { timer.Stop(); cancel(c) }
	st.binary = resp.Header.Get("Content-Type") == protocol.FramesMediaType
	switch {
	case st.binary && st.fr == nil:
		st.fr = frames.NewReader(body, sseBufferSize)
	case st.binary:
		st.fr.Reset(body)
	case st.p == nil:
		st.p = newSSEParser(body)
	default:
		st.p.reset(body)
	}
	return nil
}

// idleBody re-arms the idle timer on every read that returns bytes; when the
// timer fires it cancels the attach, which makes the pending read fail.
type idleBody struct {
	rc    io.ReadCloser
	timer *time.Timer
	idle  time.Duration
	ctx   context.Context // the attach's context, cancelled by the timer
	once  sync.Once
}

// cause is errStreamIdle when the idle timer ended the body, else nil.
func (b *idleBody) cause() error {
	if context.Cause(b.ctx) == errStreamIdle {
		return fmt.Errorf("%w (%s)", errStreamIdle, b.idle)
	}
	return nil
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.timer.Reset(b.idle)
	}
	return n, err
}

func (b *idleBody) Close() error {
	var err error
	b.once.Do(func() { b.timer.Stop(); err = b.rc.Close() })
	return err
}
