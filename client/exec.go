package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// NewExecID mints an exec id: an idempotency key, distinct rather than
// secret, so a retried start with it never spawns a second child.
func NewExecID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "x-" + hex.EncodeToString(b[:])
}

// StartOptions shape one exec. The zero value runs argv directly, in the
// daemon's working directory, with the launch env, no stdin and no timeout.
type StartOptions struct {
	ExecID string // idempotency key; empty means NewExecID()
	// Shell runs command[0] through sh -c. The command must then be exactly
	// one string: a second element would be dropped by the shell, so Start
	// refuses it.
	Shell bool
	Cwd   string            // empty means the daemon's own (the image WORKDIR)
	Env   map[string]string // laid over the launch env
	User  *uint32           // numeric uid; nil keeps the daemon's
	Group *uint32           // numeric gid; nil keeps the daemon's
	// DaemonTimeout is the budget agentd enforces inside the VM: past it the
	// daemon kills the child and records the kill. 0 means none. It is not
	// the client's deadline (RunOptions.ClientTimeout), which stops waiting
	// and leaves the child running.
	DaemonTimeout time.Duration
	Stdin         bool // give the child a writable stdin pipe
	// TTY runs the child on a pseudo-terminal of this size: its
	// output is all stdout, WriteStdin types into it, Exec.Resize sizes it.
	TTY *protocol.TTYSize
	// Limits bound the exec's memory, CPU and process count, enforced by
	// the guest kernel in the exec's own cgroup. A guest that cannot apply
	// them refuses the start (limits_unavailable) rather than run unlimited.
	Limits *protocol.ExecLimits
}

// NewExecLimits is StartOptions.Limits from counts a caller gives as plain
// integers (a flag, an MCP argument, an engine field): nil when all are
// zero (no limit), an InvalidArg error for a negative one. CPU and process
// counts past what the wire's 32 bits hold are clamped, never wrapped.
func NewExecLimits(memoryBytes, cpuMillicores, pids int64) (*protocol.ExecLimits, error) {
	if memoryBytes < 0 || cpuMillicores < 0 || pids < 0 {
		return nil, Errorf(taxonomy.KindInvalidArg, "", "a limit cannot be negative (memory %d, cpu %d, pids %d); zero is no limit", memoryBytes, cpuMillicores, pids)
	}
	if memoryBytes == 0 && cpuMillicores == 0 && pids == 0 {
		return nil, nil
	}
	l := &protocol.ExecLimits{}
	if memoryBytes > 0 {
		v := uint64(memoryBytes)
		l.MemoryBytes = &v
	}
	if cpuMillicores > 0 {
		v := uint32(min(cpuMillicores, 1<<20))
		l.CPUMillicores = &v
	}
	if pids > 0 {
		v := uint32(min(pids, 1<<22))
		l.Pids = &v
	}
	return l, nil
}

// Exec addresses one exec by its caller-minted id. The id is the whole
// handle: rebuild one with Session.Exec after a restart and it still
// addresses the same server-side record.
type Exec struct {
	s  *Session
	id string
}

// Exec returns a handle for an existing exec id.
func (s *Session) Exec(id string) *Exec { return &Exec{s: s, id: id} }

// ID is the exec id.
func (e *Exec) ID() string { return e.id }

// Start starts command. A retry after a dropped connection reuses the same
// exec_id, so the daemon never spawns twice.
func (s *Session) Start(ctx context.Context, command []string, o StartOptions) (*Exec, error) {
	req, err := startRequest(command, o)
	if err != nil {
		return nil, err
	}
	resp, err := s.send(ctx, call{op: protocol.OpExecStart, command: command,
		build: func(server string) (*http.Request, error) { return protocol.NewExecStartRequest(server, req) }})
	if err != nil {
		return nil, err
	}
	var sr protocol.StartResponse
	if err := decodeJSON(protocol.OpExecStart, resp, &sr); err != nil {
		return nil, err
	}
	return &Exec{s: s, id: req.ExecID}, nil
}

