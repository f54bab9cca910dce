package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/cmd/microvm/internal/argv"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ExecCmd runs one command in a running MicroVM.
type ExecCmd struct {
	AttachFlags
	Command    []string `arg:"" optional:"" passthrough:"partial" help:"The command's words: one word is a shell script run with sh -c (microvm exec 'ls | wc -l'); several are an argv run directly (microvm exec uname -a). exec's own flags are flags wherever they stand (microvm exec 'mkdir -p /w' --json); every word after -- is the command's, verbatim (microvm exec -- grep --json f). Omitted only with --poll."`
	Timeout    float64  `help:"Seconds to wait for the command before giving up client-side (the exec is left running)." default:"300"`
	Cwd        string   `help:"Working directory; omitted inherits the image WORKDIR, which is not the same as /." xor:"poll-cwd"`
	Env        []string `help:"KEY=VALUE for the command, repeatable, split at the first '='; these are laid over the launch env and are the child's whole environment beside it." placeholder:"KEY=VALUE" sep:"none" xor:"poll-env"`
	User       *uint32  `help:"Numeric uid to run as; omitted keeps the daemon's." placeholder:"UID" xor:"poll-user"`
	Group      *uint32  `help:"Numeric gid to run as; omitted keeps the daemon's." placeholder:"GID" xor:"poll-group"`
	ExecID     string   `name:"exec-id" help:"Use this exec id instead of a fresh one, so a retry never spawns twice." placeholder:"ID" xor:"poll-execid"`
	Poll       string   `help:"Read an existing exec's status and output; read-only, does not ack." placeholder:"ID" xor:"poll-execid,poll-stream,poll-stdin,poll-cwd,poll-detach,poll-env,poll-user,poll-group,poll-tty,poll-memlimit,poll-cpulimit,poll-pidslimit"`
	Detach     bool     `help:"Start the command and return at once with its exec id, without waiting or acking." xor:"poll-detach,detach-stream,detach-stdin,detach-tty"`
	Stream     bool     `help:"Stream output as it arrives; under --json each event is one NDJSON line, then a compact envelope." xor:"poll-stream,detach-stream,stream-tty"`
	FromOffset uint64   `name:"from-offset" help:"Resume a stream at this byte offset; requires --stream." placeholder:"BYTES"`
	Stdin      bool     `help:"Give the command a stdin pipe, feed it this process's stdin, then close it." xor:"poll-stdin,detach-stdin,stdin-tty"`
	TTY        bool     `name:"tty" help:"Run the command on a remote terminal of this terminal's size, interactively: this terminal goes raw (Ctrl-C goes to the command) and resizes follow. Needs a terminal on stdin; not with --json. --timeout does not apply: the session lasts until the command exits." xor:"poll-tty,detach-tty,stream-tty,stdin-tty"`
	// Per-command limits the guest kernel enforces (additive to the
	// reference's flags); a guest that cannot apply one refuses the command.
	MemoryLimit   int64 `name:"memory-limit" help:"Bytes of memory the command may use; over it the guest kernel kills it alone (oom_killed). A guest that cannot apply a limit refuses the command rather than run it unlimited." placeholder:"BYTES" xor:"poll-memlimit"`
	CPUMillicores int64 `name:"cpu-millicores" help:"Thousandths of a CPU the command may use (500 is half a CPU)." placeholder:"N" xor:"poll-cpulimit"`
	PidsLimit     int64 `name:"pids-limit" help:"The most processes and threads the command may have alive at once." placeholder:"N" xor:"poll-pidslimit"`
}

// parseEnv splits each KEY=VALUE at its first '=': a value may contain '=',
// an empty value is legal, a missing '=' or an empty key is refused.
func parseEnv(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	env := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, render.InvalidArg("", "--env %q is not KEY=VALUE (a missing '=' or an empty KEY)", p)
		}
		env[k] = v
	}
	return env, nil
}

func execHuman(d cliapi.ExecData) func(io.Writer) error {
	return func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintf(tw, "exec\t%s\nphase\t%s\n", d.ExecID, d.Phase)
		switch {
		case d.ExitCode != nil:
			fmt.Fprintf(tw, "exit\t%d\n", *d.ExitCode)
		case d.Signal != nil:
			fmt.Fprintf(tw, "signal\t%d\n", *d.Signal)
		}
		if d.Truncated {
			fmt.Fprintln(tw, "truncated\tyes: the daemon's output cap was reached")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if d.Stdout != "" {
			fmt.Fprint(w, d.Stdout)
		}
		if d.Stderr != "" {
			fmt.Fprint(w, d.Stderr)
		}
		return nil
	}
}

