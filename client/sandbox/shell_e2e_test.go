package sandbox

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"golang.org/x/net/websocket"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// shellSandbox launches, on a real emulator with agentd confined in its
// guest, a MicroVM whose connectors are ingress the given ones (by name,
// rendered as ARNs), and attaches to it.
func shellSandbox(t *testing.T, clk *fakeClock, ingress ...string) (*fixture, *Sandbox) {
	t.Helper()
	f := newFixture(t, emulator.Options{VMs: emulator.AgentdLauncher(agentdHost, nil), Now: clk.Now})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	token, err := newAgentToken()
	if err != nil {
		t.Fatal(err)
	}
	payload, err := cplane.NewRunHookPayload(token, nil)
	if err != nil {
		t.Fatal(err)
	}
	var arns []string
	for _, n := range ingress {
		arns = append(arns, lambdamicrovms.ConnectorARN("us-east-1", n))
	}
	out, err := f.cp.RunMicrovm(ctx, &lambdamicrovms.RunMicrovmInput{
		ImageIdentifier: aws.String(f.emu.AddImage("shell")), RunHookPayload: aws.String(payload.Payload()),
		IngressNetworkConnectors: arns,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f.cp, aws.ToString(out.MicrovmId)).Await(ctx, Running, cplane.WaitOptions{Interval: 10 * time.Millisecond, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	sb, err := Attach(ctx, f.cp, aws.ToString(out.MicrovmId), token, Options{Wait: fast})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })
	return f, sb
}

// drain reads sh until EOF, bounded so a shell that never exits fails the
// test instead of hanging it.
func drain(t *testing.T, sh *Shell) string {
	t.Helper()
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, sh)
		got <- b.Bytes()
	}()
	select {
	case b := <-got:
		return string(b)
	case <-time.After(2 * time.Minute):
		sh.Close()
		t.Fatalf("the shell did not exit; so far: %q", <-got)
		return ""
	}
}

// shellSession types script into a fresh shell and returns all it printed.
func shellSession(t *testing.T, sb *Sandbox, want ShellVia, before func(*Shell), script string) string {
	t.Helper()
	sh, err := sb.Shell(t.Context(), ShellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	if sh.Via() != want {
		t.Fatalf("opened via %s, want %s", sh.Via(), want)
	}
	if want == ShellPlatform && sh.SessionID() == "" {
		t.Error("no session_init id")
	}
	if before != nil {
		before(sh)
	}
	if _, err := sh.Write([]byte(script)); err != nil {
		t.Fatal(err)
	}
	return drain(t, sh)
}

// Catches: a shell that is not a terminal (no echo of hi on its own line,
// no exit on `exit`), a resize frame the endpoint ignores or types as keys,
// Ctrl-C that does not reach the foreground job as SIGINT, and a
// SHELL_INGRESS MicroVM opened through agentd instead of the platform's
// endpoint (or the reverse).
func TestShellOpensATerminalOnEitherPath(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ingress []string
		via     ShellVia
	}{
		{"platform", []string{"HTTP_INGRESS", taxonomy.ShellIngressConnector}, ShellPlatform},
		{"agentd", []string{"ALL_INGRESS"}, ShellAgentd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, sb := shellSandbox(t, &fakeClock{t: time.Unix(1_800_000_000, 0)}, tc.ingress...)
			// The terminal echoes the typed line; hi must come after it.
			if out := shellSession(t, sb, tc.via, nil, "echo hi; exit\n"); !strings.Contains(strings.Replace(out, "echo hi; exit", "", 1), "hi\r\n") {
				t.Errorf("no line hi in %q", out)
			}
			resize := func(sh *Shell) {
				if err := sh.Resize(40, 120); err != nil {
					t.Fatal(err)
				}
			}
			if out := shellSession(t, sb, tc.via, resize, "stty size; exit\n"); !strings.Contains(out, "40 120") {
				t.Errorf("stty size after a resize to 40x120 printed %q", out)
			}
			// Ctrl-C is a byte on the terminal; the shell reports 130. The
			// child prints a marker (spelled apart, so the echoed line does
			// not match) before it blocks: once it is read, the child is
			// the foreground job, so the interrupt cannot race its start.
			ctrlC := func(sh *Shell) {
				if _, err := sh.Write([]byte("sh -c 'echo sta\"\"rted; exec sleep 300'\n")); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 4096)
				var seen strings.Builder
				for i := 0; !strings.Contains(seen.String(), "started"); i++ {
					if i == 1000 {
						t.Fatalf("the child never started: %q", seen.String())
					}
					n, err := sh.Read(buf)
					if err != nil {
						t.Fatal(err)
					}
					seen.Write(buf[:n])
				}
				if _, err := sh.Write([]byte{0x03}); err != nil {
					t.Fatal(err)
				}
			}
			if out := shellSession(t, sb, tc.via, ctrlC, "echo rc=$?; exit\n"); !strings.Contains(out, "rc=130") {
				t.Errorf("after Ctrl-C on sleep, the shell printed %q", out)
			}
		})
	}
}