// startRequest builds the start request of command, refusing what the
// daemon would refuse for a reason the caller can fix before sending.
func startRequest(command []string, o StartOptions) (protocol.StartRequest, error) {
	if len(command) == 0 {
		return protocol.StartRequest{}, Errorf(taxonomy.KindInvalidArg, "", "an exec needs a command")
	}
	if o.Shell && len(command) > 1 {
		// sh -c takes one script; agentd runs command[0] and the rest would
		// vanish without a word.
		return protocol.StartRequest{}, Errorf(taxonomy.KindInvalidArg, "", "Shell runs one script string, but the command has %d elements %q; join them into one string (%q) or set Shell false to run argv directly",
			len(command), command, strings.Join(command, " "))
	}
	id := o.ExecID
	if id == "" {
		id = NewExecID()
	}
	req := protocol.StartRequest{ExecID: id, Command: command, Shell: o.Shell, Env: o.Env, User: o.User, Group: o.Group, Stdin: o.Stdin, Tty: o.TTY, Limits: o.Limits}
	if o.Cwd != "" {
		req.Cwd = &o.Cwd
	}
	if o.DaemonTimeout > 0 {
		sec := o.DaemonTimeout.Seconds()
		req.TimeoutSec = &sec
	}
	return req, nil
}

// Result is an exec's record: its phase and, once it has exited, its outcome.
type Result struct {
	ExecID string
	Phase  protocol.Phase
	// ExitStatus is the outcome as one plain int, the way a shell reports
	// it: the exit code, 128+N when signal N ended the child, and -1 while
	// it runs or when the record holds no status.
	ExitStatus int
	ExitCode   *int32 // nil while running, or when a signal ended the child
	Signal     *int32
	// Stdout and Stderr are the output as the record carries it: JSON text,
	// with invalid UTF-8 replaced by U+FFFD. Session.Run fills them with the
	// exact streamed bytes instead when the stream delivered all of them.
	Stdout, Stderr    string
	Truncated         bool // a stream reached the daemon's output cap and was cut
	WritersMayBeAlive bool // a descendant may still hold the pipes
	// Usage is what the exec used (CPU, peak memory, output bytes, wall
	// time), nil while it runs or from a daemon that reports none.
	Usage *protocol.ExecUsage
	// OOMKilled: the kernel killed the exec for going over Limits.MemoryBytes.
	OOMKilled bool
}

func resultOf(p protocol.PollResponse) Result {
	r := Result{ExecID: p.ExecID, Phase: p.Phase, ExitCode: p.ExitCode, Signal: p.Signal, ExitStatus: -1}
	switch {
	case p.Phase == protocol.PhaseRunning:
	case p.ExitCode != nil:
		r.ExitStatus = int(*p.ExitCode)
	case p.Signal != nil:
		r.ExitStatus = 128 + int(*p.Signal)
	}
	if p.Stdout != nil {
		r.Stdout = *p.Stdout
	}
	if p.Stderr != nil {
		r.Stderr = *p.Stderr
	}
	if p.Truncated != nil {
		r.Truncated = *p.Truncated
	}
	if p.WritersMayBeAlive != nil {
		r.WritersMayBeAlive = *p.WritersMayBeAlive
	}
	r.Usage = p.Usage
	if p.OomKilled != nil {
		r.OOMKilled = *p.OomKilled
	}
	return r
}

// Running reports whether the child (or a descendant holding its pipes) is
// still alive.
func (r Result) Running() bool { return r.Phase == protocol.PhaseRunning }

// Success reports an exit with status 0.
func (r Result) Success() bool { return r.ExitCode != nil && *r.ExitCode == 0 && r.Signal == nil }

