package mcpserver

// The MCP tools that talk to a sandbox's agentd: exec with progress, and
// files. Limits are gen/mcpapi's (api/mcp.yaml).

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/mcpapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// cappedOutput keeps the first MaxOutputBytes of one stream and counts the rest.
type cappedOutput struct {
	kept  []byte
	total int64
}

func (c *cappedOutput) add(p []byte) {
	c.total += int64(len(p))
	if room := mcpapi.MaxOutputBytes - len(c.kept); room > 0 {
		c.kept = append(c.kept, p[:min(room, len(p))]...)
	}
}

func (c *cappedOutput) dropped() int64 { return c.total - int64(len(c.kept)) }

// progress sends notifications/progress for one call when its caller gave a
// progress token; each notification's progress is larger than the last.
type progress struct {
	ctx   context.Context
	ss    *mcp.ServerSession
	token any

	mu    sync.Mutex
	count float64
}

func newProgress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	if req == nil || req.Params == nil || req.Session == nil {
		return nil
	}
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return nil
	}
	return &progress{ctx: ctx, ss: req.Session, token: tok}
}

func (p *progress) send(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count++
	_ = p.ss.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.count, Message: fmt.Sprintf(format, args...)})
}

// execStartOptions turns the call's arguments into the library's: always
// through the shell, since an agent writes a command line.
func execStartOptions(in mcpapi.SandboxExecArgs) (client.StartOptions, error) {
	if strings.TrimSpace(in.Command) == "" {
		return client.StartOptions{}, render.InvalidArg("", "command is empty")
	}
	if in.TimeoutSec < 0 {
		return client.StartOptions{}, render.InvalidArg("", "timeout_sec %v is negative", in.TimeoutSec)
	}
	o := client.StartOptions{Shell: true, Cwd: in.Cwd, DaemonTimeout: time.Duration(in.TimeoutSec * float64(time.Second))}
	limits, err := client.NewExecLimits(in.MemoryLimitBytes, in.CPUMillicores, in.PidsLimit)
	if err != nil {
		return o, err
	}
	o.Limits = limits
	for _, id := range []struct {
		name string
		v    int64
		to   **uint32
	}{{"user", in.User, &o.User}, {"group", in.Group, &o.Group}} {
		if id.v < 0 || id.v > math.MaxUint32 {
			return o, render.InvalidArg("", "%s %d is not a numeric id (0..%d)", id.name, id.v, uint32(math.MaxUint32))
		}
		if id.v > 0 {
			n := uint32(id.v)
			*id.to = &n
		}
	}
	for k, v := range in.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return o, render.InvalidArg("", "env name %q is not a variable name", k)
		}
		if o.Env == nil {
			o.Env = map[string]string{}
		}
		o.Env[k] = v
	}
	return o, nil
}