// Catches: a shell endpoint that takes a made-up token, an expired one, an
// ordinary port token, or a plain (non-WebSocket) request; and a shell
// token minted for a MicroVM without SHELL_INGRESS or with it beside
// ALL_INGRESS.
func TestShellEndpointRefusesBadTokens(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	f, sb := shellSandbox(t, clk, "HTTP_INGRESS", taxonomy.ShellIngressConnector)
	ctx := t.Context()
	endpoint := cplane.EndpointURL(sb.Endpoint())

	if _, err := DialShell(ctx, endpoint, "emulator-token-made-up", 24, 80); client.KindOf(err) != taxonomy.KindCredentials {
		t.Errorf("a made-up token: %v (kind %s), want Credentials", err, client.KindOf(err))
	}
	port, err := MintURL(ctx, f.cp, sb.ID(), 9000, URLOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DialShell(ctx, endpoint, port.Headers.Get(taxonomy.ProxyAuthHeader), 24, 80); err == nil {
		t.Error("a port token opened the shell")
	}
	out, err := f.cp.CreateMicrovmShellAuthToken(ctx, &lambdamicrovms.CreateMicrovmShellAuthTokenInput{MicrovmIdentifier: aws.String(sb.ID()), ExpirationInMinutes: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	tok := out.AuthToken[taxonomy.ProxyAuthHeader]
	sh, err := DialShell(ctx, endpoint, tok, 24, 80)
	if err != nil {
		t.Fatalf("a fresh shell token: %v", err)
	}
	sh.Close()
	if code, body := get(t, endpoint+"/", map[string][]string{taxonomy.ProxyAuthHeader: {tok}}); code != 502 || body != "" {
		t.Errorf("a plain GET with the shell token: %d %q, want 502 and no body", code, body)
	}
	clk.Advance(2 * time.Minute)
	if _, err := DialShell(ctx, endpoint, tok, 24, 80); client.KindOf(err) != taxonomy.KindCredentials {
		t.Errorf("an expired token: %v (kind %s), want Credentials", err, client.KindOf(err))
	}

	f2, plain := shellSandbox(t, clk, "ALL_INGRESS")
	if _, err := f2.cp.CreateMicrovmShellAuthToken(ctx, &lambdamicrovms.CreateMicrovmShellAuthTokenInput{MicrovmIdentifier: aws.String(plain.ID()), ExpirationInMinutes: aws.Int32(5)}); err == nil || !strings.Contains(err.Error(), "requires SHELL_INGRESS") {
		t.Errorf("a shell token for a MicroVM without SHELL_INGRESS: %v", err)
	}
	// Launched and RUNNING, yet refused at the token call (measured).
	f3, both := shellSandbox(t, clk, taxonomy.ShellIngressConnector, "ALL_INGRESS")
	if _, err := f3.cp.CreateMicrovmShellAuthToken(ctx, &lambdamicrovms.CreateMicrovmShellAuthTokenInput{MicrovmIdentifier: aws.String(both.ID()), ExpirationInMinutes: aws.Int32(5)}); err == nil || !strings.Contains(err.Error(), "cannot be combined") {
		t.Errorf("a shell token for SHELL_INGRESS beside ALL_INGRESS: %v", err)
	}
}

// Catches: a shell reader without its bound (a guest or endpoint sending an
// endless frame would be buffered whole) and one that hands a frame over
// the bound to the caller as terminal bytes.
func TestShellReaderHoldsItsFrameBound(t *testing.T) {
	srv := httptest.NewServer(websocket.Server{
		Handshake: func(c *websocket.Config, r *http.Request) error {
			c.Protocol = []string{taxonomy.WebSocketSubprotocol}
			return nil
		},
		Handler: func(ws *websocket.Conn) {
			_ = client.ShellCodec.Send(ws, client.ShellOut{Text: true, Data: client.ShellSessionInitFrame("s")})
			_ = client.ShellCodec.Send(ws, client.ShellOut{Data: []byte("ok")})
			_ = client.ShellCodec.Send(ws, client.ShellOut{Data: bytes.Repeat([]byte{'x'}, taxonomy.MaxShellFrameBytes+1)})
			var in client.ShellIn
			_ = client.ShellCodec.Receive(ws, &in) // until the client hangs up
		},
	})
	defer srv.Close()
	sh, err := DialShell(t.Context(), srv.URL, "tok", 24, 80)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	buf := make([]byte, 64)
	if n, err := sh.Read(buf); err != nil || string(buf[:n]) != "ok" {
		t.Fatalf("first read: %q %v", buf[:n], err)
	}
	n, err := sh.Read(buf)
	if err == nil || n != 0 {
		t.Fatalf("a frame over %d bytes was read: %d bytes, %v", taxonomy.MaxShellFrameBytes, n, err)
	}
}
