package client

// Run: an exec started with its stream in one call (StartStream), and
// followed to its exit and acked (Run), above the exec handle (exec.go) and
// the stream (stream.go) it composes.

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// StartStream starts command and returns it with a Stream of its output
// from offset 0. Against a daemon that offers the run route (learned from
// its /v1/schema) the start and the stream are one exchange, POST
// /v1/exec/run, sent here and answered before StartStream returns (so the
// stream is connected, as after Stream.Connect); its exit event also
// releases the exec, which Stream.Released then reports, and nothing is left
// to ack. Against any other daemon it is Start followed by Exec.Stream, and
// the caller acks as before. Start's refusals are StartStream's either way;
// a refusal of the run route's answer fails the returned error, not the
// stream.
func (s *Session) StartStream(ctx context.Context, command []string, o StartOptions) (*Exec, *Stream, error) {
	req, err := startRequest(command, o)
	if err != nil {
		return nil, nil, err
	}
	if !s.daemonOffers(ctx).run {
		e, err := s.Start(ctx, command, o)
		if err != nil {
			return nil, nil, err
		}
		return e, e.Stream(ctx, 0), nil
	}
	e := &Exec{s: s, id: req.ExecID}
	st := &Stream{e: e, ctx: ctx, run: &req}
	if err := st.Connect(); err != nil {
		if !errors.Is(err, errNoRoute) {
			return nil, nil, err
		}
		// The document listed the route but nothing serves it (something
		// in front of the daemon, or a document not its own): protocol v1's
		// routes from now on. Nothing was started: no route, no start.
		s.offersMu.Lock()
		s.offers.run = false
		s.offersMu.Unlock()
		e, err := s.Start(ctx, command, o)
		if err != nil {
			return nil, nil, err
		}
		return e, e.Stream(ctx, 0), nil
	}
	return e, st, nil
}

// RunOptions shape Session.Run.
type RunOptions struct {
	StartOptions
	// ClientTimeout is how long Run waits. When it passes, Run returns a
	// Timeout error naming the exec id and leaves the VM and the exec
	// exactly as they were (the child keeps running; reattach by id). To
	// have the daemon kill the child instead, set DaemonTimeout.
	ClientTimeout time.Duration
	// Stdout and Stderr, when set, receive output live as it streams.
	Stdout, Stderr io.Writer
	// OnGap is called for every range of output lost before it was read.
	OnGap func(protocol.GapEvent)
}

