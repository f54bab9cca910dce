package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// An exec_id over limits.max_exec_id_bytes is a 400 before anything holds or
// logs it, and a route given one never echoes it. Catches: no cap (200 execs
// with a 512 KiB id cost 176 MiB of RSS and 210 MB of log, the id logged
// twice per exec).
func TestExecIDLengthIsCapped(t *testing.T) {
	d := bootedDaemon(t, nil)
	long := strings.Repeat("i", protocol.DefaultMaxExecIDBytes+1)
	resp := d.start(protocol.StartRequest{ExecID: long, Command: []string{"true"}})
	if resp.StatusCode() != 400 || errorBody(t, resp.Body).Error != taxonomy.SlugMalformedRequest || !strings.Contains(string(resp.Body), "max_exec_id_bytes") {
		t.Fatalf("over-long exec_id: %d %s", resp.StatusCode(), resp.Body)
	}
	if d.srv.execs.get(long) != nil {
		t.Fatal("the over-long exec was registered")
	}
	d.mustStart(protocol.StartRequest{ExecID: long[1:], Command: []string{"true"}})
	poll, err := d.client.ExecPollWithResponse(context.Background(), long+long, auth(testToken))
	if err != nil || poll.StatusCode() != 404 || strings.Contains(string(poll.Body), long) {
		t.Fatalf("poll of an over-long id: %v %d %.200s", err, poll.StatusCode(), poll.Body)
	}
	// The running limit is published.
	sch, _ := d.client.SchemaWithResponse(context.Background())
	if !strings.Contains(string(sch.Body), `"max_exec_id_bytes"`) {
		t.Fatal("/v1/schema does not publish max_exec_id_bytes")
	}
}

// slowBody opens a connection and sends a request whose body never finishes:
// the headers and one byte of a declared 100.
func slowBody(t *testing.T, addr, method, path string) (func() (*http.Response, error), func()) {
	c, br := dialRaw(t, addr)
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", method, path)
	return func() (*http.Response, error) {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		return http.ReadResponse(br, &http.Request{Method: method})
	}, func() { c.Close() }
}

// Slow unauthenticated bodies cannot hold connections: the run hook reads a
// body within open_body_timeout_secs and at most max_open_bodies at once (more
// are 503 and closed), and the open routes that read no body answer without
// waiting for one. Health keeps answering throughout. Catches: no read
// deadline on the hook (150 slow bodies were all still open after 90 s), no
// cap (300 of them starved health under a 256-fd limit), and net/http reading
// an ignored body before it answers.
func TestSlowOpenBodiesAreBounded(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.OpenBodyTimeout = 3 * time.Second; c.MaxOpenBodies = 2 })
	run := protocol.HookPrefix + "/run"
	var held []func() (*http.Response, error)
	for range 2 {
		read, closeConn := slowBody(t, d.addr, "POST", run)
		defer closeConn()
		held = append(held, read)
	}
	// Let both reach the handler and take their slots.
	deadline := time.Now().Add(20 * time.Second)
	for len(d.srv.openSlots) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	read, closeConn := slowBody(t, d.addr, "POST", run)
	defer closeConn()
	resp, err := read()
	if err != nil || resp.StatusCode != 503 || !resp.Close {
		t.Fatalf("a run hook over max_open_bodies: %v %v", err, resp)
	}
	// Routes that read no body, and paths no route has, answer at once and
	// close.
	for _, c := range []struct {
		method, path string
		status       int
	}{{"POST", protocol.HookPrefix + "/ready", 200}, {"GET", "/v1/health", 200}, {"POST", "/no/such/route", 404}, {"POST", "/v1/health", 405}} {
		read, closeConn := slowBody(t, d.addr, c.method, c.path)
		defer closeConn()
		resp, err := read()
		if err != nil || resp.StatusCode != c.status || !resp.Close {
			t.Fatalf("%s %s with a slow body: %v %v", c.method, c.path, err, resp)
		}
	}
	if h, err := d.client.HealthWithResponse(context.Background()); err != nil || h.StatusCode() != 200 {
		t.Fatalf("health under slow bodies: %v", err)
	}
	// The held bodies run out of time: answered and closed, never kept.
	for _, read := range held {
		resp, err := read()
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != 400 || !resp.Close {
				t.Fatalf("a slow run hook body past the timeout: %d close=%v", resp.StatusCode, resp.Close)
			}
		}
		// An error here is the connection closing, which is also an end.
	}
	// The slots are free again: the real run hook still works.
	d2 := d
	payload := `{"agent_token":"` + testToken + `"}`
	r, err := d2.client.HookRunWithResponse(context.Background(), protocol.RunHookEnvelope{RunHookPayload: &payload})
	if err != nil || r.StatusCode() != 200 {
		t.Fatalf("run hook after the slow bodies: %v %d", err, r.StatusCode())
	}
}

