package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// maxEngineLine bounds one request line: a file written through `write`
// travels inside it as base64, and sandbox.MaxReadFileBytes is the largest
// file the library reads back whole.
const maxEngineLine = 4*sandbox.MaxReadFileBytes/3 + 1<<20

// engineTeardownBudget bounds the teardown the engine runs when its stdin
// ends with a launched sandbox still up: the caller is gone, so nobody waits
// on it, but a VM left running bills.
const engineTeardownBudget = 2 * time.Minute

// server is one engine process: the reply stream, the requests in flight
// (cancel's targets, by request id across every handle) and the sandboxes
// it serves by the caller's handle (api/engine.yaml request sandbox).
type server struct {
	a       *render.IO
	writeMu sync.Mutex
	out     *json.Encoder

	reqMu    sync.Mutex
	inflight map[int64]context.CancelFunc

	// handles are the engine's sandboxes by handle; "" is the default one a
	// request without a handle addresses. Each has its own lock, so a long
	// op on one never waits on another's.
	hMu     sync.Mutex
	handles map[string]*engine

	// platforms are the control planes (SDK clients) opened so far, by
	// region and endpoint: a process's sandboxes share them, as one
	// program's SDK clients would, instead of opening one per create
	// (about 3 ms: config, credentials chain, clients; issue 52).
	pfMu      sync.Mutex
	platforms map[string]*platform.Platform
}

// platform is the control plane at region and endpoint ("" for AWS's own),
// opened once per engine process.
func (s *server) platform(region client.Region, endpoint string) (*platform.Platform, error) {
	key := region.String() + " " + endpoint
	s.pfMu.Lock()
	defer s.pfMu.Unlock()
	if pf, ok := s.platforms[key]; ok {
		return pf, nil
	}
	// Background: the platform outlives the request that opened it.
	pf, err := platform.Open(context.Background(), platform.Options{Region: region, Endpoint: endpoint, Emulator: planes.EmulatorSide(nil), Getenv: s.a.Env})
	if err != nil {
		return nil, err
	}
	if s.platforms == nil {
		s.platforms = map[string]*platform.Platform{}
	}
	s.platforms[key] = pf
	return pf, nil
}

// engine is one sandbox handle's state: at most one sandbox (or a pool),
// and in local mode the emulator it lives in.
type engine struct {
	a *render.IO
	s *server

	mu              sync.Mutex
	sb              *sandbox.Sandbox
	emu             *embedded.Emulator
	bound           bool // a control plane is chosen (create or attach began)
	region          client.Region
	controlEndpoint string
	launched        bool // this engine launched sb, so it tears it down when its caller goes
	imageARN        string

	// The volumes sb holds (create's volumes), saved and released at
	// terminate, and the store they live in.
	vols     *checkpoint.Volumes
	attached []*checkpoint.Attachment

	// A pool instead of a sandbox (pool_open), and the members it handed out.
	pool       *sandbox.Pool
	poolSize   int64
	poolClosed bool
	served     int64
	members    map[string]*sandbox.Sandbox

	reqMu       sync.Mutex
	buildEvents func(any) // the running build's event sender, if any
}

// maxHandle bounds a sandbox handle's length (api/engine.yaml request sandbox).
const maxHandle = 128

// bindingOps are the ops a new handle may start with: they bind a sandbox
// (or a pool) to it, or need none. Any other op under an unknown handle is
// refused, so a released handle is never silently a fresh, empty one.
var bindingOps = map[string]bool{
	engineapi.OpCreate: true, engineapi.OpBuild: true, engineapi.OpAttach: true,
	engineapi.OpRestore: true, engineapi.OpPoolOpen: true, engineapi.OpRunMany: true,
}

// Serve answers the requests on a's stdin, one response line each on its
// stdout, until stdin ends or ctx does; then it tears down every sandbox it
// launched, under every handle.
func Serve(ctx context.Context, a *render.IO) error {
	s := &server{a: a, out: json.NewEncoder(a.Stdout), inflight: map[int64]context.CancelFunc{}, handles: map[string]*engine{}}
	s.handles[""] = s.newEngine()
	s.out.SetEscapeHTML(false)
	ops, cancel := context.WithCancel(ctx)
	var inflight sync.WaitGroup
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(a.Stdin)
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
				s.serve(ops, req)
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
	// then tear down what this engine launched, every handle at once (each
	// bounded by engineTeardownBudget).
	cancel()
	inflight.Wait()
	s.hMu.Lock()
	all := make([]*engine, 0, len(s.handles))
	for _, e := range s.handles {
		all = append(all, e)
	}
	s.handles = map[string]*engine{}
	s.hMu.Unlock()
	var down sync.WaitGroup
	for _, e := range all {
		down.Add(1)
		go func() {
			defer down.Done()
			e.shutdown()
		}()
	}
	down.Wait()
	return err
}

func (s *server) newEngine() *engine {
	return &engine{a: s.a, s: s}
}