// Run starts command, follows it until it exits, acks it and returns its
// record. A non-zero exit is not an error here; Result.Err classifies it. A
// passed deadline (ctx's or the client-side timeout) is a Timeout *Error and
// a cancelled ctx an Interrupted one; both name the exec id so the caller can
// reattach, and neither touches the VM or the exec.
//
// Result.Stdout and Result.Stderr are the exact bytes the child wrote (NUL
// and invalid UTF-8 included) when the stream delivered every byte from
// offset 0 to the exit event. The daemon's record carries its output as JSON
// text, with invalid UTF-8 replaced by U+FFFD; Run falls back to that text
// (and its Truncated) when the stream lost bytes (a gap), gave up before the
// exit event, or carried more than protocol.DefaultMaxOutputBytes on one
// stream, and whenever the record says it was truncated. Run never holds
// more than that cap per stream: past it the record cannot hold more either.
func (s *Session) Run(ctx context.Context, command []string, o RunOptions) (Result, error) {
	defer s.busy()()
	if o.ClientTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.ClientTimeout)
		defer cancel()
	}
	if o.ExecID == "" {
		o.ExecID = NewExecID()
	}
	e, st, err := s.StartStream(ctx, command, o.StartOptions)
	if err != nil {
		if ctx.Err() != nil && s.daemonOffers(ctx).run {
			// The run request may have reached the daemon before ctx
			// ended: the exec may be running, under this id.
			return Result{}, timeoutOr(ctx, o.ExecID, err)
		}
		return Result{}, timeoutOr(ctx, "", err)
	}
	// stdout and stderr hold the streamed bytes until a gap, a failed
	// stream or the cap proves they are not the whole output. Past the cap
	// they keep the head, which is what a released exec's result carries.
	limit := runBufferCap
	if m := s.daemonOffers(ctx).maxOutput; m > 0 && m < limit {
		// A released exec's result is what its record would have held.
		limit = m
	}
	stdout, stderr := capBuffer{limit: limit}, capBuffer{limit: limit}
	exact, sawExit := true, false
	var exit protocol.ExitEvent
	for {
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, timeoutOr(ctx, e.id, err)
			}
			exact = false
			break // the stream gave up; the record still knows the outcome
		}
		switch ev.Kind {
		case EventOutput:
			w, buf := o.Stdout, &stdout
			if ev.Stream == protocol.StreamStderr {
				w, buf = o.Stderr, &stderr
			}
			if !buf.full && !buf.write(ev.Data) {
				// Past the cap: the record's (truncated) output is the
				// result, or, for a released exec, the heads held here.
				buf.write(ev.Data[:buf.limit-len(buf.b)])
				buf.full, exact = true, false
			}
			if w != nil {
				if _, err := w.Write(ev.Data); err != nil {
					st.Close()
					return Result{}, Errorf(taxonomy.KindUnexpected, "", "exec %s: writing its output: %w", e.id, err)
				}
			}
		case EventGap:
			exact = false
			if o.OnGap != nil {
				o.OnGap(ev.Gap)
			}
		case EventExit:
			sawExit, exit = true, ev.Exit
		}
	}
	released := st.Released()
	if !released && sawExit && st.ranRun {
		// The run's connection broke after the daemon had written its exit
		// event (and so released the exec) but before all of it arrived;
		// the resumed stream was told so with a gap. The record is gone.
		if p, err := e.Poll(ctx); err == nil && p.Phase == protocol.PhaseAcked {
			released = true
		}
	}
	if released {
		// The run route: the exit event was the record and the daemon has
		// released it, so the outcome comes from the event and the output
		// from the stream. Output the stream did not deliver (a gap: a
		// reader stalled past stream_stall_secs, or a connection cut after
		// the exit was written) is gone with the record, so it reads as
		// Truncated.
		r := resultOf(protocol.PollResponse{ExecID: e.id, Phase: protocol.PhaseAcked, ExitCode: exit.ExitCode, Signal: exit.Signal, Usage: exit.Usage, OomKilled: exit.OomKilled})
		r.Stdout, r.Stderr = stdout.String(), stderr.String()
		r.Truncated = exit.Truncated || !exact || exit.Offset != st.Cursor()
		r.WritersMayBeAlive = exit.WritersMayBeAlive
		return r, nil
	}
	r, err := e.waitAck(ctx)
	// A truncated record holds only the head of a stream; the streamed
	// bytes run past it, so they are not what the record (and Truncated)
	// describe.
	if err == nil && exact && sawExit && exit.Offset == st.Cursor() && !r.Truncated {
		r.Stdout, r.Stderr = stdout.String(), stderr.String()
	}
	return r, timeoutOr(ctx, e.id, err)
}

// runBufferCap is the most Run buffers of one stream: the daemon's default
// per-stream output cap, past which its record cannot hold more either.
const runBufferCap = protocol.DefaultMaxOutputBytes

// capBuffer holds bytes up to limit and never allocates past it (a
// bytes.Buffer would double its capacity beyond the bytes it holds).
type capBuffer struct {
	b     []byte
	limit int
	full  bool // a write went past the limit; b holds the head up to it
}

// write appends p, or reports false, appending nothing, when p would take
// the buffer past its limit.
func (c *capBuffer) write(p []byte) bool {
	if len(p) > c.limit-len(c.b) {
		return false
	}
	if need := len(c.b) + len(p); need > cap(c.b) {
		nb := make([]byte, len(c.b), min(max(2*cap(c.b), need, 4096), c.limit))
		copy(nb, c.b)
		c.b = nb
	}
	c.b = append(c.b, p...)
	return true
}

// reset drops the bytes and the memory holding them.
func (c *capBuffer) reset() { c.b = nil }

func (c *capBuffer) String() string { return string(c.b) }
