package sandbox

import (
	"context"
	"errors"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"golang.org/x/net/websocket"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ShellVia names the terminal a Shell opened.
type ShellVia string

const (
	// ShellPlatform is the platform's own shell endpoint: a WebSocket on the
	// MicroVM's endpoint, authorized by CreateMicrovmShellAuthToken.
	ShellPlatform ShellVia = "platform"
	// ShellAgentd is a PTY exec of the guest's login shell through agentd.
	ShellAgentd ShellVia = "agentd"
)

// ShellOptions shape OpenShell.
type ShellOptions struct {
	// Rows and Cols are the terminal's first size; 0 is 24x80.
	Rows, Cols uint16
	// Expires is the shell token's lifetime, whole minutes; 0 is the
	// ceiling (taxonomy.MaxAuthTokenMinutes).
	Expires time.Duration
	// Agentd is the daemon session for a MicroVM without SHELL_INGRESS;
	// nil, such a MicroVM is refused. Called only when needed.
	Agentd func(ctx context.Context) (*client.Session, error)
	// Command is what the agentd fallback runs on its PTY; empty is
	// the guest's $SHELL, else sh, as a login shell would be.
	Command string
}

// Shell is an interactive terminal in a MicroVM: Read gives what the
// terminal prints, Write types, Resize sizes it, Close ends it. Read
// returns io.EOF once the shell exited.
type Shell struct {
	via ShellVia
	id  string

	// the platform's WebSocket
	ws      *websocket.Conn
	session string
	pending []byte

	// agentd's PTY exec
	ex   *client.Exec
	st   *client.Stream
	ctx  context.Context
	stop context.CancelFunc

	wmu    sync.Mutex // one Write or Resize frame at a time
	closed sync.Once
}

// Via says which terminal this is.
func (s *Shell) Via() ShellVia { return s.via }

// SessionID is the platform's session_init id ("" on agentd).
func (s *Shell) SessionID() string { return s.session }

// OpenShell opens a terminal in MicroVM id: the platform's shell endpoint
// when the MicroVM was launched with a SHELL_INGRESS connector, else a PTY
// exec through agentd (o.Agentd). The MicroVM must be RUNNING. The
// platform's endpoint gets a shell token (CreateMicrovmShellAuthToken, which
// takes no port: the shell is not a port) offered as WebSocket subprotocols
// with no port subprotocol (finding shell-endpoint).
func OpenShell(ctx context.Context, c *lambdamicrovms.Client, id string, o ShellOptions) (*Shell, error) {
	if id == "" {
		return nil, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingShellEndpoint, "a shell needs the MicroVM id")
	}
	minutes := taxonomy.MaxAuthTokenMinutes
	if o.Expires != 0 {
		m, err := tokenMinutes(o.Expires)
		if err != nil {
			return nil, err
		}
		minutes = m
	}
	if o.Rows == 0 || o.Cols == 0 {
		o.Rows, o.Cols = 24, 80
	}
	g, err := c.GetMicrovm(ctx, &lambdamicrovms.GetMicrovmInput{MicrovmIdentifier: aws.String(id)})
	if err != nil {
		return nil, cplane.SDKError("GetMicrovm", err)
	}
	if err := takesTraffic(id, g); err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(g.IngressNetworkConnectors, isShellConnector) {
		if o.Agentd == nil {
			return nil, client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingShellEndpoint,
				"MicroVM %s has no %s connector, so the platform has no shell for it, and no agent session was given for agentd's", id, taxonomy.ShellIngressConnector)
		}
		sess, err := o.Agentd(ctx)
		if err != nil {
			return nil, err
		}
		return openAgentdShell(ctx, id, sess, o)
	}
	out, err := c.CreateMicrovmShellAuthToken(ctx, &lambdamicrovms.CreateMicrovmShellAuthTokenInput{
		MicrovmIdentifier: aws.String(id), ExpirationInMinutes: aws.Int32(int32(minutes)),
	})
	if err != nil {
		return nil, cplane.SDKError("CreateMicrovmShellAuthToken", err)
	}
	tok := out.AuthToken[taxonomy.ProxyAuthHeader]
	if tok == "" {
		return nil, client.Errorf(taxonomy.KindPlatform, taxonomy.FindingShellEndpoint, "CreateMicrovmShellAuthToken returned no %s entry", taxonomy.ProxyAuthHeader)
	}
	return DialShell(ctx, cplane.EndpointURL(aws.ToString(g.Endpoint)), tok, o.Rows, o.Cols)
}

