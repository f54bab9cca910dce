package mcpserver

// Background commands as MCP tools: start, read from an offset, signal.
// A command started here is the daemon's detached exec, so it outlives the
// tool call that started it and ends with its sandbox at the latest (the
// session's teardown terminates every sandbox it holds).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/mcpapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// defaultOutputWait is how long sandbox_exec_output waits when wait_sec is
// left out: long enough for output the command has already printed to
// cross the stream, short enough to read as "now".
const defaultOutputWait = 200 * time.Millisecond

// runningSession is the sandbox's session, refused unless it runs.
func (st *mcpSession) runningSession(id string) (*client.Session, error) {
	b, err := st.box(id)
	if err != nil {
		return nil, err
	}
	sess := b.sb.Session()
	if sess == nil || b.sb.Lifecycle() != "RUNNING" {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "sandbox %s is %s, not RUNNING; sandbox_resume it first", b.sb.ID(), b.sb.Lifecycle())
	}
	return sess, nil
}

func (s *mcpServer) execStart(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxExecStartArgs) (mcpapi.SandboxExecStartResult, string, error) {
	var out mcpapi.SandboxExecStartResult
	// The same arguments as sandbox_exec (api/mcp.yaml's one list), so the
	// same checks.
	o, err := execStartOptions(mcpapi.SandboxExecArgs(in))
	if err != nil {
		return out, "", err
	}
	sess, err := st.runningSession(in.SandboxID)
	if err != nil {
		return out, "", err
	}
	ex, err := sess.Start(ctx, []string{in.Command}, o)
	if err != nil {
		return out, "", err
	}
	out.ExecID, out.SandboxID = ex.ID(), in.SandboxID
	return out, fmt.Sprintf("started %s in %s; read its output with sandbox_exec_output, stop it with sandbox_exec_kill", ex.ID(), in.SandboxID), nil
}

func (s *mcpServer) execOutput(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxExecOutputArgs) (mcpapi.SandboxExecOutputResult, string, error) {
	out := mcpapi.SandboxExecOutputResult{ExecID: in.ExecID, NextOffset: in.Offset, Running: true}
	switch {
	case in.ExecID == "":
		return out, "", render.InvalidArg("", "exec_id is empty (sandbox_exec_start returns it)")
	case in.Offset < 0:
		return out, "", render.InvalidArg("", "offset %d is negative", in.Offset)
	case in.WaitSec < 0 || in.WaitSec > mcpapi.MaxWaitSec:
		return out, "", render.InvalidArg("", "wait_sec %v is outside 0..%d", in.WaitSec, mcpapi.MaxWaitSec)
	}
	sess, err := st.runningSession(in.SandboxID)
	if err != nil {
		return out, "", err
	}
	wait := defaultOutputWait
	if in.WaitSec > 0 {
		wait = time.Duration(in.WaitSec * float64(time.Second))
	}
	ex := sess.Exec(in.ExecID)
	// The read ends at the exit, at the caps, or when wait runs out; the
	// last is this call's answer, not a failure.
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	stream := ex.Stream(rctx, uint64(in.Offset))
	defer stream.Close()
	r := readWindow(stream, uint64(in.Offset), mcpapi.MaxOutputBytes)
	if r.err != nil && (rctx.Err() == nil || ctx.Err() != nil) {
		return out, "", r.err
	}
	out.Stdout = strings.ToValidUTF8(string(r.stdout), "\uFFFD")
	out.Stderr = strings.ToValidUTF8(string(r.stderr), "\uFFFD")
	out.NextOffset, out.LostBytes, out.More = int64(r.next), int64(r.lost), r.more
	if e := r.exit; e != nil {
		out.Running = false
		out.ExitCode, out.Signal = render.Int64Of(e.ExitCode), render.Int64Of(e.Signal)
		out.OomKilled = e.OomKilled != nil && *e.OomKilled
		// Every byte up to the exit was handed over: release the daemon's
		// copy, as sandbox_exec does, so finished commands do not pile up.
		if err := ex.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, client.WireKindError(taxonomy.WireConflict)) {
			s.logf("%s: releasing %s: %v", st.name, in.ExecID, err)
		}
	}
	return out, renderOutput(out), nil
}

