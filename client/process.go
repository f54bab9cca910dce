package client

// Process: an exec as a running program with its stdout and stderr as
// readers, its gaps, and Wait for its exit (started by Spawn, or attached to
// an exec another call started).

import (
	"context"
	"io"
	"sync"

	"github.com/microvms/microvms/gen/protocol"
)

// Process is a started exec with its stdout and stderr demultiplexed from the
// one SSE stream into two readers. Read both (or Close the one you do not
// want, which discards it) while waiting, as with os/exec pipes: the stream
// is not read faster than its readers consume it.
type Process struct {
	e              *Exec
	stdout, stderr *io.PipeReader
	ow, ew         *io.PipeWriter
	cancel         context.CancelFunc
	attached       chan struct{} // closed once the stream connected or failed
	done           chan struct{}

	mu   sync.Mutex
	gaps []protocol.GapEvent
	err  error

	run *runCapture // set when the stream is the run route's answer
}

// Spawn starts command and follows its output in the background. Where the
// daemon offers the run route the start and the following are one exchange
// (Session.StartStream) and Wait needs no poll or ack.
func (s *Session) Spawn(ctx context.Context, command []string, o StartOptions) (*Process, error) {
	// The stream outlives ctx's cancellation, as Attach's does; only the
	// start (the run's answer) is bounded by ctx.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	e, st, err := s.StartStream(sctx, command, o)
	stopped := stop()
	if err != nil || !stopped {
		cancel()
		if err == nil {
			err = ctxErr(ctx.Err(), "starting %s: %v", o.ExecID, ctx.Err())
		}
		return nil, timeoutOr(ctx, "", err)
	}
	return e.process(st, cancel), nil
}

// Attach follows an existing exec's output from offset as a Process. The
// stream outlives ctx's cancellation (it ends at the exit event or Close).
func (e *Exec) Attach(ctx context.Context, offset uint64) *Process {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return e.process(e.Stream(sctx, offset), cancel)
}

func (e *Exec) process(st *Stream, cancel context.CancelFunc) *Process {
	or, ow := io.Pipe()
	er, ew := io.Pipe()
	p := &Process{e: e, stdout: or, stderr: er, ow: ow, ew: ew, cancel: cancel, attached: make(chan struct{}), done: make(chan struct{})}
	if st.ranRun {
		// The run route releases the exec with its exit event, so the
		// record Wait reports is built here, from what the stream carried.
		limit := runBufferCap
		if m := e.s.daemonOffers(context.Background()).maxOutput; m > 0 && m < limit {
			limit = m
		}
		p.run = &runCapture{stdout: capBuffer{limit: limit}, stderr: capBuffer{limit: limit}}
	}
	go p.demux(st, ow, ew)
	return p
}

// runCapture is what a Process following a run route keeps for Wait: the
// heads of both streams (as the record would), the exit event, and whether
// the stream delivered every byte.
type runCapture struct {
	stdout, stderr capBuffer
	exit           protocol.ExitEvent
	released, lost bool
}

func (p *Process) demux(st *Stream, ow, ew *io.PipeWriter) {
	defer close(p.done)
	outs := map[protocol.StreamKind]*io.PipeWriter{protocol.StreamStdout: ow, protocol.StreamStderr: ew}
	// A failed Connect has failed the stream: the first Next below returns
	// its error, so the loop needs no case of its own for it. The error is
	// recorded first so that Err already holds it when Attached is closed.
	if cerr := st.Connect(); cerr != nil {
		p.mu.Lock()
		p.err = cerr
		p.mu.Unlock()
	}
	close(p.attached)
	var err error
	for {
		var ev Event
		ev, err = st.Next()
		if err != nil {
			break
		}
		switch ev.Kind {
		case EventOutput:
			if c := p.run; c != nil {
				buf := &c.stdout
				if ev.Stream == protocol.StreamStderr {
					buf = &c.stderr
				}
				if !buf.full && !buf.write(ev.Data) {
					buf.write(ev.Data[:buf.limit-len(buf.b)])
					buf.full = true
				}
			}
			if w := outs[ev.Stream]; w != nil {
				if _, werr := w.Write(ev.Data); werr != nil {
					outs[ev.Stream] = nil // the reader was closed: discard from now on
				}
			}
		case EventGap:
			if p.run != nil {
				p.run.lost = true
			}
			p.mu.Lock()
			if len(p.gaps) < maxProcessGaps {
				p.gaps = append(p.gaps, ev.Gap)
			} else {
				// Endless gap events must not grow this without end: the
				// last range is widened over the rest.
				last := &p.gaps[len(p.gaps)-1]
				last.To = max(last.To, ev.Gap.To)
			}
			p.mu.Unlock()
		case EventExit:
			if c := p.run; c != nil {
				c.exit = ev.Exit
				c.lost = c.lost || ev.Exit.Offset != st.Cursor()
			}
		}
	}
	if err == io.EOF {
		err = nil
		if p.run != nil {
			p.run.released = st.Released()
		}
	}
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	ow.CloseWithError(err)
	ew.CloseWithError(err)
}

