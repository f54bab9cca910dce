package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// wait follows the exec to its exit, acks it and reports its record. Without
// --json the child's bytes go to stdout and stderr exactly as produced.
func (c *ExecCmd) wait(ctx context.Context, a *app, ex *client.Exec, p *client.Process, feed *stdinFeed) (*render.Result, error) {
	if p == nil {
		p = ex.Attach(ctx, 0)
	}
	defer p.Close()
	if feed != nil {
		// Attached is closed on a failed connection too: the feed starts
		// anyway, so the child gets its stdin and exits, and the wait reports
		// its record with the stream's failure.
		select {
		case <-p.Attached():
		case <-ctx.Done():
		}
		feed.start(ctx)
	}
	outW, errW := io.Discard, io.Discard
	raw := !a.JSON && !a.Dense
	if raw {
		outW, errW = a.Stdout, a.Stderr
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(outW, p.Stdout()) }()
	go func() { defer wg.Done(); _, _ = io.Copy(errW, p.Stderr()) }()
	r, err := p.Wait(ctx)
	if err != nil {
		// The attached stream outlives ctx and ends only with the exec's
		// exit: without Close the copies would hold a timed-out or
		// interrupted wait until the child finished. Close never blocks.
		_ = p.Close()
	}
	wg.Wait()
	if ferr := feed.failed(); ferr != nil {
		// The feed's failure is why the wait ended, or the child did not
		// get all of its stdin.
		if err != nil {
			return nil, ferr
		}
		return nil, &render.Failure{Err: render.AsClientError(ferr), Data: render.ExecData(r)}
	}
	if err != nil {
		return nil, err
	}
	d := render.ExecData(r)
	if gaps := p.Gaps(); len(gaps) > 0 {
		// The record's output is incomplete; a caller reading it as the
		// whole output would be misled, so this is a failure, not a note.
		return nil, &render.Failure{Err: client.WireErrorf(taxonomy.WireOutputGap, "%d range(s) of output were lost before they were read (first [%d,%d))", len(gaps), gaps[0].From, gaps[0].To), Data: d}
	}
	if serr := p.Err(); errors.Is(serr, client.ErrStreamCut) {
		// The stream gave up before its exit event: the bytes already written
		// out raw are a prefix, and the record's outcome says nothing about
		// the rest. As with a gap, the record rides along in data, but the
		// run is not reported as passing.
		return nil, &render.Failure{Err: render.AsClientError(serr), Data: d,
			Suggestions: []string{fmt.Sprintf("data holds %s's record, acked: its status, and its output only up to the daemon's max_output_bytes; `microvm exec --stream` can resume a cut stream with --from-offset", ex.ID())}}
	}
	human := func(w io.Writer) error { return nil } // the bytes already went out raw
	if !raw {
		human = execHuman(d)
	} else if r.Usage != nil && !a.Quiet {
		// Human mode only (and not --quiet): one line on stderr, after the
		// command's own.
		fmt.Fprintln(a.Stderr, render.UsageLine(r.Usage, r.OOMKilled))
	}
	return execOutcome(r, human), nil
}