// engineFor is the state a request's handle names, made at a binding op.
func (s *server) engineFor(req engineapi.Request) (*engine, error) {
	h := ""
	if req.Sandbox != nil {
		h = *req.Sandbox
	}
	if req.Op == engineapi.OpCancel {
		h = "" // request ids are the engine's: a cancel reaches any handle's request
	}
	if len(h) > maxHandle {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: a sandbox handle is at most %d bytes; this one is %d", maxHandle, len(h))
	}
	s.hMu.Lock()
	defer s.hMu.Unlock()
	if e, ok := s.handles[h]; ok {
		return e, nil
	}
	if !bindingOps[req.Op] {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: no sandbox %q in this engine: it was released, or nothing was created under it", h)
	}
	if len(s.handles) > taxonomy.MaxEngineSandboxes { // the default handle is not counted
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: this engine holds MAX_ENGINE_SANDBOXES (%d) sandbox handles; release one first", taxonomy.MaxEngineSandboxes)
	}
	e := s.newEngine()
	s.handles[h] = e
	return e, nil
}

// release ends a handle: its sandbox (or pool) torn down as the engine's
// end would, and the handle forgotten.
func (s *server) release(req engineapi.Request) (string, any, error) {
	if err := decodeArgs(req.Args, &engineapi.ReleaseArgs{}); err != nil {
		return "", nil, err
	}
	if req.Sandbox == nil || *req.Sandbox == "" {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: release names a sandbox handle; the default sandbox ends with the engine (close its stdin)")
	}
	h := *req.Sandbox
	s.hMu.Lock()
	e, ok := s.handles[h]
	delete(s.handles, h)
	s.hMu.Unlock()
	if !ok {
		return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: no sandbox %q in this engine: it was released, or nothing was created under it", h)
	}
	terminated, leaked := e.shutdown()
	return engineapi.TypeReleased, engineapi.ReleasedData{Sandbox: h, Terminated: terminated, Leaked: leaked}, nil
}

// shutdown terminates a sandbox this engine launched and stops its emulator,
// which stops every guest it holds. It says whether it tore a sandbox down
// and what that left.
func (e *engine) shutdown() (terminated bool, leaked []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	leaked = []string{}
	if e.sb != nil && e.launched && !e.sb.WasTerminated() {
		ctx, cancel := context.WithTimeout(context.Background(), engineTeardownBudget)
		e.detachVolumesLocked(ctx)
		rep := e.sb.Terminate(ctx, sandbox.TeardownOptions{})
		cancel()
		terminated = true
		if !rep.Clean() {
			e.a.Warn("engine: teardown of %s left %v", e.sb.ID(), rep.Leaked)
			for _, l := range rep.Leaked {
				leaked = append(leaked, fmt.Sprint(l))
			}
		}
	}
	if e.pool != nil && !e.poolClosed {
		ctx, cancel := context.WithTimeout(context.Background(), engineTeardownBudget)
		rep := e.pool.Close(ctx)
		e.poolClosed = true
		cancel()
		if !rep.Clean() {
			e.a.Warn("engine: the pool's teardown left %v", rep.Leaked())
			for _, l := range rep.Leaked() {
				leaked = append(leaked, fmt.Sprint(l))
			}
		}
	}
	if e.emu != nil {
		e.emu.Close()
		e.emu = nil
	}
	return terminated, leaked
}

// send writes one reply frame as one line.
func (s *server) send(r engineapi.Reply) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_ = s.out.Encode(r)
}

// send writes one reply frame on the engine's stdout.
func (e *engine) send(r engineapi.Reply) { e.s.send(r) }

