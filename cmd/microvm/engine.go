package main

// The engine (api/engine.yaml): one sandbox behind a line protocol on
// stdin/stdout, so the Python and TypeScript packages drive the Go library
// (its state machine, traps, teardown and cost engine) instead of
// re-implementing any of it. Every answer is a CLI envelope, so errors carry
// the generated code, exit code and wire kind exactly as `microvm --json` does.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// EngineCmd serves api/engine.yaml on stdin and stdout until stdin ends.
type EngineCmd struct{}

// maxEngineLine bounds one request line: a file written through `write`
// travels inside it as base64, and sandbox.MaxReadFileBytes is the largest
// file the library reads back whole.
const maxEngineLine = 4*sandbox.MaxReadFileBytes/3 + 1<<20

// engineTeardownBudget bounds the teardown the engine runs when its stdin
// ends with a launched sandbox still up: the caller is gone, so nobody waits
// on it, but a VM left running bills.
const engineTeardownBudget = 2 * time.Minute

// engine is one engine process's state: at most one sandbox, and in local
// mode the emulator it lives in.
type engine struct {
	a       *app
	writeMu sync.Mutex
	out     *json.Encoder

	mu              sync.Mutex
	sb              *sandbox.Sandbox
	emu             *embedded.Emulator
	cp              *lambdamicrovms.Client
	region          client.Region
	controlEndpoint string
	launched        bool // this engine launched sb, so it tears it down when its caller goes
	imageARN        string
}

func (c *EngineCmd) run(ctx context.Context, a *app) (*result, error) {
	e := &engine{a: a, out: json.NewEncoder(a.stdout)}
	e.out.SetEscapeHTML(false)
	ops, cancel := context.WithCancel(ctx)
	var inflight sync.WaitGroup
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(a.stdin)
		sc.Buffer(make([]byte, 64<<10), maxEngineLine)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		readErr <- sc.Err()
	}()
	var err error
loop:
	for {
		select {
		case line := <-lines:
			if len(strings.TrimSpace(string(line))) == 0 {
				continue
			}
			var req engineapi.Request
			if derr := json.Unmarshal(line, &req); derr != nil {
				// Without an id nothing can be answered; the caller broke the
				// protocol, so the engine ends as if its stdin had.
				err = client.Errorf(taxonomy.KindInvalidArg, "", "engine: a request line is not JSON: %v", derr)
				break loop
			}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				e.serve(ops, req)
			}()
		case rerr := <-readErr:
			if rerr != nil {
				err = client.Errorf(taxonomy.KindInvalidArg, "", "engine: reading requests: %v", rerr)
			}
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	// The caller is gone (stdin ended, or a signal): stop what is in flight,
	// then tear down what this engine launched.
	cancel()
	inflight.Wait()
	e.shutdown()
	if err != nil {
		return nil, err
	}
	return &result{written: true}, nil
}

// shutdown terminates a sandbox this engine launched and stops its emulator,
// which stops every guest it holds.
func (e *engine) shutdown() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sb != nil && e.launched && !e.sb.WasTerminated() {
		ctx, cancel := context.WithTimeout(context.Background(), engineTeardownBudget)
		rep := e.sb.Terminate(ctx, sandbox.TeardownOptions{})
		cancel()
		if !rep.Clean() {
			e.a.warn("engine: teardown of %s left %v", e.sb.ID(), rep.Leaked)
		}
	}
	if e.emu != nil {
		e.emu.Close()
	}
}

// send writes one reply frame as one line.
func (e *engine) send(r engineapi.Reply) {
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	_ = e.out.Encode(r)
}