// execOutcome is the result of an exec's record: a success envelope either
// way, as the reference writes it, exiting ERR_EXEC_FAILED when the child
// finished and did not exit 0 (a signal included). A running exec (a poll)
// is not a failure.
func execOutcome(r client.Result, human func(io.Writer) error) *render.Result {
	d := render.ExecData(r)
	res := &render.Result{Type: cliapi.TypeExec, Data: d, Human: human}
	if err := r.Err(); err != nil && !r.Running() {
		res.Reporting(taxonomy.KindExecFailed, err.Error())
	}
	return res
}

func (c *ExecCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	// The words are passed through from the first one on, so a "--" that
	// separates them from exec's flags arrives as a word: it is not the
	// command's.
	if len(c.Command) > 0 && c.Command[0] == "--" {
		c.Command = c.Command[1:]
	}
	if c.FromOffset != 0 && !c.Stream {
		return nil, render.InvalidArg("", "--from-offset requires --stream")
	}
	if c.Poll == "" && len(c.Command) == 0 {
		return nil, render.InvalidArg("", "a command is required unless --poll names an existing exec")
	}
	if c.Poll != "" && len(c.Command) > 0 {
		return nil, render.InvalidArg("", "--poll reads an existing exec; it takes no command")
	}
	if c.Timeout <= 0 {
		return nil, render.InvalidArg("", "--timeout must be positive seconds, got %v", c.Timeout)
	}
	if err := argv.RequireText("the command's", c.Command); err != nil {
		return nil, err
	}
	if err := argv.RequireText("--env", c.Env); err != nil {
		return nil, err
	}
	env, err := parseEnv(c.Env)
	if err != nil {
		return nil, err
	}
	var ttyIn *os.File
	if c.TTY {
		if ttyIn, err = c.ttyStdin(a); err != nil {
			return nil, err
		}
	}
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	// An interactive session lasts until its command exits: --timeout
	// bounds the others only (see runTTY).
	session := ctx
	ctx, cancel := context.WithTimeout(ctx, time.Duration(c.Timeout*float64(time.Second)))
	defer cancel()

	if c.Poll != "" {
		r, err := s.Exec(c.Poll).Poll(ctx)
		if err != nil {
			return nil, err
		}
		return execOutcome(r, execHuman(render.ExecData(r))), nil
	}

	limits, err := client.NewExecLimits(c.MemoryLimit, c.CPUMillicores, c.PidsLimit)
	if err != nil {
		return nil, err
	}
	opts := client.StartOptions{ExecID: c.ExecID, Shell: len(c.Command) == 1, Cwd: c.Cwd, Env: env, User: c.User, Group: c.Group, Stdin: c.Stdin, Limits: limits}
	if opts.ExecID == "" {
		opts.ExecID = client.NewExecID()
	}
	if ttyIn != nil {
		return c.runTTY(session, a, s, ttyIn, opts)
	}
	// The stdin feed's failure ends the following (see stdinFeed.stop), so
	// the stream is made under this context from the start.
	ctx, stopFeed := context.WithCancelCause(ctx)
	defer stopFeed(nil)
	stop := a.Spinner("starting " + opts.ExecID)
	// Following from the start, the client starts and follows in one
	// exchange where the daemon offers it (client.Session.StartStream).
	var ex *client.Exec
	var st *client.Stream
	var proc *client.Process
	switch {
	case c.Detach || c.FromOffset != 0:
		ex, err = s.Start(ctx, c.Command, opts)
	case c.Stream:
		ex, st, err = s.StartStream(ctx, c.Command, opts)
	default:
		proc, err = s.Spawn(ctx, c.Command, opts)
		if err == nil {
			ex = proc.Exec()
		}
	}
	stop()
	if err != nil {
		if client.KindOf(err) == taxonomy.KindInterrupted {
			// The daemon may have registered the exec before the interrupt
			// reached its answer: name it, so the hint to read or kill it is
			// usable either way.
			return nil, client.Errorf(taxonomy.KindInterrupted, "", "starting %s (it may be running): %v", opts.ExecID, err).WithCause(err)
		}
		return nil, err
	}
	if c.Detach {
		warnDetachedIdle(ctx, a, c.MicrovmID, ex.ID())
		d := cliapi.ExecData{ExecID: ex.ID(), Phase: string(protocol.PhaseRunning)}
		return &render.Result{Type: cliapi.TypeExec, Data: d, Human: func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "%s\trunning\n", ex.ID())
			return err
		}}, nil
	}
	// Stdin is fed only once the output stream is connected, and then while
	// the output is followed: a child like cat writes as it reads, and until
	// a stream reader is attached the daemon does not hold the child back,
	// so output not read within its replay window is gone (a gap). Creating
	// the Process or Stream is not enough: each connects later (Attach in a
	// goroutine, a Stream at its first Next), hence Process.Attached and
	// Stream.Connect before feed.start.
	var feed *stdinFeed
	if c.Stdin {
		feed = &stdinFeed{ex: ex, r: a.Stdin, stop: stopFeed}
	}
	if c.Stream {
		return c.stream(ctx, a, ex, st, feed)
	}
	return c.wait(ctx, a, ex, proc, feed)
}