// Attached is closed once the output stream has connected (see
// Stream.Connect): from then on the daemon holds the child back rather than
// lose output the readers have not taken. Start feeding the child's stdin
// only after it is closed: a child that writes as it reads (cat) fed before
// then can run past the daemon's replay window, and that output is a gap.
// It is also closed when the stream failed to connect, or was closed
// first, so a waiter never hangs; Err then says why.
func (p *Process) Attached() <-chan struct{} { return p.attached }

// Exec is the process's exec handle.
func (p *Process) Exec() *Exec { return p.e }

// Stdout is the child's stdout. Its reads end with io.EOF after the exit
// event, or with the stream's error.
func (p *Process) Stdout() io.ReadCloser { return p.stdout }

// Stderr is the child's stderr.
func (p *Process) Stderr() io.ReadCloser { return p.stderr }

// maxProcessGaps is the most gap ranges a Process keeps.
const maxProcessGaps = 4096

// Gaps are the ranges of output lost so far, in order. At most
// maxProcessGaps (4096) are kept: past that the last range is widened to
// cover every later one, so it may span bytes that did arrive.
func (p *Process) Gaps() []protocol.GapEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]protocol.GapEvent(nil), p.gaps...)
}

// Err is the error that ended the output stream before its exit event, or
// nil while it runs and after it reached the exit event. Read it after Wait
// (or after both readers ended) to tell complete output from a stream that
// gave up: errors.Is(p.Err(), ErrStreamCut) means the readers saw only a
// prefix even though Wait reports the exec's real outcome. After Close it is
// the cancellation Close caused.
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill signals the process group.
func (p *Process) Kill(ctx context.Context) (bool, error) { return p.e.Kill(ctx) }

// Close stops following the output. The exec is not touched. It returns
// even when a reader was never read: the readers end with an Interrupted
// error (unless the output had already ended) and the rest is discarded.
func (p *Process) Close() error {
	p.cancel()
	// demux may be blocked in a pipe Write that no reader will ever take,
	// and a pipe write does not watch a context: closing the pipes makes
	// that write fail, so demux discards the rest and sees the cancellation.
	// A pipe keeps its first close error, so a reader of output that had
	// already ended still sees its EOF.
	closed := ctxErr(context.Canceled, "exec %s: the process was closed", p.e.id)
	p.ow.CloseWithError(closed)
	p.ew.CloseWithError(closed)
	<-p.done
	return nil
}

// Wait waits until the exec record says exited and the output has been
// delivered to the readers, then acks and returns the record: the status comes
// from the daemon, not from the stream ending. A passed deadline returns a
// Timeout error and a cancelled ctx an Interrupted one; either leaves the
// exec running.
func (p *Process) Wait(ctx context.Context) (Result, error) {
	if p.run != nil {
		// Followed through the run route: its exit event is the record,
		// and the daemon released the exec with it. A stream that ended
		// otherwise (cut, closed) leaves the exec to the record's polls.
		select {
		case <-p.done:
		case <-ctx.Done():
			return Result{}, timeoutOr(ctx, p.e.id, ctx.Err())
		}
		if c := p.run; c.released {
			r := resultOf(protocol.PollResponse{ExecID: p.e.id, Phase: protocol.PhaseAcked, ExitCode: c.exit.ExitCode, Signal: c.exit.Signal, Usage: c.exit.Usage, OomKilled: c.exit.OomKilled})
			r.Stdout, r.Stderr = c.stdout.String(), c.stderr.String()
			r.Truncated = c.exit.Truncated || c.lost || c.stdout.full || c.stderr.full
			r.WritersMayBeAlive = c.exit.WritersMayBeAlive
			return r, nil
		}
	}
	r, err := p.e.waitUntilExited(ctx)
	if err != nil {
		return Result{}, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return Result{}, timeoutOr(ctx, p.e.id, ctx.Err())
	}
	// As in waitAck: the exited poll's record is the outcome; the ack only
	// releases it.
	return p.e.releaseWith(ctx, r)
}