// isShellConnector matches a connector ARN (or bare name) ending in
// SHELL_INGRESS.
func isShellConnector(c string) bool {
	return c == taxonomy.ShellIngressConnector || strings.HasSuffix(c, ":"+taxonomy.ShellIngressConnector) || strings.HasSuffix(c, "/"+taxonomy.ShellIngressConnector)
}

// DialShell opens the shell endpoint at endpoint (an http(s) URL) with a
// shell token, reads its session_init and sizes the terminal. A refused
// token is a failed handshake (the platform's is close 1006 with no
// reason), reported as ERR_CREDENTIALS.
func DialShell(ctx context.Context, endpoint, token string, rows, cols uint16) (*Shell, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingShellEndpoint, "endpoint %q: %v", endpoint, err)
	}
	origin := *u
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	if u.Path == "" {
		u.Path = "/"
	}
	cfg, err := websocket.NewConfig(u.String(), origin.String())
	if err != nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingShellEndpoint, "endpoint %q: %v", endpoint, err)
	}
	cfg.Protocol = []string{taxonomy.WebSocketSubprotocol, taxonomy.WebSocketAuthPrefix + token}
	ws, err := cfg.DialContext(ctx)
	if err != nil {
		var de *websocket.DialError
		if errors.As(err, &de) && errors.Is(de.Err, websocket.ErrBadStatus) {
			return nil, client.Errorf(taxonomy.KindCredentials, taxonomy.FindingShellEndpoint, "the shell endpoint refused the shell token: %v", err)
		}
		return nil, client.Errorf(taxonomy.KindRetryable, taxonomy.FindingShellEndpoint, "opening the shell endpoint: %v", err).WithCause(err)
	}
	ws.MaxPayloadBytes = taxonomy.MaxShellFrameBytes
	s := &Shell{via: ShellPlatform, ws: ws}
	// The first frame names the session; bytes before it are kept.
	var in client.ShellIn
	if err := client.ShellCodec.Receive(ws, &in); err != nil {
		ws.Close()
		return nil, client.Errorf(taxonomy.KindRetryable, taxonomy.FindingShellEndpoint, "the shell endpoint sent no session_init: %v", err).WithCause(err)
	}
	f, err := client.DecodeShellFrame(in.Text, in.Data)
	switch {
	case err != nil:
		ws.Close()
		return nil, client.Errorf(taxonomy.KindProtocol, taxonomy.FindingShellEndpoint, "the shell endpoint's first frame: %v", err)
	case f.Control == taxonomy.ShellSessionInit:
		s.session = f.SessionID
	default:
		s.pending = f.Data
	}
	// Before any resize the platform's terminal is 0x0 (measured), which
	// full-screen programs cannot use.
	if err := s.Resize(rows, cols); err != nil {
		ws.Close()
		return nil, err
	}
	return s, nil
}

// AgentdShell is agentd's terminal on a session the caller holds (a daemon
// reached directly, no control plane): the guest's shell on a PTY.
func AgentdShell(ctx context.Context, sess *client.Session, o ShellOptions) (*Shell, error) {
	if o.Rows == 0 || o.Cols == 0 {
		o.Rows, o.Cols = 24, 80
	}
	return openAgentdShell(ctx, "", sess, o)
}