// serve answers one request with its final envelope.
func (e *engine) serve(ctx context.Context, req engineapi.Request) {
	typ, data, err := e.dispatch(ctx, req)
	if err != nil {
		ce := asClientError(err)
		var partial any
		var f *failure
		if errors.As(err, &f) {
			partial = f.data
		}
		env := envelopeFor(ce, partial)
		// The CLI's suggestions name its own commands and flags, which a
		// package's caller does not type; the message says what to do.
		env.Suggestions = []string{}
		e.send(engineapi.Reply{ID: req.ID, Envelope: env})
		return
	}
	e.send(engineapi.Reply{ID: req.ID, Envelope: cliapi.Success{Status: cliapi.StatusOK, APIVersion: cliapi.APIVersion, Type: typ, Data: data}})
}

// decodeArgs reads an op's arguments, refusing keys the contract does not declare.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return client.Errorf(taxonomy.KindInvalidArg, "", "engine: arguments: %v", err)
	}
	return nil
}

func (e *engine) dispatch(ctx context.Context, req engineapi.Request) (string, any, error) {
	if !slices.ContainsFunc(engineapi.Ops, func(o engineapi.Op) bool { return o.Name == req.Op }) {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: unknown op %q", req.Op)
	}
	switch req.Op {
	case engineapi.OpCreate:
		var args engineapi.CreateArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.create(ctx, args)
	case engineapi.OpAttach:
		var args engineapi.AttachArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.attach(ctx, args)
	}
	sb, err := e.sandbox()
	if err != nil {
		return "", nil, err
	}
	switch req.Op {
	case engineapi.OpInfo:
		return engineapi.TypeSandbox, e.info(), nil
	case engineapi.OpRun:
		var args engineapi.RunArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.runCommand(ctx, sb, args)
	case engineapi.OpStream:
		var args engineapi.StreamArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.stream(ctx, sb, req.ID, engineapi.RunArgs(args))
	case engineapi.OpWrite:
		var args engineapi.WriteArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		data, err := base64.StdEncoding.DecodeString(args.DataBase64)
		if err != nil {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: dataBase64: %v", err)
		}
		var mode uint64
		if args.Mode != "" {
			if mode, err = strconv.ParseUint(args.Mode, 8, 32); err != nil || mode > 0o7777 {
				return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: mode %q is not four octal digits", args.Mode)
			}
		}
		if err := sb.WriteFile(ctx, args.Path, data, fs.FileMode(mode)); err != nil {
			return "", nil, err
		}
		return cliapi.TypeCopy, cliapi.CopyData{Direction: "upload", Bytes: int64(len(data)), Local: "", Remote: args.Path}, nil
	case engineapi.OpRead:
		var args engineapi.ReadArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		data, err := sb.ReadFile(ctx, args.Path)
		if err != nil {
			return "", nil, err
		}
		return engineapi.TypeFile, engineapi.FileData{Path: args.Path, Bytes: int64(len(data)), DataBase64: base64.StdEncoding.EncodeToString(data)}, nil
	case engineapi.OpList:
		var args engineapi.ListArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		if args.Depth < 0 || args.Depth > 1<<16 {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: depth %d is out of range", args.Depth)
		}
		d := cliapi.DirData{Path: args.Path, Entries: []cliapi.FileEntry{}}
		err := sb.Session().List(ctx, args.Path, client.ListOptions{Depth: uint32(args.Depth)}, func(fi protocol.FileInfo) error {
			d.Entries = append(d.Entries, toFileEntry(fi))
			return nil
		})
		if err != nil {
			return "", nil, err
		}
		return cliapi.TypeDir, d, nil
	case engineapi.OpUploadDir:
		var args engineapi.UploadDirArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		if err := sb.UploadDir(ctx, args.Local, args.Remote); err != nil {
			return "", nil, err
		}
		return cliapi.TypeCopy, cliapi.CopyData{Direction: "upload", Bytes: treeBytes(args.Local), Local: args.Local, Remote: args.Remote, Tar: true}, nil
	case engineapi.OpDownloadDir:
		var args engineapi.DownloadDirArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		if err := sb.DownloadDir(ctx, args.Remote, args.Local); err != nil {
			return "", nil, err
		}
		return cliapi.TypeCopy, cliapi.CopyData{Direction: "download", Bytes: treeBytes(args.Local), Local: args.Local, Remote: args.Remote, Tar: true}, nil
	case engineapi.OpSuspend:
		if err := decodeArgs(req.Args, &engineapi.SuspendArgs{}); err != nil {
			return "", nil, err
		}
		if err := sb.Suspend(ctx); err != nil {
			return "", nil, err
		}
		return cliapi.TypeState, stateData(sb), nil
	case engineapi.OpResume:
		if err := decodeArgs(req.Args, &engineapi.ResumeArgs{}); err != nil {
			return "", nil, err
		}
		if err := sb.Resume(ctx); err != nil {
			return "", nil, err
		}
		return cliapi.TypeState, stateData(sb), nil
	case engineapi.OpTerminate:
		var args engineapi.TerminateArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		// Teardown outlives the caller's cancel: a half-done one is the worst leak.
		rep := sb.Terminate(context.WithoutCancel(ctx), sandbox.TeardownOptions{DeleteImage: args.DeleteImage})
		d := cliapi.TeardownData{MicrovmID: sb.ID(), Leaked: []string{}, UndeletedLogGroups: []string{}}
		for _, l := range rep.Leaked {
			if l.Kind == "log_group" {
				d.UndeletedLogGroups = append(d.UndeletedLogGroups, l.ID)
				continue
			}
			d.Leaked = append(d.Leaked, l.Kind+" "+l.ID)
		}
		if rep.ImageDeleted != sandbox.ImageNotAsked && e.imageARN != "" {
			d.ImageIdentifier = present(e.imageARN)
		}
		d.State = present(string(sb.Lifecycle()))
		return cliapi.TypeTeardown, d, nil
	case engineapi.OpCost:
		if err := decodeArgs(req.Args, &engineapi.CostArgs{}); err != nil {
			return "", nil, err
		}
		rep, err := sb.Cost(ctx, cost.Pinned(e.region))
		if err != nil {
			return "", nil, err
		}
		return cliapi.TypeCost, cliapi.CostData{Report: reportJSON(rep)}, nil
	}
	return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: unknown op %q", req.Op)
}

