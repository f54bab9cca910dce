package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/mcpapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// mcpSessionProtocols are the MCP versions the server speaks: the ones with
// a session. From 2026-07-28 streamable HTTP is sessionless, and a sandbox
// must belong to a session that ends, or nothing would ever tear it down.
func mcpSessionProtocols() []string {
	var vs []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v < "2026-07-28" {
			vs = append(vs, v)
		}
	}
	return vs
}

// Plane is the control plane the command opened for the server, and what
// a create's image steps (client/workflow's ResolveImage and Build) need.
type Plane struct {
	*platform.Platform
	// Local is the emulator this process runs for --local; nil otherwise.
	Local *embedded.Emulator
	// Agentd is the host agentd a local build bakes in ("" finds it as the
	// CLI does); Getenv reads the environment.
	Agentd string
	Getenv func(string) string
}

// Options are one server's: its plane, its defaults for sandbox_create,
// where it speaks and where it logs.
type Options struct {
	Plane   Plane
	Image   string // the image a create that names none launches
	Role    string // the execution role a launch on AWS passes
	Version string // the server's version in the MCP handshake
	// HTTP is the address of streamable HTTP; "" serves stdio on Stdin and
	// Stdout.
	HTTP           string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Serve serves the tools until the stdio client goes or ctx ends, then
// terminates every sandbox a session created.
func Serve(ctx context.Context, o Options) error {
	s := &mcpServer{stderr: o.Stderr, p: o.Plane, image: o.Image, role: o.Role, version: o.Version,
		sessions: map[*mcp.ServerSession]*mcpSession{}, sizeImages: map[int64]string{}}
	srv := s.server()
	why := "the client closed the session"
	var err error
	if o.HTTP == "" {
		err = srv.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(o.Stdin), Writer: nopWriteCloser{o.Stdout}})
		if ctx.Err() != nil {
			why = "the server was interrupted"
		}
	} else {
		err = s.serveHTTP(ctx, srv, o.HTTP)
		why = "the server was interrupted"
	}
	s.closeAll(why)
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		return client.Errorf(taxonomy.KindUnexpected, "", "mcp: %v", err)
	}
	return nil
}

// CheckListen refuses a non-loopback --http address unless asked for.
func CheckListen(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return render.InvalidArg("", "--http %q is not host:port: %v", addr, err)
	}
	if allowRemote {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return render.InvalidArg("", "--http %q is not a loopback address: anyone who reaches it could run commands in these sandboxes; use 127.0.0.1:PORT, or pass --allow-remote behind your own authentication", addr)
	}
	return nil
}

func (s *mcpServer) serveHTTP(ctx context.Context, srv *mcp.Server, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return client.Errorf(taxonomy.KindPrecondition, "", "mcp: listening on %s: %v", addr, err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: mcpapi.HTTPSessionIdleSec * time.Second})
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.logf("serving MCP over streamable HTTP at http://%s/mcp", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	// Sessions first: their calls in flight hold requests open, which a
	// graceful shutdown would otherwise wait out.
	s.closeAll("the server was interrupted")
	// Every session is torn down and its calls cancelled: nothing is left
	// to finish gracefully, and a client's open event stream would
	// otherwise hold a Shutdown to its deadline.
	_ = hs.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// mcpServer is one `microvm mcp` process: its control plane and the
// sandboxes of every session.
type mcpServer struct {
	stderr  io.Writer
	p       Plane
	image   string
	role    string
	version string

	logMu sync.Mutex

	imageMu    sync.Mutex
	sizeImages map[int64]string // local mode: a size class's image, built once

	mu       sync.Mutex
	seq      int
	sessions map[*mcp.ServerSession]*mcpSession
	closing  bool
}

// mcpSession is one client session and the sandboxes it created.
type mcpSession struct {
	name   string
	life   context.Context
	cancel context.CancelFunc // stops every call in flight
	done   chan struct{}      // closed when teardown finished

	mu       sync.Mutex
	closed   bool
	creating int
	boxes    map[string]*mcpBox
	inflight sync.WaitGroup
}

type mcpBox struct {
	sb      *sandbox.Sandbox
	image   string
	created time.Time

	vmu      sync.Mutex
	attached []*checkpoint.Attachment // the volumes sb holds, saved at terminate
}

func (s *mcpServer) logf(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.stderr, "microvm mcp: "+format+"\n", args...)
}

