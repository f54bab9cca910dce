package agentd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// pattern is deterministic, position-dependent output, so a duplicated or
// skipped range cannot go unnoticed.
func pattern(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%07d\n", i)
	}
	return b.Bytes()[:n]
}

// printPattern writes pattern(n) to stdout and a line to stderr in the middle.
func printPattern(id string, n int) protocol.StartRequest {
	return shell(id, fmt.Sprintf("i=0; while [ $i -lt %d ]; do printf '%%07d\\n' $i; i=$((i+1)); done | head -c %d; echo mid >&2", (n+7)/8, n))
}

// Catches: a resume that restarts at 0 or at the wrong byte, offsets that are
// per-stream instead of shared, or an exit event that is not last.
//
// stdout and stderr are separate pipes, so where the one stderr line lands
// among the stdout chunks depends on which pipe the daemon read first; the
// test fixes the order the daemon published (the first full stream) and then
// requires every resume to reproduce exactly its tail.
func TestStreamResumeAtAnOffsetGetsExactlyTheRest(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.mustStart(printPattern("p", 10000))
	d.waitExited("p")
	events := d.stream("p", nil)
	full, gaps, exit := collect(t, events, 0)
	var stdout, stderr []byte
	for _, e := range events {
		if e.name == protocol.EventOutput {
			_, stream, b := e.output()
			if stream == "stderr" {
				stderr = append(stderr, b...)
			} else {
				stdout = append(stdout, b...)
			}
		}
	}
	total := uint64(10000 + len("mid\n"))
	if !bytes.Equal(stdout, pattern(10000)) || string(stderr) != "mid\n" || uint64(len(full)) != total ||
		len(gaps) != 0 || exit.Offset != total || *exit.ExitCode != 0 {
		t.Fatalf("full stream: %d bytes (want %d), stdout ok %v, stderr %q, gaps %v, exit %+v",
			len(full), total, bytes.Equal(stdout, pattern(10000)), stderr, gaps, exit)
	}
	for _, off := range []uint64{0, 1, 3333, 9999, 10000, 10004} {
		rest, gaps, exit := collect(t, d.stream("p", u64(off)), off)
		if !bytes.Equal(rest, full[off:]) || len(gaps) != 0 || exit.Offset != total {
			t.Fatalf("offset %d: got %d bytes, want the %d after it", off, len(rest), len(full)-int(off))
		}
	}
}

// Catches: replaying from the oldest retained byte without saying what was
// lost (a truncated log read as complete).
func TestLateReaderBeyondTheWindowGetsAGap(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.StreamReplayBytes = 1024 })
	d.mustStart(shell("late", "head -c 5000 /dev/zero | tr '\\0' z"))
	d.waitExited("late")
	events := d.stream("late", u64(100))
	if events[0].name != protocol.EventGap || events[0].data != `{"from":100,"to":3976}` {
		t.Fatalf("first event: %+v", events[0])
	}
	out, gaps, exit := collect(t, events, 100)
	if len(gaps) != 1 || len(out) != 1024 || strings.Trim(string(out), "z") != "" || exit.Offset != 5000 {
		t.Fatalf("after the gap: %d bytes, gaps %v, exit %+v", len(out), gaps, exit)
	}
	// Inside the window, no gap.
	out, gaps, _ = collect(t, d.stream("late", u64(4500)), 4500)
	if len(gaps) != 0 || len(out) != 500 {
		t.Fatalf("inside the window: %d bytes, gaps %v", len(out), gaps)
	}
}

// Catches: a pump that overwrites bytes an attached reader has not copied out
// (with a window far smaller than the output, a reader that keeps up would see
// gaps), i.e. removing the wait in outputLog.makeRoom.
func TestAReaderThatKeepsUpLosesNothingThroughASmallWindow(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.StreamReplayBytes = 4096; c.StreamStall = 10 * time.Second })
	d.mustStart(protocol.StartRequest{ExecID: "bp", Command: []string{"sh", "-c", "read go; head -c 4194304 /dev/urandom"}, Stdin: true})
	resp, err := d.client.ExecStream(context.Background(), "bp", nil, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	d.client.ExecStdinWithResponse(context.Background(), "bp", protocol.StdinRequest{DataB64: strp(b64enc([]byte("go\n"))), Signal: strp("eof")}, auth(testToken))
	out, gaps, exit := collect(t, readSSE(t, resp.Body), 0)
	if len(gaps) != 0 || len(out) != 4<<20 || exit.Offset != 4<<20 {
		t.Fatalf("a live reader through a 4 KiB window: %d bytes, gaps %v", len(out), gaps)
	}
}