// Err is nil for a successful exit and an ExecFailed *Error otherwise, so a
// killed command cannot read as passing.
func (r Result) Err() error {
	switch {
	case r.Running():
		return Errorf(taxonomy.KindUnexpected, "", "exec %s has not exited", r.ExecID)
	case r.Success():
		return nil
	case r.Signal != nil:
		return Errorf(taxonomy.KindExecFailed, "", "exec %s was ended by signal %d", r.ExecID, *r.Signal)
	case r.ExitCode != nil:
		return Errorf(taxonomy.KindExecFailed, "", "exec %s exited with status %d", r.ExecID, *r.ExitCode)
	}
	return Errorf(taxonomy.KindExecFailed, "", "exec %s ended with no status", r.ExecID)
}

func (e *Exec) record(ctx context.Context, op string, build func(string, string) (*http.Request, error)) (Result, error) {
	resp, err := e.s.send(ctx, call{op: op,
		build: func(server string) (*http.Request, error) { return build(server, e.id) }})
	if err != nil {
		return Result{}, err
	}
	var p protocol.PollResponse
	if err := decodeRecord(op, resp, &p); err != nil {
		return Result{}, err
	}
	return resultOf(p), nil
}

// Poll reads the exec's record without changing it.
func (e *Exec) Poll(ctx context.Context) (Result, error) {
	return e.record(ctx, protocol.OpExecPoll, protocol.NewExecPollRequest)
}

// Ack takes the exec's output and starts the daemon's collection clock. It is
// the one call that is not repeated after a dropped connection: a second ack
// answers already_acked and the output would be gone.
func (e *Exec) Ack(ctx context.Context) (Result, error) {
	return e.record(ctx, protocol.OpExecAck, protocol.NewExecAckRequest)
}

// Release acks the exec for a caller that already holds its output, having
// followed the stream to its exit event. The daemon's answer echoes up to
// max_output_bytes of each stream as JSON (8 MiB of NUL bytes is 48 MiB of
// it); Release reads at most 64 KiB of that answer and then drops the
// connection instead of decoding it, which was a quarter of what
// `microvm exec --stream` spent on 256 MiB of output. Its errors are Ack's:
// already_acked, still_running. Like Ack it is never repeated.
func (e *Exec) Release(ctx context.Context) error {
	resp, err := e.s.send(ctx, call{op: protocol.OpExecAck,
		build: func(server string) (*http.Request, error) { return protocol.NewExecAckRequest(server, e.id) }})
	if err != nil {
		return err
	}
	// A small answer is drained so the connection can be reused; a large
	// one is cut, and the daemon stops writing it.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	return resp.Body.Close()
}

// Kill signals the exec's process group (SIGTERM, then SIGKILL after the
// daemon's grace period). It reports false when the group had already gone,
// which is also success; a repeat is safe.
func (e *Exec) Kill(ctx context.Context) (bool, error) {
	resp, err := e.s.send(ctx, call{op: protocol.OpExecKill,
		build: func(server string) (*http.Request, error) { return protocol.NewExecKillRequest(server, e.id) }})
	if err != nil {
		return false, err
	}
	var k protocol.KillResponse
	if err := decodeJSON(protocol.OpExecKill, resp, &k); err != nil {
		return false, err
	}
	return k.Killed, nil
}

func (e *Exec) stdin(ctx context.Context, data []byte, eof bool) (protocol.StdinResponse, error) {
	var req protocol.StdinRequest
	if len(data) > 0 {
		s := base64.StdEncoding.EncodeToString(data)
		req.DataB64 = &s
	}
	if eof {
		s := "eof"
		req.Signal = &s
	}
	var out protocol.StdinResponse
	// Not retried: a 408 may have written part of the data.
	resp, err := e.s.send(ctx, call{op: protocol.OpExecStdin,
		build: func(server string) (*http.Request, error) { return protocol.NewExecStdinRequest(server, e.id, req) }})
	if err != nil {
		return out, err
	}
	return out, decodeJSON(protocol.OpExecStdin, resp, &out)
}