// stream writes the exec's events as they arrive: NDJSON under --json, the
// raw bytes otherwise. The final envelope summarises rather than repeats.
func (c *ExecCmd) stream(ctx context.Context, a *app, ex *client.Exec, st *client.Stream, feed *stdinFeed) (*render.Result, error) {
	// Under --json the final envelope is one compact line even when no
	// event came before it (an interrupted quiet child, or an interrupt
	// while the stream is still connecting): a reader takes the last line
	// as the envelope.
	a.Streamed = a.JSON
	if st == nil {
		st = ex.Stream(ctx, c.FromOffset)
	}
	defer st.Close()
	if err := st.Connect(); err == nil {
		feed.start(ctx)
	} // else the first Next returns the same error and ends the following
	sum := cliapi.ExecStreamData{ExecID: ex.ID(), NextOffset: int64(c.FromOffset)}
	sawExit := false
	enc := json.NewEncoder(a.Stdout)
	enc.SetEscapeHTML(false)
	line := func(v any) {
		_ = enc.Encode(v)
		sum.Events++
	}
	var streamErr error
	for {
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			streamErr = err
			break
		}
		switch ev.Kind {
		case client.EventOutput:
			sum.Bytes += int64(len(ev.Data))
			sum.NextOffset = int64(ev.Offset) + int64(len(ev.Data))
			if !a.JSON {
				w := a.Stdout
				if ev.Stream == protocol.StreamStderr {
					w = a.Stderr
				}
				_, _ = w.Write(ev.Data)
				continue
			}
			text := strings.ToValidUTF8(string(ev.Data), "\uFFFD")
			line(cliapi.StreamOutputLine{Event: cliapi.EventOutput, Stream: string(ev.Stream), Offset: int64(ev.Offset),
				Bytes: int64(len(ev.Data)), Text: text, Lossy: !utf8.Valid(ev.Data)})
		case client.EventGap:
			sum.Gaps++
			sum.NextOffset = int64(ev.Gap.To)
			if a.JSON {
				line(cliapi.StreamGapLine{Event: cliapi.EventGap, From: int64(ev.Gap.From), To: int64(ev.Gap.To)})
			} else {
				a.Warn("output [%d,%d) was lost before it was read", ev.Gap.From, ev.Gap.To)
			}
		case client.EventExit:
			sawExit = true
			sum.NextOffset = int64(ev.Exit.Offset)
			t := ev.Exit.Truncated
			sum.Truncated = &t
			if ev.Exit.ExitCode != nil {
				v := int64(*ev.Exit.ExitCode)
				sum.ExitCode = &v
			}
			if a.JSON {
				line(render.ExitLine(ev.Exit))
			}
		}
	}
	if !a.JSON {
		// On the human path stdout holds the child's bytes; the summary and
		// any failure belong on stderr.
		a.Streamed = true
	}
	if ferr := feed.failed(); ferr != nil {
		// Whether it ended the stream or came after the exit, the child
		// did not get all of its stdin; a resume would not feed it again.
		sum.NextOffset = int64(st.Cursor())
		return nil, &render.Failure{Err: render.AsClientError(ferr), Data: sum}
	}
	// The client's cursor, not the last event seen, is where a resume starts.
	sum.NextOffset = int64(st.Cursor())
	if errors.Is(streamErr, client.ErrStreamCut) || (streamErr == nil && !sawExit) {
		// The stream gave up (or, defensively, ended) without its exit event:
		// the outcome is unknown, so exitCode stays null, and reporting 0
		// would turn a truncated run into a passing one. The exec is left as
		// it was, unacked, so the output can still be read from nextOffset.
		sum.ExitCode, sum.Truncated = nil, nil
		err := client.Errorf(taxonomy.KindExecFailed, "", "the stream of %s ended without an exit event at offset %d; its outcome is unknown", ex.ID(), sum.NextOffset)
		if streamErr != nil {
			err = client.Errorf(taxonomy.KindExecFailed, "", "%v; its outcome is unknown", streamErr).WithCause(streamErr)
		}
		return nil, &render.Failure{Err: err, Data: cutData(sum), Suggestions: c.resumeHints(ex.ID(), sum.NextOffset)}
	}
	if streamErr != nil {
		f := &render.Failure{Err: render.AsClientError(streamErr), Data: sum}
		if k := client.KindOf(streamErr); k == taxonomy.KindTimeout || k == taxonomy.KindRetryable || k == taxonomy.KindInterrupted {
			// The deadline passed, the caller interrupted, or the connection
			// never opened: the exec was left as it was and the stream
			// resumes at the same offset.
			f.Suggestions = c.resumeHints(ex.ID(), sum.NextOffset)
		}
		return nil, f
	}
	// Release the output now that every byte was delivered, so nothing
	// lingers on the daemon; a failed ack is reported, never swallowed.
	// (The run route already released it with the exit event.)
	if !st.Released() {
		if err := ex.Release(ctx); err != nil && !errors.Is(err, client.WireKindError(taxonomy.WireConflict)) {
			return nil, &render.Failure{Err: render.AsClientError(err), Data: sum}
		}
	}
	res := &render.Result{Type: cliapi.TypeExecStream, Data: sum, Human: func(io.Writer) error { return nil }}
	if sum.ExitCode == nil || *sum.ExitCode != 0 {
		res.Reporting(taxonomy.KindExecFailed, fmt.Sprintf("%s did not exit 0 (%s)", ex.ID(), exitText(sum.ExitCode)))
	}
	return res, nil
}

// cutData is the stream summary of a cut stream with the wire kind the cut
// came from: ERR_EXEC_FAILED is coarser than "the transport kept dropping",
// and data.kind is where the envelope says what the exit code cannot.
func cutData(sum cliapi.ExecStreamData) map[string]any {
	m := render.ToMap(sum)
	m["kind"] = taxonomy.WireTransport.String()
	return m
}

// resumeHints are the command line that resumes the stream where it stopped,
// runnable as it stands, then what it leaves out. The same exec id is not
// started again, so repeating the command with it and --from-offset only
// reattaches.
func (c *ExecCmd) resumeHints(id string, offset int64) []string {
	words := []string{"microvm", "exec", "--stream", "--from-offset", strconv.FormatInt(offset, 10), "--exec-id", shellQuote(id)}
	// No --stdin: it was fed and closed on the first run.
	if slices.ContainsFunc(c.Command, func(w string) bool { return strings.HasPrefix(w, "-") }) {
		words = append(words, "--") // only then: flags appended after "--" would be command words
	}
	for _, w := range c.Command {
		words = append(words, shellQuote(w))
	}
	return []string{strings.Join(words, " "),
		"run it with the same addressing flags or MICROVM_* variables: an --exec-id the daemon still holds is reattached, not started again, and this run left it unacked"}
}

func exitText(code *int64) string {
	if code == nil {
		return "no exit code: a signal ended it"
	}
	return "exit " + strconv.FormatInt(*code, 10)
}