// window is one sandbox_exec_output read: the output from an offset up to a
// cap per stream, the bytes the daemon no longer held, the exit if it came.
type window struct {
	stdout, stderr []byte
	next, lost     uint64
	more           bool
	exit           *protocol.ExitEvent
	err            error
}

// readWindow reads stream, which starts at offset, until the exit, an
// error (the wait running out among them), or a stream's cap: an event
// that would pass the cap is cut there, and next says where its rest
// starts, since both streams share one byte count.
func readWindow(stream interface {
	Next() (client.Event, error)
}, offset uint64, capBytes int) window {
	w := window{next: offset}
	for {
		ev, err := stream.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				w.err = err
			}
			return w
		}
		switch ev.Kind {
		case client.EventOutput:
			buf := &w.stdout
			if ev.Stream == protocol.StreamStderr {
				buf = &w.stderr
			}
			if ev.Offset > w.next {
				w.lost += ev.Offset - w.next // a skip the stream did not name
			}
			take := min(len(ev.Data), capBytes-len(*buf))
			*buf = append(*buf, ev.Data[:take]...)
			w.next = ev.Offset + uint64(take)
			if take < len(ev.Data) {
				w.more = true
				return w
			}
		case client.EventGap:
			if ev.Gap.To > w.next {
				w.lost += ev.Gap.To - w.next
				w.next = ev.Gap.To
			}
		case client.EventExit:
			e := ev.Exit
			w.exit = &e
			return w
		}
	}
}

// renderOutput is a sandbox_exec_output result as an agent reads it in text.
func renderOutput(r mcpapi.SandboxExecOutputResult) string {
	var b strings.Builder
	switch {
	case r.Running:
		b.WriteString("still running")
	case r.ExitCode != nil:
		fmt.Fprintf(&b, "exited with code %d", *r.ExitCode)
	case r.Signal != nil:
		fmt.Fprintf(&b, "killed by signal %d", *r.Signal)
	default:
		b.WriteString("ended with no exit status")
	}
	fmt.Fprintf(&b, "; next_offset %d", r.NextOffset)
	for _, s := range []struct{ name, text string }{{"stdout", r.Stdout}, {"stderr", r.Stderr}} {
		if s.text != "" {
			fmt.Fprintf(&b, "\n--- %s ---\n%s", s.name, s.text)
		}
	}
	if r.LostBytes > 0 {
		fmt.Fprintf(&b, "\n[%d bytes lost: the daemon's output window moved past them before this read]", r.LostBytes)
	}
	if r.More {
		b.WriteString("\n[more output is waiting: read again from next_offset]")
	}
	if r.OomKilled {
		b.WriteString("\n[killed by the kernel: over its memory limit]")
	}
	return b.String()
}

func (s *mcpServer) execKill(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxExecKillArgs) (mcpapi.SandboxExecKillResult, string, error) {
	out := mcpapi.SandboxExecKillResult{ExecID: in.ExecID}
	if in.ExecID == "" {
		return out, "", render.InvalidArg("", "exec_id is empty (sandbox_exec_start returns it)")
	}
	sess, err := st.runningSession(in.SandboxID)
	if err != nil {
		return out, "", err
	}
	ex := sess.Exec(in.ExecID)
	if in.Signal == "" {
		out.Delivered, err = ex.Kill(ctx)
	} else {
		out.Delivered, err = ex.Signal(ctx, in.Signal)
	}
	if err != nil {
		return out, "", err
	}
	what := "stopped"
	if in.Signal != "" {
		what = "sent " + in.Signal
	}
	if !out.Delivered {
		return out, in.ExecID + " had already ended", nil
	}
	return out, what + ": " + in.ExecID, nil
}
