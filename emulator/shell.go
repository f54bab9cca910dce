package emulator

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/websocket"

	"github.com/microvms/microvms/client"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// shellConnectorsRefusal is the token call's refusal of a connector set
// the platform launches but will not give a shell for: ALL_INGRESS beside
// another ingress connector (finding shell-endpoint).
func shellConnectorsRefusal(connectors []string) string {
	all := false
	for _, c := range connectors {
		all = all || c == "ALL_INGRESS" || hasSuffix(c, ":ALL_INGRESS")
	}
	if all && len(connectors) > 1 {
		return "ALL_INGRESS cannot be combined with other ingress network connectors; use HTTP_INGRESS and/or SHELL_INGRESS instead"
	}
	return ""
}

// shellAgentToken is the agent token of a launch's runHookPayload, "" when
// it carries none: the emulator reaches agentd's PTY with it.
func shellAgentToken(payload *string) string {
	var hook protocol.RunHookPayload
	if payload == nil || json.Unmarshal([]byte(*payload), &hook) != nil {
		return ""
	}
	return hook.AgentToken
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

// serveShell is the shell endpoint for a request carrying an unexpired
// shell token (finding shell-endpoint): a WebSocket that sends one
// session_init text frame, then carries the terminal's bytes in binary
// frames both ways and takes resize text frames; any other text frame is
// typed as keys, as the platform does. The terminal is a PTY exec of the
// guest's shell through its agentd (the emulator has no other way into a
// guest), so it starts 24x80 where the platform's starts 0x0. A plain
// request with the token answers 502 with an empty body, as measured.
func (s *Server) serveShell(w http.ResponseWriter, r *http.Request, vm *microvm) {
	s.mu.Lock()
	guest, state, port, agentToken := vm.guest, vm.state, vm.agentPort, vm.agentToken
	s.mu.Unlock()
	// Without the agent token there is no way to agentd's PTY.
	if !isWebSocketUpgrade(r) || guest == nil || state != cp.MicrovmStateRUNNING || agentToken == "" {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	addr, ok := guest.Ports[port]
	if guest.Dial != nil {
		addr, ok = "127.0.0.1:"+strconv.Itoa(port), true
	}
	if !ok {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	sess, err := client.Direct("http://"+addr, agentToken, client.WithHTTPClient(&http.Client{Transport: guest.RoundTripper(proxyTransport)}))
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	websocket.Server{
		Handshake: func(c *websocket.Config, r *http.Request) error {
			c.Protocol = []string{taxonomy.WebSocketSubprotocol}
			return nil
		},
		Handler: func(ws *websocket.Conn) { s.bridgeShell(ws, sess) },
	}.ServeHTTP(w, r)
}

// bridgeShell joins the WebSocket to a PTY exec until either ends.
func (s *Server) bridgeShell(ws *websocket.Conn, sess *client.Session) {
	defer ws.Close()
	ws.MaxPayloadBytes = taxonomy.MaxShellFrameBytes
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	ex, err := sess.Start(ctx, []string{`exec "${SHELL:-sh}" -i`}, client.StartOptions{Shell: true, Stdin: true, TTY: &protocol.TTYSize{Rows: 24, Cols: 80}})
	if err != nil {
		return
	}
	defer func() {
		// Release the exec whichever side ended first.
		c, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer stop()
		_, _ = ex.Kill(c)
		_, _ = ex.Ack(c)
	}()
	if err := client.ShellCodec.Send(ws, client.ShellOut{Text: true, Data: client.ShellSessionInitFrame(newSessionID())}); err != nil {
		return
	}
	st := ex.Stream(ctx, 0)
	defer st.Close()
	done := make(chan struct{})
	go func() {
		// The shell's output; its exit closes the WebSocket (1000).
		defer close(done)
		defer ws.Close()
		for {
			ev, err := st.Next()
			if err != nil || ev.Kind == client.EventExit {
				return
			}
			if ev.Kind == client.EventOutput {
				if client.ShellCodec.Send(ws, client.ShellOut{Data: ev.Data}) != nil {
					return
				}
			}
		}
	}()
	for {
		var in client.ShellIn
		if err := client.ShellCodec.Receive(ws, &in); err != nil {
			break
		}
		f, err := client.DecodeShellFrame(in.Text, in.Data)
		if err != nil {
			continue
		}
		if f.Control == taxonomy.ShellResize {
			_ = ex.Resize(ctx, f.Rows, f.Cols)
			continue
		}
		if len(f.Data) > 0 {
			if _, err := ex.WriteStdin(ctx, f.Data); err != nil {
				break
			}
		}
	}
	cancel()
	<-done
}

// newSessionID is a random UUID (version 4), the session_init id's form.
func newSessionID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