// sandbox is the engine's sandbox, or the refusal that names the missing step.
func (e *engine) sandbox() (*sandbox.Sandbox, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sb == nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: no sandbox yet; send create or attach first")
	}
	return e.sb, nil
}

// claim refuses a second create or attach: an engine holds one sandbox, so
// its teardown on exit is never ambiguous.
func (e *engine) claim() error {
	if e.sb != nil || e.cp != nil {
		return client.Errorf(taxonomy.KindInvalidArg, "", "engine: this engine already holds a sandbox; start another engine for another")
	}
	return nil
}

// engineRegion is the named region (held to the measured set, as --region
// is), else the environment's.
func engineRegion(name string, getenv func(string) string) (client.Region, error) {
	if name != "" {
		return client.ParseRegion(name)
	}
	var f RegionFlags
	return f.controlRegion(getenv)
}

func waitFor(local bool, timeoutSec float64) cplane.WaitOptions {
	timeout := time.Duration(timeoutSec * float64(time.Second))
	if local {
		return embedded.WaitOptions(timeout)
	}
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	return cplane.WaitOptions{Interval: 5 * time.Second, Timeout: timeout}
}

func (e *engine) create(ctx context.Context, args engineapi.CreateArgs) (string, any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.claim(); err != nil {
		return "", nil, err
	}
	if args.Local && (args.ControlEndpoint != "" || args.Image != "") {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: local mode runs its own emulator and its default image; controlEndpoint and image are for AWS or a running emulator")
	}
	region, err := engineRegion(args.Region, e.a.env)
	if err != nil {
		return "", nil, err
	}
	// The emulator and the sandbox outlive this request: they live until
	// the engine's stdin ends.
	life := context.WithoutCancel(ctx)
	var sb *sandbox.Sandbox
	if args.Local {
		emu, err := embedded.Start(life, embedded.Options{Agentd: args.Agentd, Region: region, Getenv: e.a.env})
		if err != nil {
			return "", nil, err
		}
		cp, err := emu.Control(life)
		if err != nil {
			emu.Close()
			return "", nil, err
		}
		e.emu, e.cp, e.controlEndpoint = emu, cp, emu.URL
		sb, err = emu.Launch(ctx, sandbox.Options{AgentToken: args.AgentToken, Wait: waitFor(true, args.TimeoutSec)})
		if sb != nil {
			e.sb, e.launched = sb, true
		}
		if err != nil {
			return "", nil, err
		}
	} else {
		if args.Image == "" {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: an AWS sandbox needs an image (its ARN or name; `microvm build` makes one), or local mode")
		}
		p := &plane{a: e.a, region: region, endpoint: cplane.ConfiguredEndpoint(args.ControlEndpoint, e.a.env)}
		p.local = embedded.IsLocal(p.endpoint)
		if p.cp, err = newControl(life, region, p.endpoint, e.a.env); err != nil {
			return "", nil, err
		}
		arn, name, err := p.resolveImage(ctx, args.Image)
		if err != nil {
			return "", nil, err
		}
		e.cp, e.controlEndpoint, e.imageARN = p.cp, p.endpoint, arn
		sb, err = sandbox.Launch(ctx, p.cp, sandbox.Options{Image: arn, Version: args.ImageVersion, ImageName: name,
			ExecutionRoleARN: args.ExecutionRoleARN, AgentToken: args.AgentToken, Wait: waitFor(p.local, args.TimeoutSec)})
		if sb != nil {
			e.sb, e.launched = sb, true
		}
		if err != nil {
			return "", nil, err
		}
	}
	e.region = region
	return engineapi.TypeSandbox, e.infoLocked(), nil
}

