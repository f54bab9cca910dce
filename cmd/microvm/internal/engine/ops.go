package engine

// The engine's handle ops (api/engine.yaml start .. cancel): each parses
// its arguments, makes the one library call the CLI and MCP server make
// for the same capability, and renders the answer.

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// session is the sandbox's agentd session, or the refusal naming why there
// is none (a suspended or terminated VM).
func session(sb *sandbox.Sandbox) (*client.Session, error) {
	sess := sb.Session()
	if sess == nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "engine: %s is %s, not RUNNING; resume it first", sb.ID(), sb.Lifecycle())
	}
	return sess, nil
}

// execFor is the exec an op addresses by id.
func execFor(sb *sandbox.Sandbox, id string) (*client.Exec, error) {
	if id == "" {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: execId is required (start answers with it)")
	}
	sess, err := session(sb)
	if err != nil {
		return nil, err
	}
	return sess.Exec(id), nil
}

// numericID parses a uid or gid argument: empty keeps the daemon's.
func numericID(name, v string) (*uint32, error) {
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: %s %q is not a numeric id", name, v)
	}
	u := uint32(n)
	return &u, nil
}

// fileMode parses four octal digits; empty is zero, the daemon's default.
func fileMode(v string) (fs.FileMode, error) {
	if v == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "engine: mode %q is not four octal digits", v)
	}
	return fs.FileMode(m), nil
}

// execResult renders a record. timedOut says a limit ended it: limit is
// "timeoutSec" when agentd's kill of a child given timeoutSec ended it
// (a signal, at or after the limit), "wait" when a wait gave up.
func execResult(r client.Result, timeoutSec float64, elapsed time.Duration) engineapi.ExecResultData {
	d := render.ExecData(r)
	out := engineapi.ExecResultData{ExecID: d.ExecID, Phase: d.Phase, ExitCode: d.ExitCode, Signal: d.Signal,
		Stdout: d.Stdout, Stderr: d.Stderr, Truncated: d.Truncated, Usage: d.Usage, OomKilled: d.OomKilled}
	if timeoutSec > 0 && r.Signal != nil && elapsed >= time.Duration(timeoutSec*float64(time.Second)) {
		out.TimedOut, out.TimeoutLimit = true, "timeoutSec"
	}
	return out
}

func (e *engine) start(ctx context.Context, sb *sandbox.Sandbox, args engineapi.StartArgs) (string, any, error) {
	o, err := startOptions(engineapi.RunArgs{Command: args.Command, Shell: args.Shell, Cwd: args.Cwd, Env: args.Env,
		TimeoutSec: args.TimeoutSec, ExecID: args.ExecID, User: args.User, Group: args.Group,
		MemoryLimitBytes: args.MemoryLimitBytes, CPUMillicores: args.CPUMillicores, PidsLimit: args.PidsLimit})
	if err != nil {
		return "", nil, err
	}
	o.Stdin = args.Stdin
	if args.Tty {
		rows, cols := args.Rows, args.Cols
		if rows == 0 {
			rows = 24
		}
		if cols == 0 {
			cols = 80
		}
		if rows < 1 || rows > 65535 || cols < 1 || cols > 65535 {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: a terminal of %dx%d is outside 1..65535", rows, cols)
		}
		o.TTY = &protocol.TTYSize{Rows: uint16(rows), Cols: uint16(cols)}
	}
	sess, err := session(sb)
	if err != nil {
		return "", nil, err
	}
	ex, err := sess.Start(ctx, args.Command, o)
	if err != nil {
		return "", nil, err
	}
	return engineapi.TypeExecStarted, engineapi.ExecStartedData{ExecID: ex.ID()}, nil
}

func (e *engine) poll(ctx context.Context, sb *sandbox.Sandbox, args engineapi.PollArgs) (string, any, error) {
	ex, err := execFor(sb, args.ExecID)
	if err != nil {
		return "", nil, err
	}
	r, err := ex.Poll(ctx)
	if err != nil {
		return "", nil, err
	}
	return engineapi.TypeExecResult, execResult(r, 0, 0), nil
}

