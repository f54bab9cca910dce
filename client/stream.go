package client

// Stream: one exec's output followed from an offset, over SSE or binary
// frames, reconnecting at its cursor after a dropped connection until the
// exit event, and released on the daemon once every byte was delivered.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/microvms/microvms/client/internal/sse"
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

// Stream follows one exec's output over SSE. It reconnects at its byte
// cursor when the body ends without an exit event or goes silent for longer
// than the idle timeout, surfaces every gap, and ends with io.EOF after the
// exit event. On a session that knows its VM's lifecycle (WithVMPhase, as a
// sandbox's does) it waits out a suspend, however long, and reattaches at
// its cursor after the resume. It is not safe for concurrent use.
type Stream struct {
	e        *Exec
	ctx      context.Context
	cursor   uint64
	p        *sse.Parser
	sev      sse.Event // the event as the parser decoded it
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
	binary   bool   // the open body is frames, not SSE
	awake    func() // releases the session's keep-awake hold of the open body
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
	st.releaseReaders()
	st.done = true
	if st.err == nil {
		st.err = io.EOF
	}
	return nil
}

func (st *Stream) closeBody() {
	if st.awake != nil {
		st.awake()
		st.awake = nil
	}
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
	st.releaseReaders()
	st.done, st.err = true, err
	return Event{}, err
}

// Next returns the next event. After the exit event it returns io.EOF; on a
// failure it returns an *Error (Timeout when the caller's context ended,
// Retryable when the connection kept dropping, Protocol for a malformed
// event, TooLarge for a line, event or frame over one of the client's
// bounds) and every later call returns the same.
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
			if errors.Is(err, errMalformed) || errors.Is(err, ErrOverBound) {
				// Reconnecting would read the same bytes again.
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
			st.releaseReaders()
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
		if err := st.p.Next(&st.sev); err != nil {
			return malformed(err)
		}
		st.ev = eventOf(&st.sev)
		return nil
	}
	for {
		f, err := st.fr.Next()
		if err != nil {
			if errors.Is(err, frames.ErrTooLong) {
				return overBound(protocol.OpExecStream, &BoundError{Key: "x-frames max_payload_bytes (api/openapi.yaml)", Limit: frames.MaxPayload, What: "a frame's payload"}, "")
			}
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
		case protocol.FrameGap, protocol.FrameExit:
			kind := sse.Gap
			if f.Type == protocol.FrameExit {
				kind = sse.Exit
			}
			if err := sse.DecodeEnd(kind, f.Payload, &st.sev); err != nil {
				return malformed(err)
			}
			st.ev = eventOf(&st.sev)
		}
		return nil
	}
}

// eventOf is the Stream's Event for an event the sse package decoded.
func eventOf(ev *sse.Event) Event {
	return Event{Kind: kindOf(ev.Kind), Stream: ev.Out.Stream, Offset: ev.Out.Offset, Data: ev.Out.Data, Gap: ev.Gap, Exit: ev.Exit}
}

func kindOf(k sse.Kind) EventKind {
	switch k {
	case sse.Output:
		return EventOutput
	case sse.Gap:
		return EventGap
	case sse.Exit:
		return EventExit
	}
	return 0
}

// errMalformed marks a frame agentd should never send; the stream fails
// rather than reconnecting into the same bytes.
var errMalformed = errors.New("malformed SSE event")

// malformed is err as the stream reports it: a payload that does not decode
// (an *sse.MalformedError) is a Protocol *Error naming the event's kind;
// anything else, the body ending or breaking, is err itself.
func malformed(err error) error {
	var me *sse.MalformedError
	if errors.As(err, &me) {
		return malformedEvent(kindOf(me.Kind), me.Err)
	}
	var le *sse.LimitError
	if errors.As(err, &le) {
		return overBound(protocol.OpExecStream, &BoundError{Key: le.Key, Limit: int64(le.Limit), What: le.What}, "")
	}
	return err
}

func malformedEvent(kind EventKind, err error) error {
	return Errorf(taxonomy.KindProtocol, "", "execStream: a %s event is malformed: %w", kind, errors.Join(errMalformed, err))
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
			// A VM suspended under the stream is waited out, not counted.
			paused, err := st.pausedWait()
			if err != nil {
				_, err = st.fail(err)
				return err
			}
			if paused {
				st.attempts = 0
				continue
			} else if st.attempts > st.e.s.maxReattach {
				_, err := st.fail(st.exhausted())
				return err
			} else if err := sleepCtx(st.ctx, reattachBackoff(st.attempts)); err != nil {
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
		if st.body != nil && st.awake == nil {
			// An open stream is not traffic the idle policy counts.
			st.awake = st.e.s.busy()
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
		st.fr = frameReaders.Get().(*frames.Reader)
		st.fr.Reset(body)
	case st.binary:
		st.fr.Reset(body)
	case st.p == nil:
		st.p = sseParsers.Get().(*sse.Parser)
		st.p.Reset(body)
	default:
		st.p.Reset(body)
	}
	return nil
}

// A stream's reader holds a sse.BufferSize buffer (large reads keep a
// long stream at the pipe's speed), and each one-exchange run used to
// allocate and zero one: 256 KiB a run, which made collections the largest
// cost of an engine's short runs after the system calls (a fifth of its
// CPU over 3,000 runs, profiled). Streams that are done hand theirs back.
var (
	frameReaders = sync.Pool{New: func() any { return frames.NewReader(nil, sse.BufferSize) }}
	sseParsers   = sync.Pool{New: func() any { return sse.NewParser(nil) }}
)

// releaseReaders hands the stream's readers back once it is done: nothing
// reads them again (Next answers st.err), and the Data an event carried was
// valid only until this call of Next, so no caller holds their bytes. Not
// concurrent with Next: a Stream is not safe for concurrent use.
func (st *Stream) releaseReaders() {
	if st.fr != nil {
		st.fr.Reset(nil)
		frameReaders.Put(st.fr)
		st.fr = nil
	}
	if st.p != nil {
		st.p.Reset(nil)
		sseParsers.Put(st.p)
		st.p = nil
	}
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