func (e *engine) attach(ctx context.Context, args engineapi.AttachArgs) (string, any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.claim(); err != nil {
		return "", nil, err
	}
	if args.MicrovmID == "" || args.AgentToken == "" {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: attach needs the MicroVM id and the agent token its launch installed (the token is the credential; an id alone does not reconnect)")
	}
	region, err := engineRegion(args.Region, e.a.env)
	if err != nil {
		return "", nil, err
	}
	endpoint := cplane.ConfiguredEndpoint(args.ControlEndpoint, e.a.env)
	cp, err := newControl(context.WithoutCancel(ctx), region, endpoint, e.a.env)
	if err != nil {
		return "", nil, err
	}
	sb, err := sandbox.Attach(ctx, cp, args.MicrovmID, args.AgentToken, sandbox.Options{Wait: waitFor(embedded.IsLocal(endpoint), 0)})
	if err != nil {
		return "", nil, err
	}
	e.sb, e.cp, e.region, e.controlEndpoint = sb, cp, region, endpoint
	return engineapi.TypeSandbox, e.infoLocked(), nil
}

func (e *engine) info() engineapi.SandboxData {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.infoLocked()
}

func (e *engine) infoLocked() engineapi.SandboxData {
	d := engineapi.SandboxData{MicrovmID: e.sb.ID(), AgentToken: e.sb.AgentToken(), Endpoint: present(e.sb.Endpoint()),
		State: string(e.sb.Lifecycle()), Region: e.region.String(), Local: e.emu != nil, ControlEndpoint: present(e.controlEndpoint)}
	if e.imageARN != "" {
		d.ImageIdentifier = present(e.imageARN)
	}
	return d
}

func stateData(sb *sandbox.Sandbox) cliapi.StateData {
	return cliapi.StateData{MicrovmID: sb.ID(), State: string(sb.Lifecycle()), Endpoint: present(sb.Endpoint())}
}