// Catches: waiting on attached readers without a stall limit, so a client that
// stops reading wedges the command.
func TestAStalledReaderDoesNotHoldTheCommand(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.StreamReplayBytes = 4096; c.StreamStall = 100 * time.Millisecond })
	d.mustStart(protocol.StartRequest{ExecID: "st", Command: []string{"sh", "-c", "read go; head -c 67108864 /dev/zero"}, Stdin: true})
	c, br := dialRaw(t, d.addr)
	fmt.Fprintf(c, "GET /v1/exec/st/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
	if _, err := br.Peek(12); err != nil { // headers are out; now never read again
		t.Fatal(err)
	}
	d.client.ExecStdinWithResponse(context.Background(), "st", protocol.StdinRequest{DataB64: strp(b64enc([]byte("go\n")))}, auth(testToken))
	o := d.waitExited("st")
	if *o.ExitCode != 0 || !*o.Truncated {
		t.Fatalf("command with a stalled reader: %v", o.raw)
	}
	// The stalled reader, once it reads again, is told what it missed.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp := readResponse(t, br, "GET")
	_, gaps, exit := collect(t, readSSE(t, resp.Body), 0)
	if len(gaps) == 0 || exit.Offset != 64<<20 {
		t.Fatalf("stalled reader: gaps %v exit %+v", gaps, exit)
	}
}

// Catches: keepalives that are not sent during silence (a proxy reads a
// thinking harness as a dead connection), or a body that does not end after
// the exit event.
func TestKeepaliveCommentsDuringSilenceAndExitLast(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.SSEKeepalive = 30 * time.Millisecond })
	d.mustStart(shell("quiet", "sleep 0.4; echo done"))
	events := d.stream("quiet", nil)
	comments := 0
	for _, e := range events {
		if e.comment {
			comments++
		}
	}
	if comments == 0 {
		t.Fatal("no keepalive comment during 400 ms of silence at a 30 ms interval")
	}
	if last := events[len(events)-1]; last.name != protocol.EventExit {
		t.Fatalf("last event %+v, want exit", last)
	}
	out, _, _ := collect(t, events, 0)
	if string(out) != "done\n" {
		t.Fatalf("output %q", out)
	}
}

// Catches: fan-out to one reader only, or a dropped connection that cancels or
// disturbs the command.
func TestManyReadersAndDroppedConnections(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.mustStart(protocol.StartRequest{ExecID: "fan", Command: []string{"sh", "-c", "read go; head -c 300000 /dev/urandom; sleep 0.2; echo end"}, Stdin: true})
	// One reader that hangs up at once.
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := d.client.ExecStream(ctx, "fan", nil, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	var wg sync.WaitGroup
	results := make([][]byte, 4)
	for i := range results {
		resp, err := d.client.ExecStream(context.Background(), "fan", nil, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			results[i] = body
		}()
	}
	d.client.ExecStdinWithResponse(context.Background(), "fan", protocol.StdinRequest{DataB64: strp(b64enc([]byte("go\n"))), Signal: strp("eof")}, auth(testToken))
	wg.Wait()
	var first []byte
	for i, body := range results {
		out, gaps, exit := collect(t, readSSE(t, bytes.NewReader(body)), 0)
		if len(gaps) != 0 || len(out) != 300004 || *exit.ExitCode != 0 {
			t.Fatalf("reader %d: %d bytes, gaps %v", i, len(out), gaps)
		}
		if first == nil {
			first = out
		} else if !bytes.Equal(first, out) {
			t.Fatalf("reader %d saw different bytes", i)
		}
	}
	if o := d.waitExited("fan"); *o.ExitCode != 0 {
		t.Fatalf("the command was disturbed: %v", o.raw)
	}
}

// Catches: a stream route that answers an unknown exec with 200 or a bad
// offset with 404.
func TestStreamRefusals(t *testing.T) {
	d := bootedDaemon(t, nil)
	resp, err := d.client.ExecStream(context.Background(), "nope", nil, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown exec stream: %d", resp.StatusCode)
	}
	for _, q := range []string{"offset=-1", "offset=abc", "offset=1.5", "offset=18446744073709551616"} {
		req, _ := http.NewRequestWithContext(offContract(context.Background()), "GET", d.base+"/v1/exec/nope/stream?"+q, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := d.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || errorBody(t, body).Error != "malformed_request" {
			t.Fatalf("%s: %d %s", q, resp.StatusCode, body)
		}
	}
}

// Output followed by silence reaches an attached reader while the command
// is still running. The child prints one line and then blocks on stdin,
// which is only written once that line has arrived, under a 20 s client
// deadline. Catches: a stream that holds a part-filled buffer when it has
// caught up (waiting for more output, or for the exit, before writing), so
// the line sits in the daemon until the child writes again, here never.
func TestStreamDeliversOutputBeforeTheCommandGoesQuiet(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.mustStart(protocol.StartRequest{ExecID: "quiet", Command: []string{"sh", "-c", "echo first; read x; echo second"}, Stdin: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := d.client.ExecStream(ctx, "quiet", nil, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the first line never arrived while the command waited: %v", err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"output":"`+base64.StdEncoding.EncodeToString([]byte("first\n"))+`"`) {
			break
		}
	}
	d.client.ExecStdinWithResponse(ctx, "quiet", protocol.StdinRequest{DataB64: strp("eAo="), Signal: strp("eof")}, auth(testToken))
	rest := readSSE(t, br)
	if out, _, exit := collect(t, rest, 6); string(out) != "second\n" || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Fatalf("after stdin: %q %+v", out, exit)
	}
}