// openAgentdShell runs a login shell on a PTY through agentd.
func openAgentdShell(ctx context.Context, id string, sess *client.Session, o ShellOptions) (*Shell, error) {
	cmd := o.Command
	if cmd == "" {
		cmd = `exec "${SHELL:-sh}" -i`
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	ex, err := sess.Start(ctx, []string{cmd}, client.StartOptions{Shell: true, Stdin: true, TTY: &protocol.TTYSize{Rows: o.Rows, Cols: o.Cols}})
	if err != nil {
		stop()
		return nil, err
	}
	st := ex.Stream(sctx, 0)
	if err := st.Connect(); err != nil {
		stop()
		_, _ = ex.Kill(ctx)
		return nil, err
	}
	return &Shell{via: ShellAgentd, id: id, ex: ex, st: st, ctx: sctx, stop: stop}, nil
}

// Read reads terminal output. io.EOF: the shell exited.
func (s *Shell) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.ws != nil {
			var in client.ShellIn
			if err := client.ShellCodec.Receive(s.ws, &in); err != nil {
				if errors.Is(err, io.EOF) {
					return 0, io.EOF
				}
				return 0, client.Errorf(taxonomy.KindRetryable, taxonomy.FindingShellEndpoint, "reading the shell: %v", err).WithCause(err)
			}
			f, err := client.DecodeShellFrame(in.Text, in.Data)
			if err != nil {
				return 0, client.Errorf(taxonomy.KindProtocol, taxonomy.FindingShellEndpoint, "a shell frame: %v", err)
			}
			s.pending = f.Data
			continue
		}
		ev, err := s.st.Next()
		if err != nil {
			return 0, err
		}
		switch ev.Kind {
		case client.EventOutput:
			s.pending = ev.Data
		case client.EventExit:
			// Released, so no ack is left owing.
			_, _ = s.ex.Ack(s.ctx)
			return 0, io.EOF
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// Write types p into the terminal, as keys (a 0x03 is Ctrl-C).
func (s *Shell) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.ws != nil {
		if err := client.ShellCodec.Send(s.ws, client.ShellOut{Data: p}); err != nil {
			return 0, client.Errorf(taxonomy.KindRetryable, taxonomy.FindingShellEndpoint, "typing into the shell: %v", err).WithCause(err)
		}
		return len(p), nil
	}
	return s.ex.WriteStdin(s.ctx, p)
}

// Resize sizes the terminal; rows and cols must be 1..65535.
func (s *Shell) Resize(rows, cols uint16) error {
	if rows == 0 || cols == 0 {
		return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingShellEndpoint, "a terminal of %dx%d: rows and cols must be at least 1", rows, cols)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.ws != nil {
		if err := client.ShellCodec.Send(s.ws, client.ShellOut{Text: true, Data: client.ShellResizeFrame(rows, cols)}); err != nil {
			return client.Errorf(taxonomy.KindRetryable, taxonomy.FindingShellEndpoint, "resizing the shell: %v", err).WithCause(err)
		}
		return nil
	}
	return s.ex.Resize(s.ctx, rows, cols)
}

// Close ends the session: the WebSocket closes (the platform then ends its
// shell), or agentd's shell is killed and released.
func (s *Shell) Close() error {
	s.closed.Do(func() {
		if s.ws != nil {
			_ = s.ws.Close()
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 10*time.Second)
		defer cancel()
		_, _ = s.ex.Kill(ctx)
		_ = s.st.Close()
		_, _ = s.ex.Ack(ctx)
		s.stop()
	})
	return nil
}

// Shell opens a terminal in this sandbox (OpenShell), agentd's through its
// session when the MicroVM has no SHELL_INGRESS connector.
func (s *Sandbox) Shell(ctx context.Context, o ShellOptions) (*Shell, error) {
	if o.Agentd == nil {
		o.Agentd = func(context.Context) (*client.Session, error) { return s.runningSession() }
	}
	return OpenShell(ctx, s.cp, s.id, o)
}
