package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// session opens the client session the addressing flags name. Without
// --direct the session is proxied: every request carries a proxy token that
// the session mints (lazily, inside its retry path) through the control
// plane's CreateMicrovmAuthToken for --microvm-id, scoped to --port. getenv
// is read only on that path, for the control plane's region.
func (f *AttachFlags) session(ctx context.Context, a *app) (*client.Session, error) {
	// From here on the command addresses a VM it did not launch, so an
	// interrupt leaves everything as it was: see app.fail.
	a.attached = true
	// Not required by the parser: kong would print both as required even
	// when the variables fill them, and its refusal would not name the
	// variables.
	var missing []string
	if f.Endpoint == "" {
		missing = append(missing, "--endpoint (or MICROVM_ENDPOINT)")
	}
	if f.AgentToken == "" {
		missing = append(missing, "--agent-token (or MICROVM_AGENT_TOKEN)")
	}
	if len(missing) > 0 {
		return nil, invalidArg("", "missing %s: the VM to attach to is named by its endpoint and the agent token given at launch", strings.Join(missing, " and "))
	}
	if f.Port < 1 || f.Port > 65535 {
		return nil, invalidArg(taxonomy.FindingAgentPortAgreement, "--port %d is not a TCP port", f.Port)
	}
	// GetMicrovm's endpoint is a bare host (finding endpoint-bare-host), so
	// it is accepted as given; EndpointURL picks the scheme.
	endpoint := cplane.EndpointURL(f.Endpoint)
	if f.Direct {
		return client.Direct(endpoint, f.AgentToken)
	}
	if f.MicrovmID == "" {
		// A missing argument, as the reference's required flag is: exit 2
		// before anything is sent.
		return nil, invalidArg(taxonomy.FindingEndpointAuth,
			"missing --microvm-id (or MICROVM_ID): a proxied attach mints the endpoint proxy token for that MicroVM; pass --direct for a daemon reached without the proxy")
	}
	region, err := f.controlRegion(a.env)
	if err != nil {
		return nil, err
	}
	// Credentials come from aws-sdk-go-v2's default chain; the endpoint from
	// --control-endpoint, else AWS_ENDPOINT_URL_LAMBDA_MICROVMS or AWS_ENDPOINT_URL.
	// Nothing is resolved over the network until the first mint.
	// A loopback control plane is an emulator and needs no AWS credentials.
	cpc, err := newControl(ctx, region, cplane.ConfiguredEndpoint(f.ControlEndpoint, a.env), a.env)
	if err != nil {
		return nil, err
	}
	return client.Proxied(endpoint, f.AgentToken, sandbox.ProxyMinter(cpc, f.MicrovmID), client.WithAgentPort(f.Port))
}

// regionEnv are the variables that name the control plane's region when no
// flag does, in the order the AWS SDKs read them.
var regionEnv = []string{"AWS_REGION", "AWS_DEFAULT_REGION"}

// flagRegion is the region the flags name: --unlisted-region, else --region
// (which the parser already held to the listed set). ok is false when
// neither was given.
func (f *RegionFlags) flagRegion() (r client.Region, ok bool, err error) {
	switch {
	case f.UnlistedRegion != "":
		return client.UnlistedRegion(f.UnlistedRegion), true, nil
	case f.Region != nil:
		r, err := client.ParseRegion(*f.Region)
		return r, err == nil, err
	}
	return client.Region{}, false, nil
}

// controlRegion is the region of a control plane this invocation is about
// to call: the flags, else AWS_REGION or AWS_DEFAULT_REGION, else the
// default. The variables are read here, not by the parser, so a shell's
// AWS_REGION neither breaks a command that never calls AWS nor counts as a
// --region that conflicts with --unlisted-region; a listed region is still
// required of them, since a variable cannot say "unlisted".
func (f *RegionFlags) controlRegion(getenv func(string) string) (client.Region, error) {
	if r, ok, err := f.flagRegion(); ok || err != nil {
		return r, err
	}
	for _, name := range regionEnv {
		v := getenv(name)
		if v == "" {
			continue
		}
		r, err := client.ParseRegion(v)
		if err != nil {
			return client.Region{}, client.Errorf(taxonomy.KindInvalidArg, taxonomy.RegionFinding,
				"%s=%s is not a region that carries MicroVMs (%s); pass --region with one that does, or --unlisted-region %s to use it anyway",
				name, shellQuote(v), strings.Join(taxonomy.Regions, ", "), shellQuote(v)).WithCause(err)
		}
		return r, nil
	}
	return client.ParseRegion(taxonomy.Regions[0])
}