// wait follows the exec's output to its exit event (discarding it: the
// record carries it), then acks the record. A wait that runs out of time
// is a result: the record as it stands, timedOut with limit wait.
func (e *engine) wait(ctx context.Context, sb *sandbox.Sandbox, args engineapi.WaitArgs) (string, any, error) {
	ex, err := execFor(sb, args.ExecID)
	if err != nil {
		return "", nil, err
	}
	if args.TimeoutSec < 0 {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: timeoutSec %v is negative", args.TimeoutSec)
	}
	wctx := ctx
	if args.TimeoutSec > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, time.Duration(args.TimeoutSec*float64(time.Second)))
		defer cancel()
	}
	st := ex.Stream(wctx, 0)
	for {
		_, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			break // the record below says what happened
		}
	}
	st.Close()
	if ctx.Err() != nil {
		return "", nil, render.AsClientError(ctx.Err())
	}
	if wctx.Err() != nil {
		r, err := ex.Poll(ctx)
		if err != nil {
			return "", nil, err
		}
		d := execResult(r, 0, 0)
		if r.Running() {
			d.TimedOut, d.TimeoutLimit = true, "wait"
			return engineapi.TypeExecResult, d, nil
		}
	}
	r, err := ex.Ack(ctx)
	if err != nil {
		return "", nil, err
	}
	return engineapi.TypeExecResult, execResult(r, 0, 0), nil
}

func (e *engine) follow(ctx context.Context, sb *sandbox.Sandbox, id int64, args engineapi.FollowArgs) (string, any, error) {
	ex, err := execFor(sb, args.ExecID)
	if err != nil {
		return "", nil, err
	}
	if args.Offset < 0 {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: offset %d is negative", args.Offset)
	}
	sink, err := openSink(args.Sink)
	if err != nil {
		return "", nil, err
	}
	defer sink.close()
	st := ex.Stream(ctx, uint64(args.Offset))
	defer st.Close()
	sum, sawExit, err := e.pump(id, st, ex.ID(), sink)
	if err != nil {
		return "", nil, err
	}
	if !sawExit {
		return "", nil, &render.Failure{Err: client.Errorf(taxonomy.KindExecFailed, "", "the stream of %s ended without an exit event at offset %d", ex.ID(), sum.NextOffset), Data: sum}
	}
	return cliapi.TypeExecStream, sum, nil
}

// pump sends a stream's events as event frames until it ends, or, with a
// sink, writes them there as binary frames (exit last) and sends none.
// truncated is true only when bytes were dropped: a gap, or the daemon's
// cap.
func (e *engine) pump(id int64, st *client.Stream, execID string, sink *frameSink) (cliapi.ExecStreamData, bool, error) {
	sum := cliapi.ExecStreamData{ExecID: execID}
	event := func(v any) {
		sum.Events++
		e.send(engineapi.Reply{ID: id, Event: v})
	}
	sawExit := false
	for {
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			sum.NextOffset = int64(st.Cursor())
			return sum, false, &render.Failure{Err: render.AsClientError(err), Data: sum}
		}
		if sink != nil {
			sum.Events++
			switch ev.Kind {
			case client.EventOutput:
				sum.Bytes += int64(len(ev.Data))
				err = sink.output(ev.Stream, ev.Offset, ev.Data)
			case client.EventGap:
				sum.Gaps++
				err = sink.event(protocol.FrameGap, ev.Gap.From, ev.Gap)
			case client.EventExit:
				sawExit = true
				sum.ExitCode = render.ExitLine(ev.Exit).ExitCode
				t := sum.Gaps > 0 || (ev.Exit.Truncated && int64(ev.Exit.Offset) > sum.Bytes)
				sum.Truncated = &t
				err = sink.event(protocol.FrameExit, ev.Exit.Offset, ev.Exit)
			}
			if err != nil {
				sum.NextOffset = int64(st.Cursor())
				return sum, false, &render.Failure{Err: render.AsClientError(err), Data: sum}
			}
			continue
		}
		switch ev.Kind {
		case client.EventOutput:
			sum.Bytes += int64(len(ev.Data))
			event(cliapi.StreamOutputLine{Event: cliapi.EventOutput, Stream: string(ev.Stream), Offset: int64(ev.Offset),
				Bytes: int64(len(ev.Data)), Text: strings.ToValidUTF8(string(ev.Data), "\uFFFD"), Lossy: !utf8.Valid(ev.Data)})
		case client.EventGap:
			sum.Gaps++
			event(cliapi.StreamGapLine{Event: cliapi.EventGap, From: int64(ev.Gap.From), To: int64(ev.Gap.To)})
		case client.EventExit:
			sawExit = true
			exit := render.ExitLine(ev.Exit)
			sum.ExitCode = exit.ExitCode
			event(exit)
			// Dropped bytes only: a stream that delivered every byte up to
			// the exit offset lost nothing, whatever the record's cap did.
			t := sum.Gaps > 0 || (ev.Exit.Truncated && int64(ev.Exit.Offset) > sum.Bytes)
			sum.Truncated = &t
		}
	}
	sum.NextOffset = int64(st.Cursor())
	return sum, sawExit, nil
}