// startOptions turns an exec's arguments into the library's.
func startOptions(args engineapi.RunArgs) (client.StartOptions, error) {
	o := client.StartOptions{ExecID: args.ExecID, Shell: args.Shell, Cwd: args.Cwd,
		DaemonTimeout: time.Duration(args.TimeoutSec * float64(time.Second))}
	if len(args.Command) == 0 {
		return o, client.Errorf(taxonomy.KindInvalidArg, "", "engine: an empty command")
	}
	for _, kv := range args.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return o, client.Errorf(taxonomy.KindInvalidArg, "", "engine: env entry %q is not NAME=value", kv)
		}
		if o.Env == nil {
			o.Env = map[string]string{}
		}
		o.Env[k] = v
	}
	return o, nil
}

func (e *engine) runCommand(ctx context.Context, sb *sandbox.Sandbox, args engineapi.RunArgs) (string, any, error) {
	o, err := startOptions(args)
	if err != nil {
		return "", nil, err
	}
	res, err := sb.Run(ctx, args.Command, client.RunOptions{StartOptions: o})
	if err != nil {
		return "", nil, err
	}
	// A non-zero exit is the command's answer, not the engine's failure: it
	// is a success envelope whose exitCode says so.
	return cliapi.TypeExec, execData(res), nil
}

// stream sends the exec's output as event frames while it runs. The
// library's Stream reconnects at its byte cursor when a connection drops.
func (e *engine) stream(ctx context.Context, sb *sandbox.Sandbox, id int64, args engineapi.RunArgs) (string, any, error) {
	o, err := startOptions(args)
	if err != nil {
		return "", nil, err
	}
	sess := sb.Session()
	if sess == nil {
		return "", nil, client.Errorf(taxonomy.KindPrecondition, "", "engine: %s is %s, not RUNNING; resume it first", sb.ID(), sb.Lifecycle())
	}
	// One exchange where the daemon offers the run route.
	ex, st, err := sess.StartStream(ctx, args.Command, o)
	if err != nil {
		return "", nil, err
	}
	defer st.Close()
	sum := cliapi.ExecStreamData{ExecID: ex.ID()}
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
			return "", nil, &failure{err: asClientError(err), data: sum}
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
			t := ev.Exit.Truncated
			sum.Truncated = &t
			var code, sig *int64
			if ev.Exit.ExitCode != nil {
				v := int64(*ev.Exit.ExitCode)
				code = &v
			}
			if ev.Exit.Signal != nil {
				v := int64(*ev.Exit.Signal)
				sig = &v
			}
			sum.ExitCode = code
			event(cliapi.StreamExitLine{Event: cliapi.EventExit, ExitCode: code, Signal: sig, Truncated: ev.Exit.Truncated,
				WritersMayBeAlive: ev.Exit.WritersMayBeAlive, Offset: int64(ev.Exit.Offset)})
		}
	}
	sum.NextOffset = int64(st.Cursor())
	if !sawExit {
		sum.ExitCode, sum.Truncated = nil, nil
		return "", nil, &failure{err: client.Errorf(taxonomy.KindExecFailed, "", "the stream of %s ended without an exit event at offset %d; its outcome is unknown", ex.ID(), sum.NextOffset), data: sum}
	}
	// Every byte was delivered: release the output on the daemon, unless
	// the run route already did with the exit event.
	if !st.Released() {
		if err := ex.Release(ctx); err != nil && !errors.Is(err, client.WireKindError(taxonomy.WireConflict)) {
			return "", nil, &failure{err: asClientError(err), data: sum}
		}
	}
	return cliapi.TypeExecStream, sum, nil
}

// treeBytes is the size of the regular files under dir, what a directory
// copy moved; an unreadable entry counts nothing rather than failing a copy
// that succeeded.
func treeBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, ierr := d.Info(); ierr == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