// stdinFeed copies this process's stdin into an exec (closing it at the
// end) in the background, while its output is followed.
//
// The feed's goroutine can outlive the command: when the exec exits (or the
// following ends) while the goroutine is blocked in a Read of the caller's
// stdin (a terminal, a pipe whose writer is idle), nothing can interrupt
// that Read — os.Stdin is normally not in Go's poller, so SetReadDeadline
// fails with os.ErrNoDeadline, and closing it under a concurrent Read is not
// reliable — so the command returns without waiting for it (see failed) and
// the goroutine ends with that Read, or with the process. By then the
// command's ctx is cancelled, so CopyStdin's next request fails without
// reaching the exec. In the CLI the process exits right after
// the command, so this leaks nothing; a caller of run that reuses the
// process must expect the one goroutine parked in its reader.
type stdinFeed struct {
	ex   *client.Exec
	r    io.Reader
	stop context.CancelCauseFunc // ends the following when the feed fails
	done chan struct{}
	err  error
}

// start begins the feed; call it once the output stream is connected
// (Process.Attached, Stream.Connect), not merely created. A nil feed (no
// --stdin) does nothing.
func (f *stdinFeed) start(ctx context.Context) {
	if f == nil {
		return
	}
	f.done = make(chan struct{})
	go func() {
		_, err := f.ex.CopyStdin(ctx, f.r, true)
		if err == nil || errors.Is(err, client.WireKindError(taxonomy.WireStdinClosed)) || ctx.Err() != nil {
			// Closed means the child stopped reading or exited: its
			// outcome, not the rest of this stdin, is the result. An ended
			// ctx (--timeout, an interrupt) ends the following too, which
			// reports it naming the exec.
			close(f.done)
			return
		}
		f.err = err   // as the client classed it: its wire kind is data.kind
		close(f.done) // before stop: whoever stop ends must see f.err
		// The child may be waiting for the EOF that will never come: stop
		// following it, so the failure is reported now rather than at the
		// timeout.
		f.stop(f.err)
	}()
}

// failed is the feed's failure once it has ended in one. A feed still
// running is not waited for: when the exec has exited, a stdin it never
// read (a terminal, say) must not hold this process.
func (f *stdinFeed) failed() error {
	if f == nil || f.done == nil {
		return nil
	}
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// warnDetachedIdle says what a detached command's launcher cannot do once
// it exits: keep the MicroVM awake. The idle policy counts only inbound
// requests (finding idle-policy), so the window left is the whole idle
// window from the start just sent, and the maximum duration ends the VM
// whatever runs.
func warnDetachedIdle(ctx context.Context, a *app, id, execID string) {
	if a.status == nil {
		return // --direct: no platform clock applies
	}
	st, err := a.status(ctx)
	if err != nil || st.MaxIdle <= 0 {
		return
	}
	left := ""
	if !st.Deadline.IsZero() {
		left = fmt.Sprintf(", and its maximumDurationInSeconds ends it in %s whatever runs", time.Until(st.Deadline).Truncate(time.Second))
	}
	a.Warn("nothing keeps MicroVM %s awake while %s runs: with no inbound request through its endpoint it is suspended in %s (its maxIdleDurationSeconds)%s; hold it with `microvm keepalive %s` (finding idle-policy)",
		id, execID, st.MaxIdle, left, id)
}