// serve answers one request with its final envelope. The request's context
// is the cancel op's to end.
func (s *server) serve(ctx context.Context, req engineapi.Request) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.reqMu.Lock()
	s.inflight[req.ID] = cancel
	s.reqMu.Unlock()
	defer func() {
		s.reqMu.Lock()
		delete(s.inflight, req.ID)
		s.reqMu.Unlock()
	}()
	var typ string
	var data any
	var err error
	switch req.Op {
	case engineapi.OpRelease:
		typ, data, err = s.release(req)
	default:
		var e *engine
		if e, err = s.engineFor(req); err == nil {
			typ, data, err = e.dispatch(ctx, req)
		}
	}
	if err != nil {
		ce := render.AsClientError(err)
		var partial any
		var f *render.Failure
		if errors.As(err, &f) {
			partial = f.Data
		}
		env := render.FailureEnvelope(ce, partial)
		// The CLI's suggestions name its own commands and flags, which a
		// package's caller does not type; the message says what to do.
		env.Suggestions = []string{}
		s.send(engineapi.Reply{ID: req.ID, Envelope: env})
		return
	}
	s.send(engineapi.Reply{ID: req.ID, Envelope: cliapi.Success{Status: cliapi.StatusOK, APIVersion: cliapi.APIVersion, Type: typ, Data: data}})
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
	case engineapi.OpBuild:
		var args engineapi.BuildArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.build(ctx, req.ID, args)
	case engineapi.OpAttach:
		var args engineapi.AttachArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.attach(ctx, args)
	case engineapi.OpRestore:
		var args engineapi.RestoreArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.restore(ctx, args)
	case engineapi.OpRunMany:
		var args engineapi.RunManyArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.runMany(ctx, args)
	case engineapi.OpPoolOpen:
		var args engineapi.PoolOpenArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.poolOpen(ctx, args)
	case engineapi.OpPoolWaitReady:
		var args engineapi.PoolWaitReadyArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.poolWaitReady(ctx, args)
	case engineapi.OpPoolAcquire:
		if err := decodeArgs(req.Args, &engineapi.PoolAcquireArgs{}); err != nil {
			return "", nil, err
		}
		return e.poolAcquire(ctx)
	case engineapi.OpPoolRelease:
		var args engineapi.PoolReleaseArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.poolRelease(ctx, args)
	case engineapi.OpPoolCost:
		if err := decodeArgs(req.Args, &engineapi.PoolCostArgs{}); err != nil {
			return "", nil, err
		}
		return e.poolCost(ctx)
	case engineapi.OpPoolClose:
		if err := decodeArgs(req.Args, &engineapi.PoolCloseArgs{}); err != nil {
			return "", nil, err
		}
		return e.poolClose(ctx)
	case engineapi.OpCancel:
		var args engineapi.CancelArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		e.s.reqMu.Lock()
		cancel, ok := e.s.inflight[args.RequestID]
		e.s.reqMu.Unlock()
		if ok && args.RequestID != req.ID {
			cancel()
		}
		// A request that already finished is no failure: the caller cannot
		// know it lost that race.
		return engineapi.TypeExecSignalled, engineapi.ExecSignalledData{Done: ok}, nil
	case engineapi.OpMkfifo:
		var args engineapi.MkfifoArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		if err := makeFIFO(args.Path); err != nil {
			return "", nil, err
		}
		return engineapi.TypeFile, engineapi.FileData{Path: args.Path}, nil
	}
	sb, err := e.sandbox()
	if err != nil {
		return "", nil, err
	}
	switch req.Op {
	case engineapi.OpCheckpoint, engineapi.OpCheckpointLs, engineapi.OpCheckpointRm, engineapi.OpCheckpointImage, engineapi.OpFork:
		return e.checkpointOp(ctx, sb, req)
	case engineapi.OpVolumeSync, engineapi.OpVolumeLs, engineapi.OpVolumeRm:
		return e.volumeOp(ctx, req)
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
		return e.stream(ctx, sb, req.ID, args)
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
		// The volumes sb holds get a last generation first, as the CLI's terminate does.
		e.mu.Lock()
		e.detachVolumesLocked(ctx)
		e.mu.Unlock()
		rep := sb.Terminate(context.WithoutCancel(ctx), sandbox.TeardownOptions{DeleteImage: args.DeleteImage})
		d := teardownData(sb, rep)
		if rep.ImageDeleted != sandbox.ImageNotAsked && e.imageARN != "" {
			d.ImageIdentifier = render.Present(e.imageARN)
		}
		return cliapi.TypeTeardown, d, nil
	case engineapi.OpCost:
		if err := decodeArgs(req.Args, &engineapi.CostArgs{}); err != nil {
			return "", nil, err
		}
		rep, err := sb.Cost(ctx, cost.Pinned(e.region))
		if err != nil {
			return "", nil, err
		}
		return cliapi.TypeCost, cliapi.CostData{Report: render.CostReport(rep)}, nil
	case engineapi.OpURL: // a port from outside, as microvm url answers it
		var args engineapi.URLArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return engineURL(ctx, sb, args)
	case engineapi.OpNetworkShow:
		if err := decodeArgs(req.Args, &engineapi.NetworkShowArgs{}); err != nil {
			return "", nil, err
		}
		return e.networkShow(ctx, sb)
	case engineapi.OpNetworkSet:
		var args engineapi.NetworkSetArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.networkSet(ctx, sb, args)
	case engineapi.OpKeepalive:
		var args engineapi.KeepaliveArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.keepalive(ctx, sb, args)
	case engineapi.OpHealth, engineapi.OpMetrics:
		if err := decodeArgs(req.Args, &engineapi.HealthArgs{}); err != nil {
			return "", nil, err
		}
		return e.probe(ctx, sb, req.Op == engineapi.OpMetrics)
	case engineapi.OpWrite, engineapi.OpRead, engineapi.OpList, engineapi.OpUploadDir, engineapi.OpDownloadDir, engineapi.OpStat, engineapi.OpMkdir, engineapi.OpMove, engineapi.OpRemove, engineapi.OpWatch:
		return e.fileOp(ctx, sb, req)
	case engineapi.OpStart, engineapi.OpPoll, engineapi.OpWait, engineapi.OpFollow, engineapi.OpKill, engineapi.OpSignal, engineapi.OpResize, engineapi.OpStdinWrite, engineapi.OpStdinClose, engineapi.OpExecs:
		return e.execOp(ctx, sb, req)
	}
	return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: unknown op %q", req.Op)
}