func (s *mcpServer) exec(ctx context.Context, req *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxExecArgs) (mcpapi.SandboxExecResult, string, error) {
	var out mcpapi.SandboxExecResult
	sess, err := st.runningSession(in.SandboxID)
	if err != nil {
		return out, "", err
	}
	o, err := execStartOptions(in)
	if err != nil {
		return out, "", err
	}
	// Start, stream, then ack: not the run route's single exchange. The run
	// route releases the exec once its exit event is written, so an answer
	// lost on the way back (seen once through the endpoint proxy: a retried
	// run got the released exec's gap and exit, no output) loses the output
	// for good. An agent's tool call keeps the daemon's copy until it has
	// read every byte.
	ex, err := sess.Start(ctx, []string{in.Command}, o)
	if err != nil {
		return out, "", err
	}
	stream := ex.Stream(ctx, 0)
	defer stream.Close()
	out.ExecID = ex.ID()
	prog := newProgress(ctx, req)
	prog.send("started %s in %s", ex.ID(), in.SandboxID)
	var stdout, stderr cappedOutput
	var outMu sync.Mutex
	started := time.Now()
	tick := time.NewTicker(mcpapi.ProgressIntervalMs * time.Millisecond)
	defer tick.Stop()
	ticking := make(chan struct{})
	defer close(ticking)
	if prog != nil {
		go func() {
			for {
				select {
				case <-ticking:
					return
				case <-tick.C:
					outMu.Lock()
					n := stdout.total + stderr.total
					outMu.Unlock()
					prog.send("running for %s; %d bytes of output so far", time.Since(started).Round(time.Second), n)
				}
			}
		}()
	}
	var exit *protocol.ExitEvent
	gaps := false
	for exit == nil {
		ev, err := stream.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				// The caller cancelled, or the session ended: the command
				// must not outlive the call that owns it.
				kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				_, _ = ex.Kill(kctx)
				cancel()
			}
			return out, "", err
		}
		switch ev.Kind {
		case client.EventOutput:
			outMu.Lock()
			if ev.Stream == protocol.StreamStderr {
				stderr.add(ev.Data)
			} else {
				stdout.add(ev.Data)
			}
			outMu.Unlock()
		case client.EventGap:
			gaps = true
		case client.EventExit:
			e := ev.Exit
			exit = &e
		}
	}
	if exit == nil {
		return out, "", client.Errorf(taxonomy.KindExecFailed, "", "the output stream of %s ended without an exit; its outcome is unknown", ex.ID())
	}
	// Every byte was read: release the daemon's copy of the output.
	if err := ex.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, client.WireKindError(taxonomy.WireConflict)) {
		s.logf("%s: releasing %s: %v", st.name, ex.ID(), err)
	}
	out.ExitCode, out.Signal = render.Int64Of(exit.ExitCode), render.Int64Of(exit.Signal)
	outMu.Lock()
	defer outMu.Unlock()
	out.Stdout = strings.ToValidUTF8(string(stdout.kept), "\uFFFD")
	out.Stderr = strings.ToValidUTF8(string(stderr.kept), "\uFFFD")
	out.StdoutBytes, out.StderrBytes = stdout.total, stderr.total
	out.Truncated = stdout.dropped() > 0 || stderr.dropped() > 0 || exit.Truncated || gaps
	out.Usage = render.ExecUsage(exit.Usage)
	out.OomKilled = exit.OomKilled != nil && *exit.OomKilled
	return out, renderExec(out, stdout.dropped(), stderr.dropped(), exit.Truncated || gaps), nil
}

// renderExec is an exec result as an agent reads it in text: the outcome
// first, then each stream, then what was cut.
func renderExec(r mcpapi.SandboxExecResult, stdoutDropped, stderrDropped int64, daemonCut bool) string {
	var b strings.Builder
	switch {
	case r.ExitCode != nil:
		fmt.Fprintf(&b, "exit code %d", *r.ExitCode)
	case r.Signal != nil:
		fmt.Fprintf(&b, "killed by signal %d", *r.Signal)
	default:
		b.WriteString("ended with no exit status")
	}
	for _, s := range []struct {
		name, text string
		dropped    int64
		total      int64
	}{{"stdout", r.Stdout, stdoutDropped, r.StdoutBytes}, {"stderr", r.Stderr, stderrDropped, r.StderrBytes}} {
		if s.total == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s ---\n%s", s.name, s.text)
		if s.dropped > 0 {
			fmt.Fprintf(&b, "\n[%s truncated: %d of %d bytes dropped past the %d-byte cap]", s.name, s.dropped, s.total, mcpapi.MaxOutputBytes)
		}
	}
	if daemonCut {
		b.WriteString("\n[output truncated: the daemon's own output cap or a lost range cut it]")
	}
	if r.OomKilled {
		b.WriteString("\n[killed by the kernel: over its memory limit]")
	}
	return b.String()
}

func (s *mcpServer) writeFile(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxWriteFileArgs) (mcpapi.SandboxWriteFileResult, string, error) {
	var out mcpapi.SandboxWriteFileResult
	b, err := st.box(in.SandboxID)
	if err != nil {
		return out, "", err
	}
	data := []byte(in.Content)
	if in.Encoding == "base64" {
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return out, "", render.InvalidArg("", "content is not base64: %v", err)
		}
	}
	if len(data) > mcpapi.MaxFileBytes {
		return out, "", render.InvalidArg("", "%d bytes is over the %d-byte limit of sandbox_write_file (max_file_bytes in api/mcp.yaml); write it in parts with sandbox_exec", len(data), mcpapi.MaxFileBytes)
	}
	var mode uint64
	if in.Mode != "" {
		if mode, err = strconv.ParseUint(in.Mode, 8, 32); err != nil || mode > 0o7777 {
			return out, "", render.InvalidArg("", "mode %q is not four octal digits", in.Mode)
		}
	}
	if err := b.sb.WriteFile(ctx, in.Path, data, fs.FileMode(mode)); err != nil {
		return out, "", err
	}
	out.Path, out.Bytes = in.Path, int64(len(data))
	return out, fmt.Sprintf("wrote %d bytes to %s", len(data), in.Path), nil
}