func (e *engine) kill(ctx context.Context, sb *sandbox.Sandbox, args engineapi.KillArgs) (string, any, error) {
	ex, err := execFor(sb, args.ExecID)
	if err != nil {
		return "", nil, err
	}
	killed, err := ex.Kill(ctx)
	if err != nil {
		return "", nil, err
	}
	return engineapi.TypeExecSignalled, engineapi.ExecSignalledData{ExecID: ex.ID(), Done: killed}, nil
}

func (e *engine) signal(ctx context.Context, sb *sandbox.Sandbox, args engineapi.SignalArgs) (string, any, error) {
	ex, err := execFor(sb, args.ExecID)
	if err != nil {
		return "", nil, err
	}
	ok, err := ex.Signal(ctx, args.Signal)
	if err != nil {
		return "", nil, err
	}
	return engineapi.TypeExecSignalled, engineapi.ExecSignalledData{ExecID: ex.ID(), Done: ok}, nil
}

func (e *engine) resize(ctx context.Context, sb *sandbox.Sandbox, args engineapi.ResizeArgs) (string, any, error) {
	ex, err := execFor(sb, args.ExecID)
	if err != nil {
		return "", nil, err
	}
	if args.Rows < 1 || args.Rows > 65535 || args.Cols < 1 || args.Cols > 65535 {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: a terminal of %dx%d is outside 1..65535", args.Rows, args.Cols)
	}
	if err := ex.Resize(ctx, uint16(args.Rows), uint16(args.Cols)); err != nil {
		return "", nil, err
	}
	return engineapi.TypeExecSignalled, engineapi.ExecSignalledData{ExecID: ex.ID(), Done: true}, nil
}

func (e *engine) stdinWrite(ctx context.Context, sb *sandbox.Sandbox, args engineapi.StdinWriteArgs) (string, any, error) {
	ex, err := execFor(sb, args.ExecID)
	if err != nil {
		return "", nil, err
	}
	data, err := base64.StdEncoding.DecodeString(args.DataBase64)
	if err != nil {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: dataBase64: %v", err)
	}
	n, err := ex.WriteStdin(ctx, data)
	if err != nil {
		return "", nil, err
	}
	return engineapi.TypeExecSignalled, engineapi.ExecSignalledData{ExecID: ex.ID(), Done: true, Bytes: int64(n)}, nil
}

func (e *engine) stdinClose(ctx context.Context, sb *sandbox.Sandbox, args engineapi.StdinCloseArgs) (string, any, error) {
	ex, err := execFor(sb, args.ExecID)
	if err != nil {
		return "", nil, err
	}
	if err := ex.CloseStdin(ctx); err != nil {
		return "", nil, err
	}
	return engineapi.TypeExecSignalled, engineapi.ExecSignalledData{ExecID: ex.ID(), Done: true}, nil
}