// A reader that pauses for longer than a second (a busy machine, load 5 on
// two cores) and then keeps taking bytes loses nothing at the default limits.
// The client's receive buffer is small and the output larger than what the
// sockets can hold, so the pause really stops the daemon's reader while the
// pump waits on a full window. Catches: a stall rule that leaves a reader
// behind after a single 1 s gap (plain `microvm exec` of > 1 MiB failed 3
// runs in 40 with exit 9, "ranges of output were lost").
func TestAReaderThatPausesLosesNothing(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.StreamReplayBytes = 64 << 10 })
	const size = 8 << 20
	d.mustStart(protocol.StartRequest{ExecID: "pause", Command: []string{"sh", "-c", "read go; head -c 8388608 /dev/urandom"}, Stdin: true})
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 32<<10) })
		return errors.Join(err, serr)
	}}
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest("GET", d.base+"/v1/exec/pause/stream", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	d.client.ExecStdinWithResponse(context.Background(), "pause", protocol.StdinRequest{DataB64: strp(b64enc([]byte("go\n"))), Signal: strp("eof")}, auth(testToken))
	out, gaps, exit := collect(t, readSSE(t, &pausingReader{r: resp.Body, at: 256 << 10, pause: 3 * time.Second}), 0)
	if len(gaps) != 0 || len(out) != size || exit.Offset != size {
		t.Fatalf("a reader that paused for 3 s: %d bytes, gaps %v", len(out), gaps)
	}
}

// pausingReader sleeps for pause once, after at bytes.
type pausingReader struct {
	r        io.Reader
	at, read int
	pause    time.Duration
}

func (p *pausingReader) Read(b []byte) (int, error) {
	if p.read >= p.at && p.pause > 0 {
		time.Sleep(p.pause)
		p.pause = 0
	}
	n, err := p.r.Read(b)
	p.read += n
	return n, err
}

// A cwd no path can be (a NUL, a component over NAME_MAX) is the caller's
// 400, not a 500 spawn failure. Catches: letting the kernel's EINVAL or
// ENAMETOOLONG surface as spawn_failed.
func TestBadCwdShapeIs400(t *testing.T) {
	d := bootedDaemon(t, nil)
	for _, cwd := range []string{"/tmp/a\x00b", "/tmp/" + strings.Repeat("c", 256)} {
		resp := d.start(protocol.StartRequest{ExecID: "cwd", Command: []string{"true"}, Cwd: &cwd})
		if resp.StatusCode() != 400 || errorBody(t, resp.Body).Error != taxonomy.SlugMalformedRequest {
			t.Fatalf("cwd of %d bytes: %d %s", len(cwd), resp.StatusCode(), resp.Body)
		}
	}
}

// Headers past limits.max_header_bytes are refused by the HTTP server before
// any route runs, so an unauthenticated connection cannot make the daemon
// hold a megabyte of header. Catches: net/http's 1 MiB default left in place.
func TestHeadersAreCapped(t *testing.T) {
	d := bootedDaemon(t, nil)
	for _, c := range []struct {
		size   int
		status int
	}{{16 << 10, 200}, {protocol.DefaultMaxHeaderBytes + 8<<10, 431}} {
		conn, br := dialRaw(t, d.addr)
		fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", strings.Repeat("p", c.size))
		resp := readResponse(t, br, "GET")
		if resp.StatusCode != c.status {
			t.Fatalf("a %d-byte header: %d, want %d", c.size, resp.StatusCode, c.status)
		}
	}
}

// Catches: the header deadline lost (30 * time.Second made 30 / ..., which
// is zero: a client that sends half a request line holds its connection and
// goroutine forever) or the idle timeout dropped. Holding a half-sent
// request open for 30 s in a test would cost 30 s per run; the server's
// settings are read instead.
func TestServerBoundsWhatAConnectionMayHold(t *testing.T) {
	cfg := testConfig()
	cfg.MaxHeaderBytes = 12345
	srv, err := NewServer(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.httpServer()
	if hs.ReadHeaderTimeout != 30*time.Second || hs.IdleTimeout != 2*time.Minute || hs.MaxHeaderBytes != 12345 {
		t.Fatalf("header timeout %v, idle timeout %v, max header bytes %d", hs.ReadHeaderTimeout, hs.IdleTimeout, hs.MaxHeaderBytes)
	}
}
