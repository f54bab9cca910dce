package main_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testguest"
)

// startGuestServers starts, inside vm, `python3 -m http.server 8080` over a
// directory holding marker.txt and the WebSocket echo on 8081, and waits
// (bounded) until both listen.
func startGuestServers(t *testing.T, vm *proxiedVM) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := client.Proxied(cplane.EndpointURL(vm.endpoint), vm.agentToken, sandbox.ProxyMinter(vm.cpc, vm.id))
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.WriteFile(ctx, "/tmp/site/marker.txt", strings.NewReader("from the guest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sess.WriteFile(ctx, "/tmp/wsecho.py", strings.NewReader(testguest.WSEchoPy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"/usr/bin/python3", "-m", "http.server", "8080", "--bind", "127.0.0.1", "--directory", "/tmp/site"},
		{"/usr/bin/python3", "/tmp/wsecho.py", "8081"},
	} {
		if _, err := sess.Start(ctx, cmd, client.StartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, port := range []string{"8080", "8081"} {
		for i := 0; ; i++ {
			r, err := sess.Run(ctx, []string{"/usr/bin/python3", "-c", "import socket; socket.create_connection(('127.0.0.1', " + port + "), 1)"}, client.RunOptions{})
			if err == nil && r.ExitStatus == 0 {
				break
			}
			if i == 100 {
				t.Fatalf("nothing listens on guest port %s: %+v %v", port, r, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func httpGet(t *testing.T, u string, h map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Catches: url minting for more than the one port (the 9000 row), a URL
// whose headers do not open the port, data.headers or data.expiresAt
// missing or malformed, the human form not leading with the URL, bad ports
// and lifetimes reaching the control plane instead of exiting 2, and a VM
// that is not RUNNING given a URL.
func TestURLCommand(t *testing.T) {
	vm := launchProxied(t)
	startGuestServers(t, vm)
	env := awsEnv()
	target := []string{"--microvm-id", vm.id, "--control-endpoint", vm.cpURL}

	before := len(authTokenBodies(vm.emu, vm.id))
	now := time.Now()
	m := envelope(t, cli(t, env, "", append([]string{"--json", "url", "--port", "8080", "--expires", "5m"}, target...)...))
	if m["type"] != "microvm.url" {
		t.Fatalf("%v", m)
	}
	d := m["data"].(map[string]any)
	bodies := authTokenBodies(vm.emu, vm.id)
	if len(bodies) != before+1 || !jsonEqual(bodies[len(bodies)-1], `{"allowedPorts":[{"port":8080}],"expirationInMinutes":5}`) {
		t.Fatalf("mints %v, want one for exactly port 8080, 5 minutes", bodies[before:])
	}
	headers := map[string]string{}
	for k, v := range d["headers"].(map[string]any) {
		headers[k] = v.(string)
	}
	if headers[taxonomy.ProxyPortHeader] != "8080" || headers[taxonomy.ProxyAuthHeader] == "" || d["port"] != float64(8080) || d["microvmId"] != vm.id {
		t.Fatalf("data %v", d)
	}
	exp, err := time.Parse(time.RFC3339, d["expiresAt"].(string))
	if err != nil || exp.Before(now.Add(5*time.Minute-time.Second)) || exp.After(time.Now().Add(5*time.Minute+time.Second)) {
		t.Fatalf("expiresAt %v (%v), want about five minutes from now", d["expiresAt"], err)
	}
	subs, _ := d["subprotocols"].([]any)
	if len(subs) != 3 || subs[0] != "lambda-microvms" || subs[1] != "lambda-microvms.authentication."+headers[taxonomy.ProxyAuthHeader] || subs[2] != "lambda-microvms.port.8080" {
		t.Fatalf("subprotocols %v", d["subprotocols"])
	}
	url := d["url"].(string)
	if url != "http://"+vm.endpoint+"/" {
		t.Fatalf("url %q, want the endpoint's", url)
	}
	if status, b := httpGet(t, url, headers); status != 200 || !strings.Contains(b, "marker.txt") {
		t.Fatalf("the listing: %d %s", status, b)
	}
	other := map[string]string{taxonomy.ProxyAuthHeader: headers[taxonomy.ProxyAuthHeader], taxonomy.ProxyPortHeader: "9000"}
	if status, b := httpGet(t, url+"v1/health", other); status != 403 || !strings.Contains(b, "Access to port denied") {
		t.Fatalf("the 8080 token on agentd's 9000: %d %s", status, b)
	}
	if status, _ := httpGet(t, url, nil); status != 403 {
		t.Fatalf("no headers: %d", status)
	}

	// An attached command's flags are accepted as they are; an endpoint
	// that is not this VM's is refused.
	withAttach := append([]string{"--json", "url", "--port", "8080", "--endpoint", vm.endpoint, "--agent-token", vm.agentToken}, target...)
	if d := envelope(t, cli(t, env, "", withAttach...))["data"].(map[string]any); d["url"] != url {
		t.Fatalf("with the attach flags: %v", d)
	}
	wantFailure(t, cli(t, env, "", append([]string{"--json", "url", "--port", "8080", "--endpoint", "127.0.0.1:1"}, target...)...), taxonomy.KindInvalidArg, taxonomy.FindingEndpointBareHost)

	// --check: the guest's answer, or the endpoint's refusal with its row.
	if d := envelope(t, cli(t, env, "", append([]string{"--json", "url", "--port", "8080", "--check"}, target...)...))["data"].(map[string]any); d["checkStatus"] != float64(200) {
		t.Fatalf("--check of a served port: %v", d)
	}
	if d["checkStatus"] != nil {
		t.Fatalf("checkStatus without --check: %v", d["checkStatus"])
	}
	idle := wantFailure(t, cli(t, env, "", append([]string{"--json", "url", "--port", "8082", "--check"}, target...)...), taxonomy.KindPrecondition, taxonomy.FindingAllowedPortsUnion)
	if idle["data"].(map[string]any)["checkStatus"] != float64(502) || !strings.Contains(idle["error"].(string), "nothing answers") {
		t.Fatalf("--check of a port nothing listens on: %v", idle)
	}

	// The human form: the URL first, then the headers and a curl line.
	inv := cli(t, env, "", append([]string{"url", "--port", "8080", "--expires", "1m"}, target...)...)
	if inv.code != 0 || strings.SplitN(inv.stdout, "\n", 2)[0] != url || !strings.Contains(inv.stdout, "curl -H ") {
		t.Fatalf("human url: %d %q %q", inv.code, inv.stdout, inv.stderr)
	}

	before = len(vm.emu.Requests())
	for _, tc := range []struct {
		args    []string
		finding taxonomy.FindingID
	}{
		{[]string{"--port", "0"}, taxonomy.FindingAllowedPortsUnion},
		{[]string{"--port", "65536"}, taxonomy.FindingAllowedPortsUnion},
		{[]string{"--port", "8080", "--expires", "90s"}, taxonomy.FindingEndpointAuth},
		{[]string{"--port", "8080", "--expires", "61m"}, taxonomy.FindingEndpointAuth},
		{[]string{"--port", "8080", "--expires", "0s"}, taxonomy.FindingEndpointAuth},
	} {
		wantFailure(t, cli(t, env, "", append(append([]string{"--json", "url"}, tc.args...), target...)...), taxonomy.KindInvalidArg, tc.finding)
	}
	wantFailure(t, cli(t, env, "", "--json", "url", "--port", "8080", "--control-endpoint", vm.cpURL), taxonomy.KindInvalidArg, taxonomy.FindingEndpointAuth)
	if n := len(vm.emu.Requests()); n != before {
		t.Fatalf("refused input sent %d control-plane requests", n-before)
	}

	// Not RUNNING: exit 2 naming the state.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := vm.cpc.SuspendMicrovm(ctx, &lambdamicrovms.SuspendMicrovmInput{MicrovmIdentifier: &vm.id}); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.WaitMicrovm(ctx, vm.cpc, vm.id, types.MicrovmStateSuspended, cplane.WaitOptions{Interval: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f := wantFailure(t, cli(t, env, "", append([]string{"--json", "url", "--port", "8080"}, target...)...), taxonomy.KindInvalidArg, taxonomy.FindingSuspendIsFreeze)
	if !strings.Contains(f["error"].(string), "SUSPENDED") {
		t.Fatalf("%v", f)
	}
}

// Catches: forward not listening on loopback, not carrying HTTP or a
// WebSocket to the guest port, minting once and never renewing (the short
// --renew-before makes every request after half a second need a new
// token), stopping on SIGINT without closing its listener or with a failure
// exit, and a bad LOCAL:REMOTE reaching the control plane.
func TestForwardCommand(t *testing.T) {
	vm := launchProxied(t)
	startGuestServers(t, vm)
	env := awsEnv()
	target := []string{"--microvm-id", vm.id, "--control-endpoint", vm.cpURL}

	for _, bad := range []string{"8080", "x:8080", "0:0", "0:65536", "70000:8080"} {
		wantFailure(t, cli(t, env, "", append([]string{"--json", "forward", bad}, target...)...), taxonomy.KindInvalidArg, findingFor(bad))
	}

	listening := regexp.MustCompile(`forwarding http://(127\.0\.0\.1:\d+) to`)
	start := func(remote string, extra ...string) (*started, string) {
		s := startCLI(t, 2*time.Minute, env, nil, append(append([]string{"--json", "forward", "0:" + remote}, target...), extra...)...)
		for range 1000 {
			if m := listening.FindStringSubmatch(s.errb.String()); m != nil {
				return s, m[1]
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("forward never said where it listens: %q", s.errb.String())
		return nil, ""
	}
	stop := func(s *started, addr string) map[string]any {
		if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		m := envelope(t, s.wait(t))
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s still accepts after forward stopped", addr)
		}
		return m
	}

	before := len(authTokenBodies(vm.emu, vm.id))
	s, addr := start("8080", "--expires", "1m", "--renew-before", "59500ms")
	for i := range 4 {
		if status, b := httpGet(t, "http://"+addr+"/", nil); status != 200 || !strings.Contains(b, "marker.txt") {
			t.Fatalf("request %d through forward: %d %s", i, status, b)
		}
		time.Sleep(600 * time.Millisecond)
	}
	m := stop(s, addr)
	d := m["data"].(map[string]any)
	bodies := authTokenBodies(vm.emu, vm.id)[before:]
	if d["listen"] != addr || d["port"] != float64(8080) || d["mints"] != float64(len(bodies)) || len(bodies) < 3 {
		t.Fatalf("data %v after %d mints, want a renewal for most requests", d, len(bodies))
	}
	for _, b := range bodies {
		if !jsonEqual(b, `{"allowedPorts":[{"port":8080}],"expirationInMinutes":1}`) {
			t.Fatalf("a forward mint asked for %s", b)
		}
	}

	ws, wsAddr := start("8081")
	cfg, err := websocket.NewConfig("ws://"+wsAddr+"/", "http://"+wsAddr+"/")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("WebSocket through forward: %v", err)
	}
	for _, msg := range []string{"hello", "again"} {
		if err := websocket.Message.Send(conn, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := websocket.Message.Receive(conn, &got); err != nil || got != "echo:"+msg {
			t.Fatalf("echo of %q: %q %v", msg, got, err)
		}
	}
	// SIGINT with the WebSocket open: forward still stops, and the socket
	// ends with it.
	stop(ws, wsAddr)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got string
	if err := websocket.Message.Receive(conn, &got); err == nil {
		t.Fatalf("the WebSocket outlived forward: %q", got)
	}
	conn.Close()
}

func findingFor(bad string) taxonomy.FindingID {
	if bad == "0:0" || bad == "0:65536" {
		return taxonomy.FindingAllowedPortsUnion
	}
	return ""
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}