// session is the state of ss, made on first sight; a watcher tears it down
// when ss ends.
func (s *mcpServer) session(ss *mcp.ServerSession) (*mcpSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[ss]; ok {
		return st, nil
	}
	if s.closing {
		return nil, client.Errorf(taxonomy.KindInterrupted, "", "the server is shutting down")
	}
	s.seq++
	life, cancel := context.WithCancel(context.Background())
	st := &mcpSession{name: fmt.Sprintf("session %d", s.seq), life: life, cancel: cancel, done: make(chan struct{}), boxes: map[string]*mcpBox{}}
	s.sessions[ss] = st
	go func() {
		_ = ss.Wait()
		s.endSession(st, "the client closed the session")
	}()
	return st, nil
}

// closeAll ends every session and waits for each teardown.
func (s *mcpServer) closeAll(why string) {
	s.mu.Lock()
	s.closing = true
	var all []*mcpSession
	for _, st := range s.sessions {
		all = append(all, st)
	}
	s.mu.Unlock()
	for _, st := range all {
		s.endSession(st, why)
	}
	for _, st := range all {
		<-st.done
	}
}

// endSession stops the session's calls in flight and terminates every
// sandbox it created, logging what each teardown did. It runs once.
func (s *mcpServer) endSession(st *mcpSession, why string) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.closed = true
	st.mu.Unlock()
	defer close(st.done)
	st.cancel()
	budget := time.Duration(mcpapi.TeardownBudgetSec) * time.Second
	// A create in flight lands its sandbox in boxes, or terminates it
	// itself once it sees the session closed; wait for those first.
	waited := make(chan struct{})
	go func() { st.inflight.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(budget):
		s.logf("teardown (%s): calls still in flight after %s; terminating anyway", st.name, budget)
	}
	st.mu.Lock()
	boxes := make([]*mcpBox, 0, len(st.boxes))
	for _, b := range st.boxes {
		boxes = append(boxes, b)
	}
	st.boxes = map[string]*mcpBox{}
	st.mu.Unlock()
	if len(boxes) == 0 {
		s.logf("teardown (%s, %s): no sandbox to terminate", st.name, why)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	var wg sync.WaitGroup
	lines := make([]string, len(boxes))
	leaked := 0
	var leakMu sync.Mutex
	for i, b := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.detachVolumes(ctx, b)
			rep := b.sb.Terminate(ctx, sandbox.TeardownOptions{})
			if rep.Clean() {
				lines[i] = b.sb.ID() + " terminated"
				return
			}
			leakMu.Lock()
			leaked++
			leakMu.Unlock()
			lines[i] = fmt.Sprintf("%s left %v", b.sb.ID(), rep.Leaked)
		}()
	}
	wg.Wait()
	s.logf("teardown (%s, %s): %d sandboxes, %d leaked: %s", st.name, why, len(boxes), leaked, strings.Join(lines, "; "))
}

// enter admits one call into the session, or refuses it once the session
// is ending; the returned context also ends with the session.
func (st *mcpSession) enter(ctx context.Context) (context.Context, func(), error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, nil, client.Errorf(taxonomy.KindInterrupted, "", "this session is ending; its sandboxes are being terminated")
	}
	st.inflight.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(st.life, cancel)
	return ctx, func() { stop(); cancel(); st.inflight.Done() }, nil
}

// box is the session's sandbox id, or a refusal naming the tool that lists them.
func (st *mcpSession) box(id string) (*mcpBox, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if b, ok := st.boxes[id]; ok {
		return b, nil
	}
	return nil, client.Errorf(taxonomy.KindInvalidArg, "", "no sandbox %q in this session (sandbox_list names them; a sandbox belongs to the session that created it)", id)
}