func (s *mcpServer) readFile(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxReadFileArgs) (mcpapi.SandboxReadFileResult, string, error) {
	var out mcpapi.SandboxReadFileResult
	b, err := st.box(in.SandboxID)
	if err != nil {
		return out, "", err
	}
	sess := b.sb.Session()
	if sess == nil {
		return out, "", client.Errorf(taxonomy.KindPrecondition, "", "sandbox %s is %s, not RUNNING; sandbox_resume it first", b.sb.ID(), b.sb.Lifecycle())
	}
	// Refused by its size before a byte is read.
	fi, err := sess.Stat(ctx, in.Path)
	if err != nil {
		return out, "", err
	}
	if fi.Size > mcpapi.MaxFileBytes {
		return out, "", render.InvalidArg("", "%s is %d bytes, over the %d-byte limit of sandbox_read_file (max_file_bytes in api/mcp.yaml); read a part with sandbox_exec (head -c, tail, grep)", in.Path, fi.Size, mcpapi.MaxFileBytes)
	}
	// The stat's size is the guest's word: the read itself holds at most
	// one byte past the limit, whatever the daemon sends.
	rc, err := sess.OpenFile(ctx, in.Path, client.LineRange{})
	if err != nil {
		return out, "", err
	}
	data, err := io.ReadAll(io.LimitReader(rc, mcpapi.MaxFileBytes+1))
	rc.Close()
	if err != nil {
		return out, "", err
	}
	if len(data) > mcpapi.MaxFileBytes { // it grew between the stat and the read, or the stat lied
		return out, "", render.InvalidArg("", "%s grew past the %d-byte limit of sandbox_read_file (max_file_bytes in api/mcp.yaml) while it was read", in.Path, mcpapi.MaxFileBytes)
	}
	enc := in.Encoding
	if enc == "" {
		enc = "base64"
		if utf8.Valid(data) {
			enc = "text"
		}
	}
	out.Path, out.Encoding, out.Bytes = in.Path, enc, int64(len(data))
	if enc == "text" {
		if !utf8.Valid(data) {
			return mcpapi.SandboxReadFileResult{}, "", render.InvalidArg("", "%s is not UTF-8 text; read it with encoding base64", in.Path)
		}
		out.Content = string(data)
		return out, out.Content, nil
	}
	out.Content = base64.StdEncoding.EncodeToString(data)
	return out, fmt.Sprintf("%s: %d bytes, base64:\n%s", in.Path, len(data), out.Content), nil
}

// errListFull stops a listing at MaxListEntries.
var errListFull = errors.New("listing full")

func (s *mcpServer) listFiles(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxListFilesArgs) (mcpapi.SandboxListFilesResult, string, error) {
	out := mcpapi.SandboxListFilesResult{Path: in.Path, Entries: []cliapi.FileEntry{}}
	b, err := st.box(in.SandboxID)
	if err != nil {
		return out, "", err
	}
	sess := b.sb.Session()
	if sess == nil {
		return out, "", client.Errorf(taxonomy.KindPrecondition, "", "sandbox %s is %s, not RUNNING; sandbox_resume it first", b.sb.ID(), b.sb.Lifecycle())
	}
	err = sess.List(ctx, in.Path, client.ListOptions{Depth: uint32(in.Depth)}, func(fi protocol.FileInfo) error {
		if len(out.Entries) == mcpapi.MaxListEntries {
			out.Truncated = true
			return errListFull
		}
		out.Entries = append(out.Entries, render.FileEntry(fi))
		return nil
	})
	if err != nil && !errors.Is(err, errListFull) {
		return out, "", err
	}
	var t strings.Builder
	fmt.Fprintf(&t, "%s: %d entries", in.Path, len(out.Entries))
	for _, e := range out.Entries {
		fmt.Fprintf(&t, "\n%s %s %d %s", e.Mode, e.Type, e.Size, e.Path)
		if e.SymlinkTarget != nil {
			fmt.Fprintf(&t, " -> %s", *e.SymlinkTarget)
		}
	}
	if out.Truncated {
		fmt.Fprintf(&t, "\n[listing truncated at %d entries]", mcpapi.MaxListEntries)
	}
	return out, t.String(), nil
}