func (e *engine) execs(ctx context.Context, sb *sandbox.Sandbox) (string, any, error) {
	sess, err := session(sb)
	if err != nil {
		return "", nil, err
	}
	list, err := sess.Execs(ctx)
	if err != nil {
		return "", nil, err
	}
	d := engineapi.ExecsData{Execs: []any{}}
	for _, x := range list {
		d.Execs = append(d.Execs, x)
	}
	return engineapi.TypeExecs, d, nil
}

func (e *engine) stat(ctx context.Context, sb *sandbox.Sandbox, args engineapi.StatArgs) (string, any, error) {
	sess, err := session(sb)
	if err != nil {
		return "", nil, err
	}
	fi, err := sess.Stat(ctx, args.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return engineapi.TypePath, engineapi.PathData{Path: args.Path}, nil
	}
	if err != nil {
		return "", nil, err
	}
	entry := render.FileEntry(fi)
	return engineapi.TypePath, engineapi.PathData{Path: args.Path, Exists: true, Entry: entry}, nil
}

func (e *engine) mkdir(ctx context.Context, sb *sandbox.Sandbox, args engineapi.MkdirArgs) (string, any, error) {
	mode, err := fileMode(args.Mode)
	if err != nil {
		return "", nil, err
	}
	sess, err := session(sb)
	if err != nil {
		return "", nil, err
	}
	created, err := sess.Mkdir(ctx, args.Path, mode)
	if err != nil {
		return "", nil, err
	}
	return engineapi.TypeFsChanged, engineapi.FsChangedData{Path: args.Path, Changed: created}, nil
}

func (e *engine) move(ctx context.Context, sb *sandbox.Sandbox, args engineapi.MoveArgs) (string, any, error) {
	sess, err := session(sb)
	if err != nil {
		return "", nil, err
	}
	if err := sess.Move(ctx, args.From, args.To, args.Replace); err != nil {
		return "", nil, err
	}
	return engineapi.TypeFsChanged, engineapi.FsChangedData{Path: args.To, Changed: true}, nil
}

func (e *engine) remove(ctx context.Context, sb *sandbox.Sandbox, args engineapi.RemoveArgs) (string, any, error) {
	sess, err := session(sb)
	if err != nil {
		return "", nil, err
	}
	n, err := sess.Remove(ctx, args.Path, args.Recursive)
	if err != nil {
		return "", nil, err
	}
	return engineapi.TypeFsChanged, engineapi.FsChangedData{Path: args.Path, Changed: n > 0, Count: int64(n)}, nil
}

// watchLine is one change of a watch as an event frame.
type watchLine struct {
	Event string `json:"event"`
	Op    string `json:"op"`
	Path  string `json:"path"`
	Seq   uint64 `json:"seq"`
}

// watch sends the directory's changes until the request is cancelled (the
// cancel op) or the watch breaks; a cancel is the normal end, answered
// with the count of events sent.
func (e *engine) watch(ctx context.Context, sb *sandbox.Sandbox, id int64, args engineapi.WatchArgs) (string, any, error) {
	sess, err := session(sb)
	if err != nil {
		return "", nil, err
	}
	w, err := sess.Watch(ctx, args.Path, args.Recursive)
	if err != nil {
		return "", nil, err
	}
	defer w.Close()
	sum := cliapi.ExecStreamData{}
	for {
		ev, err := w.Next()
		if err != nil {
			if ctx.Err() != nil || err == io.EOF {
				return cliapi.TypeExecStream, sum, nil
			}
			return "", nil, &render.Failure{Err: render.AsClientError(err), Data: sum}
		}
		sum.Events++
		if ev.Gap != nil {
			sum.Gaps++
			e.send(engineapi.Reply{ID: id, Event: cliapi.StreamGapLine{Event: cliapi.EventGap, From: int64(ev.Gap.From), To: int64(ev.Gap.To)}})
			continue
		}
		e.send(engineapi.Reply{ID: id, Event: watchLine{Event: "fs", Op: string(ev.Change.Op), Path: ev.Change.Path, Seq: ev.Change.Seq}})
	}
}