// toolDecl is the tool's declaration in gen/mcpapi.
func toolDecl(name string) *mcp.Tool {
	i := slices.IndexFunc(mcpapi.Tools, func(t mcpapi.Tool) bool { return t.Name == name })
	if i < 0 {
		panic("mcp: tool " + name + " is not declared in api/mcp.yaml")
	}
	t := mcpapi.Tools[i]
	destructive := t.Destructive
	openWorld := false
	return &mcp.Tool{Name: t.Name, Title: t.Title, Description: t.Description,
		InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
		Annotations: &mcp.ToolAnnotations{Title: t.Title, ReadOnlyHint: t.ReadOnly, DestructiveHint: &destructive,
			IdempotentHint: t.Idempotent, OpenWorldHint: &openWorld}}
}

// mcpHandler is one tool's behaviour: its structured result and its text
// rendering.
type mcpHandler[In, Out any] func(ctx context.Context, req *mcp.CallToolRequest, st *mcpSession, in In) (Out, string, error)

// addTool registers the declared tool name with h. The SDK validates the
// arguments against the declared input schema before h runs and the result
// against the output schema after; an error becomes a tool error (isError)
// whose text leads with the error's stable code.
func addTool[In, Out any](s *mcpServer, srv *mcp.Server, name string, h mcpHandler[In, Out]) {
	mcp.AddTool(srv, toolDecl(name), func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		st, err := s.session(req.Session)
		if err != nil {
			return nil, zero, toolError(err)
		}
		ctx, leave, err := st.enter(ctx)
		if err != nil {
			return nil, zero, toolError(err)
		}
		defer leave()
		out, text, err := h(ctx, req, st, in)
		if err != nil {
			return nil, zero, toolError(err)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
	})
}

// toolError is the error an agent reads: the stable code, then the message.
func toolError(err error) error {
	ce := render.AsClientError(err)
	return fmt.Errorf("%s: %s", ce.Code(), ce.Error())
}

func (s *mcpServer) server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: mcpapi.ServerName, Title: mcpapi.ServerTitle, Version: s.version},
		&mcp.ServerOptions{
			Instructions:              mcpapi.ServerInstructions,
			SupportedProtocolVersions: mcpSessionProtocols(),
			Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
			InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
				if st, err := s.session(req.Session); err == nil {
					who := "a client"
					if ip := req.Session.InitializeParams(); ip != nil && ip.ClientInfo != nil {
						who = ip.ClientInfo.Name
					}
					s.logf("%s: %s connected", st.name, who)
				}
			},
		})
	addTool(s, srv, mcpapi.ToolSandboxCreate, s.create)
	addTool(s, srv, mcpapi.ToolSandboxExec, s.exec)
	addTool(s, srv, mcpapi.ToolSandboxExecStart, s.execStart)
	addTool(s, srv, mcpapi.ToolSandboxExecOutput, s.execOutput)
	addTool(s, srv, mcpapi.ToolSandboxExecKill, s.execKill)
	addTool(s, srv, mcpapi.ToolSandboxWriteFile, s.writeFile)
	addTool(s, srv, mcpapi.ToolSandboxReadFile, s.readFile)
	addTool(s, srv, mcpapi.ToolSandboxListFiles, s.listFiles)
	addTool(s, srv, mcpapi.ToolSandboxNetworkShow, s.networkShow)
	addTool(s, srv, mcpapi.ToolSandboxNetworkSet, s.networkSet)
	addTool(s, srv, mcpapi.ToolSandboxSuspend, s.suspend)
	addTool(s, srv, mcpapi.ToolSandboxResume, s.resume)
	addTool(s, srv, mcpapi.ToolSandboxTerminate, s.terminate)
	addTool(s, srv, mcpapi.ToolSandboxList, s.list)
	addTool(s, srv, mcpapi.ToolSandboxCheckpoint, s.checkpoint)
	addTool(s, srv, mcpapi.ToolSandboxFork, s.fork)
	addTool(s, srv, mcpapi.ToolCheckpointImage, s.checkpointImage)
	addTool(s, srv, mcpapi.ToolSandboxVolumeSync, s.volumeSync)
	return srv
}