// WriteStdin writes p to the exec's stdin and reports how many bytes went
// into the pipe. The exec must have been started with Stdin.
func (e *Exec) WriteStdin(ctx context.Context, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) > protocol.DefaultMaxStdinWriteBytes {
		return 0, Errorf(taxonomy.KindInvalidArg, "", "one stdin write of %d bytes is over the daemon's %d-byte cap; split it", len(p), protocol.DefaultMaxStdinWriteBytes)
	}
	r, err := e.stdin(ctx, p, false)
	return int(r.Written), err
}

// CloseStdin closes the exec's stdin, so a child reading to EOF can finish.
func (e *Exec) CloseStdin(ctx context.Context) error {
	_, err := e.stdin(ctx, nil, true)
	return err
}

// WriteStdinAndClose writes p and closes stdin in one request (data_b64 and
// signal "eof" together), so a last chunk costs one round trip and no other
// writer can slip in between the data and the EOF. It reports how many bytes
// went into the pipe. An empty p only closes, as CloseStdin does. When the
// write fails (a 408 after a partial write, say) stdin is left open: the
// daemon closes only after the whole chunk was written.
func (e *Exec) WriteStdinAndClose(ctx context.Context, p []byte) (int, error) {
	if len(p) > protocol.DefaultMaxStdinWriteBytes {
		return 0, Errorf(taxonomy.KindInvalidArg, "", "one stdin write of %d bytes is over the daemon's %d-byte cap; write the head with WriteStdin and close with the tail", len(p), protocol.DefaultMaxStdinWriteBytes)
	}
	r, err := e.stdin(ctx, p, true)
	return int(r.Written), err
}

// timeoutOr classifies a failure caused by ctx ending: the Timeout kind
// when its deadline passed, the Interrupted kind when it was cancelled (see
// ctxErr). The message names the exec id so the caller can reattach.
func timeoutOr(ctx context.Context, id string, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	what := " before the exec started"
	if id != "" {
		// The id is the handle a caller reattaches by; how to reattach is the
		// caller's vocabulary (a CLI flag, a library call), so it is not named here.
		what = fmt.Sprintf("; exec %s was left running", id)
	}
	how := "cancelled"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		how = "client-side deadline"
	}
	return ctxErr(ctx.Err(), "%s: %v%s", how, ctx.Err(), what)
}

// waitUntilExited polls with backoff until the record leaves running.
func (e *Exec) waitUntilExited(ctx context.Context) (Result, error) {
	delay := 20 * time.Millisecond
	for {
		r, err := e.Poll(ctx)
		if err != nil {
			// A poll cut short by ctx names the exec, as a cut sleep does.
			return r, timeoutOr(ctx, e.id, err)
		}
		if !r.Running() {
			return r, nil
		}
		if err := sleepCtx(ctx, delay); err != nil {
			return Result{}, timeoutOr(ctx, e.id, err)
		}
		delay = min(delay*2, e.s.pollEvery)
	}
}

// waitAck waits for the record to say exited, then acks it. The outcome is
// read from the record, never inferred from a stream ending. The exited
// poll already carried the whole record (nothing in it changes after the
// exit), so the ack is a Release: the output is not transferred and
// decoded a second time, which for an 8 MiB head of NUL bytes was 48 MiB of
// JSON each way.
func (e *Exec) waitAck(ctx context.Context) (Result, error) {
	r, err := e.waitUntilExited(ctx)
	if err != nil {
		return Result{}, err
	}
	return e.releaseWith(ctx, r)
}

// releaseWith acks the exec and returns r, its exited record, as the ack's
// answer would have carried it.
func (e *Exec) releaseWith(ctx context.Context, r Result) (Result, error) {
	if err := e.Release(ctx); err != nil {
		return Result{}, err
	}
	r.Phase = protocol.PhaseAcked
	return r, nil
}