// ExecCmd runs one command in a running MicroVM.
type ExecCmd struct {
	AttachFlags
	Command    []string `arg:"" optional:"" passthrough:"partial" help:"The command's words, after exec's own flags: one word is a shell script run with sh -c (microvm exec 'ls | wc -l'); several are an argv run directly (microvm exec uname -a), every word after the first taken as the command's, flags included. Omitted only with --poll."`
	Timeout    float64  `help:"Seconds to wait for the command before giving up client-side (the exec is left running)." default:"300"`
	Cwd        string   `help:"Working directory; omitted inherits the image WORKDIR, which is not the same as /." xor:"poll-cwd"`
	Env        []string `help:"KEY=VALUE for the command, repeatable, split at the first '='; these are laid over the launch env and are the child's whole environment beside it." placeholder:"KEY=VALUE" sep:"none" xor:"poll-env"`
	User       *uint32  `help:"Numeric uid to run as; omitted keeps the daemon's." placeholder:"UID" xor:"poll-user"`
	Group      *uint32  `help:"Numeric gid to run as; omitted keeps the daemon's." placeholder:"GID" xor:"poll-group"`
	ExecID     string   `name:"exec-id" help:"Use this exec id instead of a fresh one, so a retry never spawns twice." placeholder:"ID" xor:"poll-execid"`
	Poll       string   `help:"Read an existing exec's status and output; read-only, does not ack." placeholder:"ID" xor:"poll-execid,poll-stream,poll-stdin,poll-cwd,poll-detach,poll-env,poll-user,poll-group,poll-tty"`
	Detach     bool     `help:"Start the command and return at once with its exec id, without waiting or acking." xor:"poll-detach,detach-stream,detach-stdin,detach-tty"`
	Stream     bool     `help:"Stream output as it arrives; under --json each event is one NDJSON line, then a compact envelope." xor:"poll-stream,detach-stream,stream-tty"`
	FromOffset uint64   `name:"from-offset" help:"Resume a stream at this byte offset; requires --stream." placeholder:"BYTES"`
	Stdin      bool     `help:"Give the command a stdin pipe, feed it this process's stdin, then close it." xor:"poll-stdin,detach-stdin,stdin-tty"`
	TTY        bool     `name:"tty" help:"Run the command on a remote terminal of this terminal's size, interactively: this terminal goes raw (Ctrl-C goes to the command) and resizes follow. Needs a terminal on stdin; not with --json. --timeout does not apply: the session lasts until the command exits." xor:"poll-tty,detach-tty,stream-tty,stdin-tty"`
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
			return nil, invalidArg("", "--env %q is not KEY=VALUE (a missing '=' or an empty KEY)", p)
		}
		env[k] = v
	}
	return env, nil
}