// keepalive holds the VM awake (sandbox.KeepAwake) for forSec, or until
// the request is cancelled.
func (e *engine) keepalive(ctx context.Context, sb *sandbox.Sandbox, args engineapi.KeepaliveArgs) (string, any, error) {
	if args.EverySec < 0 || args.ForSec < 0 {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: keepalive takes everySec and forSec of zero or more seconds, not %v and %v", args.EverySec, args.ForSec)
	}
	if args.ForSec > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(args.ForSec*float64(time.Second)))
		defer cancel()
	}
	start := time.Now()
	pings, err := sb.KeepAwake(ctx, time.Duration(args.EverySec*float64(time.Second)))
	if err != nil {
		return "", nil, err
	}
	return cliapi.TypeKeepalive, cliapi.KeepaliveData{MicrovmID: sb.ID(), Pings: int64(pings), HeldSeconds: time.Since(start).Seconds()}, nil
}

func (e *engine) probe(ctx context.Context, sb *sandbox.Sandbox, metrics bool) (string, any, error) {
	sess, err := session(sb)
	if err != nil {
		return "", nil, err
	}
	var v any
	if metrics {
		v, err = sess.Metrics(ctx)
	} else {
		v, err = sess.Health(ctx)
	}
	if err != nil {
		return "", nil, err
	}
	return engineapi.TypeProbe, engineapi.ProbeData{Probe: v}, nil
}

// writeFrom sends a host file as a whole file in the VM; a Unix socket at
// local is dialled and size bytes read from it as they are sent (how Node
// hands over bytes it holds, with no host file written first).
func writeFrom(ctx context.Context, sb *sandbox.Sandbox, path, local string, size int64, mode fs.FileMode) (int64, error) {
	sess, err := session(sb)
	if err != nil {
		return 0, err
	}
	if size < 0 {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "engine: size %d is negative", size)
	}
	if fi, err := os.Stat(local); err == nil && fi.Mode()&os.ModeSocket != 0 {
		c, err := net.Dial("unix", local)
		if err != nil {
			return 0, client.Errorf(taxonomy.KindInvalidArg, "", "engine: nobody listens on the socket %s: %v", local, err)
		}
		defer c.Close()
		return size, sess.WriteFile(ctx, path, client.SizedReader(c, size), mode)
	}
	if size != 0 {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "engine: size is for a socket localPath; %s is not one", local)
	}
	f, err := os.Open(local)
	if err != nil {
		return 0, client.Errorf(taxonomy.KindPrecondition, "", "engine: opening %s: %v", local, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, client.Errorf(taxonomy.KindPrecondition, "", "engine: %s: %v", local, err)
	}
	return fi.Size(), sess.WriteFile(ctx, path, f, mode)
}

// networkShow answers the network in force (sandbox.Network): the
// secrets' names, hosts and placeholders, never their values.
func (e *engine) networkShow(ctx context.Context, sb *sandbox.Sandbox) (string, any, error) {
	st, err := sb.Network(ctx)
	if err != nil {
		return "", nil, err
	}
	return cliapi.TypeNetwork, cliapi.NetworkData{MicrovmID: sb.ID(), Network: st}, nil
}

// networkSet replaces the policy (sandbox.SetNetworkPolicy) and answers
// what is then in force. An empty allow list must say denyAll, so a list
// emptied by mistake never cuts the guest's network silently.
func (e *engine) networkSet(ctx context.Context, sb *sandbox.Sandbox, args engineapi.NetworkSetArgs) (string, any, error) {
	switch {
	case len(args.Allow) > 0 && args.DenyAll:
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: network_set with denyAll and allow: a policy either allows these or nothing")
	case len(args.Allow) == 0 && !args.DenyAll:
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: network_set needs allow rules or denyAll")
	}
	rules, err := sandbox.ParseNetworkRules(args.Allow)
	if err != nil {
		return "", nil, err
	}
	if err := sb.SetNetworkPolicy(ctx, cliapi.NetworkPolicy{Allow: rules}); err != nil {
		return "", nil, err
	}
	return e.networkShow(ctx, sb)
}
