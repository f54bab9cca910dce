package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ttyStdin is this process's stdin when it is a terminal: exec --tty needs
// one to put in raw mode and to take the size of. Anything else (a pipe, a
// file, --json's machine reader) is refused before the exec starts.
func (c *ExecCmd) ttyStdin(a *app) (*os.File, error) {
	if a.JSON {
		return nil, render.InvalidArg("", "--tty is interactive: its output is a terminal's raw bytes, not JSON; drop --json, or drop --tty and use --stream --json")
	}
	f, ok := a.Stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil, render.InvalidArg("", "--tty needs a terminal on stdin, and stdin is not one; drop --tty (and use --stdin to feed a pipe)")
	}
	return f, nil
}

// ttySize is the local terminal's size; a terminal that reports none (or
// 0x0, as a fresh pty does) gets the classic 24x80, since the daemon
// refuses a size of 0.
func ttySize(fd int) protocol.TTYSize {
	cols, rows, err := term.GetSize(fd)
	if err != nil || rows <= 0 || cols <= 0 || rows > 0xffff || cols > 0xffff {
		return protocol.TTYSize{Rows: 24, Cols: 80}
	}
	return protocol.TTYSize{Rows: uint16(rows), Cols: uint16(cols)}
}

// runTTY runs the exec on a remote terminal of the local terminal's size,
// with the local terminal in raw mode: every key (Ctrl-C and Ctrl-D
// included) is a byte for the remote program, whose terminal does the
// echoing and line editing. The local terminal is restored on every return.
// ctx carries no --timeout: a person at a terminal, not a deadline, ends an
// interactive session (an interrupt signal still ends the following).
func (c *ExecCmd) runTTY(ctx context.Context, a *app, s *client.Session, in *os.File, opts client.StartOptions) (*render.Result, error) {
	fd := int(in.Fd())
	size := ttySize(fd)
	opts.TTY, opts.Stdin, opts.Shell = &size, true, len(c.Command) == 1
	ex, err := s.Start(ctx, c.Command, opts)
	if err != nil {
		return nil, err
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindUnexpected, "", "putting the terminal in raw mode: %v (%s is running; `microvm exec --poll %s` reads it)", err, ex.ID(), ex.ID())
	}
	defer func() { _ = term.Restore(fd, old) }()

	st := ex.Stream(ctx, 0)
	defer st.Close()
	// Typing starts once the output is followed, as for --stdin: the echo
	// of what is typed must have a reader.
	if err := st.Connect(); err == nil {
		go ttyFeed(ctx, ex, in)
	}

	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				sz := ttySize(fd)
				// A failed resize leaves the old size: the session goes on.
				_ = ex.Resize(ctx, sz.Rows, sz.Cols)
			}
		}
	}()

	sum := cliapi.ExecStreamData{ExecID: ex.ID()}
	sawExit := false
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
			_, _ = a.Stdout.Write(ev.Data)
		case client.EventGap:
			sum.Gaps++
		case client.EventExit:
			sawExit = true
			t := ev.Exit.Truncated
			sum.Truncated = &t
			if ev.Exit.ExitCode != nil {
				v := int64(*ev.Exit.ExitCode)
				sum.ExitCode = &v
			}
		}
	}
	sum.NextOffset = int64(st.Cursor())
	// Whatever follows goes to stderr: the child's bytes own stdout.
	a.Streamed = true
	// Restore before anything is reported, so the report prints on a
	// cooked terminal (the deferred Restore is then a no-op).
	_ = term.Restore(fd, old)
	if streamErr != nil || !sawExit {
		if streamErr == nil {
			streamErr = client.Errorf(taxonomy.KindExecFailed, "", "the stream of %s ended without an exit event", ex.ID())
		}
		f := &render.Failure{Err: render.AsClientError(streamErr), Data: sum}
		f.Suggestions = []string{fmt.Sprintf("%s was left as it was; `microvm exec --poll %s` reads its status", ex.ID(), ex.ID())}
		return nil, f
	}
	if _, err := ex.Ack(ctx); err != nil && !errors.Is(err, client.WireKindError(taxonomy.WireConflict)) {
		return nil, &render.Failure{Err: render.AsClientError(err), Data: sum}
	}
	res := &render.Result{Type: cliapi.TypeExecStream, Data: sum, Human: func(io.Writer) error { return nil }}
	if sum.ExitCode == nil || *sum.ExitCode != 0 {
		res.Reporting(taxonomy.KindExecFailed, fmt.Sprintf("%s did not exit 0 (%s)", ex.ID(), exitText(sum.ExitCode)))
	}
	return res, nil
}

// ttyFeed sends each read of the local terminal to the remote one as it
// comes: keys are forwarded one read at a time, never held for a full
// chunk. It ends at the first failed write (the child exited, the command
// ended) or at the terminal's EOF; like stdinFeed, a Read blocked when the
// command ends is left to end with the process.
func ttyFeed(ctx context.Context, ex *client.Exec, in io.Reader) {
	buf := make([]byte, min(4096, protocol.DefaultMaxStdinWriteBytes))
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if _, werr := ex.WriteStdin(ctx, buf[:n]); werr != nil {
				return
			}
		}
		if err != nil || ctx.Err() != nil {
			return
		}
	}
}