func execData(r client.Result) cliapi.ExecData {
	d := cliapi.ExecData{ExecID: r.ExecID, Phase: string(r.Phase), Stdout: r.Stdout, Stderr: r.Stderr, Truncated: r.Truncated}
	if r.ExitCode != nil {
		v := int64(*r.ExitCode)
		d.ExitCode = &v
	}
	if r.Signal != nil {
		v := int64(*r.Signal)
		d.Signal = &v
	}
	return d
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
func execOutcome(r client.Result, human func(io.Writer) error) *result {
	d := execData(r)
	res := &result{typ: cliapi.TypeExec, data: d, human: human}
	if err := r.Err(); err != nil && !r.Running() {
		res.reporting(taxonomy.KindExecFailed, err.Error())
	}
	return res
}

func (c *ExecCmd) run(ctx context.Context, a *app) (*result, error) {
	// The words are passed through from the first one on, so a "--" that
	// separates them from exec's flags arrives as a word: it is not the
	// command's.
	if len(c.Command) > 0 && c.Command[0] == "--" {
		c.Command = c.Command[1:]
	}
	if c.FromOffset != 0 && !c.Stream {
		return nil, invalidArg("", "--from-offset requires --stream")
	}
	if c.Poll == "" && len(c.Command) == 0 {
		return nil, invalidArg("", "a command is required unless --poll names an existing exec")
	}
	if c.Poll != "" && len(c.Command) > 0 {
		return nil, invalidArg("", "--poll reads an existing exec; it takes no command")
	}
	if c.Timeout <= 0 {
		return nil, invalidArg("", "--timeout must be positive seconds, got %v", c.Timeout)
	}
	if err := requireText("the command's", c.Command); err != nil {
		return nil, err
	}
	if err := requireText("--env", c.Env); err != nil {
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
		return execOutcome(r, execHuman(execData(r))), nil
	}

	opts := client.StartOptions{ExecID: c.ExecID, Shell: len(c.Command) == 1, Cwd: c.Cwd, Env: env, User: c.User, Group: c.Group, Stdin: c.Stdin}
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
	stop := a.spinner("starting " + opts.ExecID)
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
		d := cliapi.ExecData{ExecID: ex.ID(), Phase: string(protocol.PhaseRunning)}
		return &result{typ: cliapi.TypeExec, data: d, human: func(w io.Writer) error {
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
		feed = &stdinFeed{ex: ex, r: a.stdin, stop: stopFeed}
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

// wait follows the exec to its exit, acks it and reports its record. Without
// --json the child's bytes go to stdout and stderr exactly as produced.
func (c *ExecCmd) wait(ctx context.Context, a *app, ex *client.Exec, p *client.Process, feed *stdinFeed) (*result, error) {
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
	raw := !a.g.JSON && !a.g.Dense
	if raw {
		outW, errW = a.stdout, a.stderr
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
		return nil, &failure{err: asClientError(ferr), data: execData(r)}
	}
	if err != nil {
		return nil, err
	}
	d := execData(r)
	if gaps := p.Gaps(); len(gaps) > 0 {
		// The record's output is incomplete; a caller reading it as the
		// whole output would be misled, so this is a failure, not a note.
		return nil, &failure{err: client.WireErrorf(taxonomy.WireOutputGap, "%d range(s) of output were lost before they were read (first [%d,%d))", len(gaps), gaps[0].From, gaps[0].To), data: d}
	}
	if serr := p.Err(); errors.Is(serr, client.ErrStreamCut) {
		// The stream gave up before its exit event: the bytes already written
		// out raw are a prefix, and the record's outcome says nothing about
		// the rest. As with a gap, the record rides along in data, but the
		// run is not reported as passing.
		return nil, &failure{err: asClientError(serr), data: d,
			suggestions: []string{fmt.Sprintf("data holds %s's record, acked: its status, and its output only up to the daemon's max_output_bytes; `microvm exec --stream` can resume a cut stream with --from-offset", ex.ID())}}
	}
	human := func(w io.Writer) error { return nil } // the bytes already went out raw
	if !raw {
		human = execHuman(d)
	}
	return execOutcome(r, human), nil
}

// stream writes the exec's events as they arrive: NDJSON under --json, the
// raw bytes otherwise. The final envelope summarises rather than repeats.
func (c *ExecCmd) stream(ctx context.Context, a *app, ex *client.Exec, st *client.Stream, feed *stdinFeed) (*result, error) {
	// Under --json the final envelope is one compact line even when no
	// event came before it (an interrupted quiet child, or an interrupt
	// while the stream is still connecting): a reader takes the last line
	// as the envelope.
	a.streamed = a.g.JSON
	if st == nil {
		st = ex.Stream(ctx, c.FromOffset)
	}
	defer st.Close()
	if err := st.Connect(); err == nil {
		feed.start(ctx)
	} // else the first Next returns the same error and ends the following
	sum := cliapi.ExecStreamData{ExecID: ex.ID(), NextOffset: int64(c.FromOffset)}
	sawExit := false
	enc := json.NewEncoder(a.stdout)
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
			if !a.g.JSON {
				w := a.stdout
				if ev.Stream == protocol.StreamStderr {
					w = a.stderr
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
			if a.g.JSON {
				line(cliapi.StreamGapLine{Event: cliapi.EventGap, From: int64(ev.Gap.From), To: int64(ev.Gap.To)})
			} else {
				a.warn("output [%d,%d) was lost before it was read", ev.Gap.From, ev.Gap.To)
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
			if a.g.JSON {
				var code, sig *int64
				if ev.Exit.ExitCode != nil {
					v := int64(*ev.Exit.ExitCode)
					code = &v
				}
				if ev.Exit.Signal != nil {
					v := int64(*ev.Exit.Signal)
					sig = &v
				}
				line(cliapi.StreamExitLine{Event: cliapi.EventExit, ExitCode: code, Signal: sig, Truncated: ev.Exit.Truncated,
					WritersMayBeAlive: ev.Exit.WritersMayBeAlive, Offset: int64(ev.Exit.Offset)})
			}
		}
	}
	if !a.g.JSON {
		// On the human path stdout holds the child's bytes; the summary and
		// any failure belong on stderr.
		a.streamed = true
	}
	if ferr := feed.failed(); ferr != nil {
		// Whether it ended the stream or came after the exit, the child
		// did not get all of its stdin; a resume would not feed it again.
		sum.NextOffset = int64(st.Cursor())
		return nil, &failure{err: asClientError(ferr), data: sum}
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
		return nil, &failure{err: err, data: cutData(sum), suggestions: c.resumeHints(ex.ID(), sum.NextOffset)}
	}
	if streamErr != nil {
		f := &failure{err: asClientError(streamErr), data: sum}
		if k := client.KindOf(streamErr); k == taxonomy.KindTimeout || k == taxonomy.KindRetryable || k == taxonomy.KindInterrupted {
			// The deadline passed, the caller interrupted, or the connection
			// never opened: the exec was left as it was and the stream
			// resumes at the same offset.
			f.suggestions = c.resumeHints(ex.ID(), sum.NextOffset)
		}
		return nil, f
	}
	// Release the output now that every byte was delivered, so nothing
	// lingers on the daemon; a failed ack is reported, never swallowed.
	// (The run route already released it with the exit event.)
	if !st.Released() {
		if err := ex.Release(ctx); err != nil && !errors.Is(err, client.WireKindError(taxonomy.WireConflict)) {
			return nil, &failure{err: asClientError(err), data: sum}
		}
	}
	res := &result{typ: cliapi.TypeExecStream, data: sum, human: func(io.Writer) error { return nil }}
	if sum.ExitCode == nil || *sum.ExitCode != 0 {
		res.reporting(taxonomy.KindExecFailed, fmt.Sprintf("%s did not exit 0 (%s)", ex.ID(), exitText(sum.ExitCode)))
	}
	return res, nil
}

// cutData is the stream summary of a cut stream with the wire kind the cut
// came from: ERR_EXEC_FAILED is coarser than "the transport kept dropping",
// and data.kind is where the envelope says what the exit code cannot.
func cutData(sum cliapi.ExecStreamData) map[string]any {
	m := toMap(sum)
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

// shellQuote makes w one word for a POSIX shell.
func shellQuote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

func exitText(code *int64) string {
	if code == nil {
		return "no exit code: a signal ended it"
	}
	return "exit " + strconv.FormatInt(*code, 10)
}

// HealthCmd reads the daemon's health.
type HealthCmd struct {
	AttachFlags
}

func (c *HealthCmd) run(ctx context.Context, a *app) (*result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	h, err := s.Health(ctx)
	if err != nil {
		return nil, err
	}
	if h.Bootstrapped {
		// /v1/health is open, so it answers a wrong token too. Every other
		// command would then fail with 401: ask once with the token, for an
		// exec id no one uses, where "no such exec" means the token was
		// accepted.
		_, err := s.Exec("microvm-health-token-check").Poll(ctx)
		if err != nil && !errors.Is(err, client.WireKindError(taxonomy.WireNotFound)) {
			return nil, err
		}
	}
	d := cliapi.HealthData{Version: h.Version, Bootstrapped: h.Bootstrapped, IdentityDegraded: h.IdentityDegraded,
		IdentityRepaired: h.IdentityRepaired, Busy: h.Busy, Execs: int64(h.Execs)}
	if h.Disk != nil {
		avail, press := int64(h.Disk.AvailableBytes), h.Disk.UnderPressure
		d.DiskAvailableBytes, d.DiskUnderPressure = &avail, &press
	}
	return &result{typ: cliapi.TypeHealth, data: d, human: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintf(tw, "version\t%s\nbootstrapped\t%t\nbusy\t%t\nexecs\t%d\nidentity repaired\t%t\nidentity degraded\t%t\n",
			d.Version, d.Bootstrapped, d.Busy, d.Execs, d.IdentityRepaired, d.IdentityDegraded)
		if d.DiskAvailableBytes != nil {
			fmt.Fprintf(tw, "disk available\t%s\ndisk under pressure\t%t\n", humanBytes(*d.DiskAvailableBytes), *d.DiskUnderPressure)
		} else {
			fmt.Fprintln(tw, "disk available\tunknown")
		}
		return tw.Flush()
	}}, nil
}

// AckCmd releases an exec's output.
type AckCmd struct {
	AttachFlags
	ExecID string `arg:"" name:"exec-id" help:"The exec whose output to release."`
}

func (c *AckCmd) run(ctx context.Context, a *app) (*result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	r, err := s.Exec(c.ExecID).Ack(ctx)
	if err != nil {
		return nil, err
	}
	d := execData(r)
	return &result{typ: cliapi.TypeExec, data: d, human: execHuman(d)}, nil
}

// StdinCmd writes to an exec's stdin.
type StdinCmd struct {
	AttachFlags
	ExecID string  `arg:"" name:"exec-id" help:"The exec to write to; it must have been started with exec --stdin."`
	Data   *string `help:"What to write; '-' reads this process's stdin; omitted writes nothing." placeholder:"DATA"`
	EOF    bool    `name:"eof" help:"Close stdin after any --data is written."`
}

func (c *StdinCmd) run(ctx context.Context, a *app) (*result, error) {
	if c.Data == nil && !c.EOF {
		return nil, invalidArg("", "nothing to do: pass --data, --eof, or both")
	}
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	ex := s.Exec(c.ExecID)
	var r io.Reader = strings.NewReader("")
	if c.Data != nil {
		r = strings.NewReader(*c.Data)
		if *c.Data == "-" {
			r = a.stdin
		}
	}
	written, err := ex.CopyStdin(ctx, r, c.EOF)
	if err != nil {
		if client.KindOf(err) == taxonomy.KindInvalidArg && written == 0 {
			return nil, err
		}
		return nil, &failure{err: asClientError(err), data: cliapi.StdinData{ExecID: c.ExecID, Written: written}}
	}
	d := cliapi.StdinData{ExecID: c.ExecID, Written: written, EOF: c.EOF}
	return &result{typ: cliapi.TypeStdin, data: d, human: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s: wrote %s%s\n", d.ExecID, humanBytes(d.Written), map[bool]string{true: ", stdin closed"}[d.EOF])
		return err
	}}, nil
}

// CpCmd copies a file or a tar between here and the VM.
type CpCmd struct {
	AttachFlags
	Src     string `arg:"" help:"Source: vm:/path reads from the VM, anything else is a local path."`
	Dst     string `arg:"" help:"Destination: vm:/path writes to the VM, anything else is a local path."`
	Tar     bool   `help:"Move a directory tree as an uncompressed tar: the vm: side is a directory, the local side a .tar file." xor:"tar-mode,tar-parents,tar-sync"`
	Mode    string `help:"Octal permissions for an uploaded file; a tar carries its members' own." placeholder:"OCTAL" xor:"tar-mode"`
	Parents bool   `help:"Create the uploaded file's missing parent directories on the VM; without it a missing parent is refused." xor:"tar-parents"`
	Sync    bool   `help:"Return only once the uploaded file is on the VM's disk (fsync of the file and its directory); without it the copy ends once the file is whole under its name in the VM's page cache." xor:"tar-sync"`
}

const vmPrefix = "vm:"

func (c *CpCmd) run(ctx context.Context, a *app) (*result, error) {
	srcVM, dstVM := strings.HasPrefix(c.Src, vmPrefix), strings.HasPrefix(c.Dst, vmPrefix)
	if srcVM == dstVM {
		return nil, invalidArg("", "exactly one of SRC and DST must be vm:/path (got %q and %q)", c.Src, c.Dst)
	}
	remote := strings.TrimPrefix(c.Src, vmPrefix)
	if dstVM {
		remote = strings.TrimPrefix(c.Dst, vmPrefix)
	}
	if !strings.HasPrefix(remote, "/") {
		// agentd would resolve it against its own working directory, which
		// is nothing the caller chose.
		return nil, invalidArg("", "vm:%s is relative: a vm: path is absolute in the guest, e.g. vm:/%s", remote, strings.TrimPrefix(remote, "./"))
	}
	if dstVM {
		st, err := os.Stat(c.Src)
		switch {
		case err != nil:
			return nil, invalidArg("", "%v", err)
		case st.IsDir() && !c.Tar:
			return nil, invalidArg("", "%s is a directory: copy a tree with --tar, from a .tar of it (tar -cf tree.tar -C %s .)", c.Src, shellQuote(c.Src))
		case st.IsDir():
			return nil, invalidArg("", "%s is a directory: with --tar the local side is a .tar archive (tar -cf tree.tar -C %s .)", c.Src, shellQuote(c.Src))
		case !st.Mode().IsRegular():
			return nil, invalidArg("", "%s is not a regular file", c.Src)
		}
	}
	var mode os.FileMode
	if c.Mode != "" {
		if !srcVM {
			m, err := strconv.ParseUint(c.Mode, 8, 32)
			if err != nil || m > 0o7777 {
				return nil, invalidArg("", "--mode %q is not octal permission bits", c.Mode)
			}
			mode = os.FileMode(m)
		} else {
			return nil, invalidArg("", "--mode applies to an upload only")
		}
	}
	if c.Sync && srcVM {
		return nil, invalidArg("", "--sync applies to an upload only")
	}
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	d := cliapi.CopyData{Tar: c.Tar}
	if dstVM {
		d.Direction, d.Local, d.Remote = "upload", c.Src, strings.TrimPrefix(c.Dst, vmPrefix)
		f, err := os.Open(d.Local)
		if err != nil {
			return nil, invalidArg("", "opening %s: %v", d.Local, err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			d.Bytes = st.Size()
		}
		if !c.Tar && !c.Parents {
			// The daemon creates missing parents; a typo in a directory
			// name would then make a new tree instead of failing.
			if err := c.parentExists(ctx, s, d.Remote); err != nil {
				return nil, err
			}
		}
		sent, done := a.transferBar("upload " + c.Src)
		// Counted only when a bar is drawn: the file itself keeps the
		// client's fast path (its size as Content-Length, sendfile).
		var body io.Reader = f
		if a.barOn() {
			body = &countingReader{r: f, total: d.Bytes, sent: sent}
		}
		if c.Tar {
			err = s.WriteTar(ctx, d.Remote, body)
		} else if c.Sync {
			err = s.WriteFileDurable(ctx, d.Remote, body, mode)
		} else {
			err = s.WriteFile(ctx, d.Remote, body, mode)
		}
		sent(d.Bytes, d.Bytes)
		done(err == nil)
		if err != nil {
			return nil, err
		}
	} else {
		d.Direction, d.Local, d.Remote = "download", c.Dst, strings.TrimPrefix(c.Src, vmPrefix)
		// Written to a temporary sibling and renamed, so a failed download
		// never leaves a half file under the name the caller asked for.
		tmp, err := os.CreateTemp(dirOf(d.Local), ".microvm-cp-*")
		if err != nil {
			return nil, invalidArg("", "creating %s: %v", d.Local, err)
		}
		defer os.Remove(tmp.Name())
		var n int64
		sent, done := a.transferBar("download " + c.Src)
		sink := &countingWriter{w: tmp, total: -1, sent: sent}
		if c.Tar {
			n, err = s.ReadTar(ctx, d.Remote, sink)
		} else {
			n, err = s.ReadFile(ctx, d.Remote, sink, client.LineRange{})
		}
		done(err == nil)
		if cerr := tmp.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		if err := os.Rename(tmp.Name(), d.Local); err != nil {
			return nil, invalidArg("", "writing %s: %v", d.Local, err)
		}
		d.Bytes = n
	}
	return &result{typ: cliapi.TypeCopy, data: d, human: func(w io.Writer) error {
		arrow := map[string]string{"upload": "->", "download": "<-"}[d.Direction]
		_, err := fmt.Fprintf(w, "%s %s vm:%s  %s\n", d.Local, arrow, d.Remote, humanBytes(d.Bytes))
		return err
	}}, nil
}

// parentExists refuses an upload whose parent directory is missing on the
// VM. Protocol v1 has no stat: reading a directory as a file answers 400
// (it exists), a missing path 404; only the first line is asked for, in
// case the parent is a file.
func (c *CpCmd) parentExists(ctx context.Context, s *client.Session, remote string) error {
	parent := dirOf(remote)
	if parent == "/" {
		return nil
	}
	_, err := s.ReadFile(ctx, parent, io.Discard, client.LineRange{Start: 1, End: 1})
	switch {
	case err == nil:
		return invalidArg("", "vm:%s is a file, not a directory", parent)
	case errors.Is(err, client.WireKindError(taxonomy.WireProtocolError)):
		return nil // a directory
	case errors.Is(err, client.WireKindError(taxonomy.WireNotFound)):
		return client.Errorf(taxonomy.KindPrecondition, "", "vm:%s does not exist, so vm:%s has nowhere to go; pass --parents to create it", parent, remote)
	}
	return err
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		if i == 0 {
			return "/"
		}
		return path[:i]
	}
	return "."
}
