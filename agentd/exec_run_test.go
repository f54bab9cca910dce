package agentd

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/internal/frames"
)

// runExec sends POST /v1/exec/run with the given Accept and returns the
// response; the caller reads and closes the body.
func (d *daemon) runExec(ctx context.Context, req protocol.StartRequest, accept string) *http.Response {
	d.t.Helper()
	resp, err := d.client.ExecRun(ctx, req, auth(testToken), func(_ context.Context, r *http.Request) error {
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		return nil
	})
	if err != nil {
		d.t.Fatalf("run: %v", err)
	}
	return resp
}

// frameStream is a whole frame body, decoded and checked the way the SSE
// helper collect checks events: output contiguous from start, each gap
// starting at the cursor, the exit frame last.
type frameStream struct {
	stdout, stderr []byte
	combined       []byte // both, in the shared offset space
	gaps           []protocol.GapEvent
	exit           *protocol.ExitEvent
	keepalives     int
}

func readFrames(t testing.TB, body io.Reader, start uint64) frameStream {
	t.Helper()
	var fs frameStream
	r := frames.NewReader(body, 64<<10)
	cursor := start
	for {
		f, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("frames: %v", err)
		}
		if fs.exit != nil {
			t.Fatalf("frame type %d after the exit frame", f.Type)
		}
		switch f.Type {
		case protocol.FrameKeepalive:
			fs.keepalives++
		case protocol.FrameStdout, protocol.FrameStderr:
			if f.Offset != cursor {
				t.Fatalf("output frame at offset %d, want %d", f.Offset, cursor)
			}
			if f.Type == protocol.FrameStdout {
				fs.stdout = append(fs.stdout, f.Payload...)
			} else {
				fs.stderr = append(fs.stderr, f.Payload...)
			}
			fs.combined = append(fs.combined, f.Payload...)
			cursor += uint64(len(f.Payload))
		case protocol.FrameGap:
			var g protocol.GapEvent
			if err := json.Unmarshal(f.Payload, &g); err != nil || g.From != cursor || f.Offset != g.From {
				t.Fatalf("gap frame at %d, payload %s (%v), cursor %d", f.Offset, f.Payload, err, cursor)
			}
			fs.gaps = append(fs.gaps, g)
			cursor = g.To
		case protocol.FrameExit:
			fs.exit = &protocol.ExitEvent{}
			if err := json.Unmarshal(f.Payload, fs.exit); err != nil || f.Offset != fs.exit.Offset {
				t.Fatalf("exit frame at %d, payload %s (%v)", f.Offset, f.Payload, err)
			}
			if fs.exit.Offset != cursor {
				t.Fatalf("exit offset %d, but the output ended at %d", fs.exit.Offset, cursor)
			}
		}
	}
	if fs.exit == nil {
		t.Fatal("frame body ended without an exit frame")
	}
	return fs
}

// Catches: the run route answering anything but the stream from 0 (output
// missing, stderr mixed into stdout), an exit event that is not last, and the
// exec left unacked after a complete run (or acked before its exit: the poll
// below would then see acked with no exit event read).
func TestRunRouteStreamsFromZeroAndReleasesAtExit(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	resp := d.runExec(context.Background(), shell("run-1", "printf out; printf err >&2; exit 3"), "")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("run: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var stdout, stderr []byte
	events := readSSE(t, resp.Body)
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
	_, gaps, exit := collect(t, events, 0)
	if string(stdout) != "out" || string(stderr) != "err" || len(gaps) != 0 || exit.ExitCode == nil || *exit.ExitCode != 3 || exit.Offset != 6 {
		t.Fatalf("run: stdout %q stderr %q gaps %v exit %+v", stdout, stderr, gaps, exit)
	}
	code, o := d.poll("run-1")
	if code != 200 || o.Phase != string(protocol.PhaseAcked) {
		t.Fatalf("after a complete run the exec is %d %s, want acked", code, o.Phase)
	}
	// Released as by ack: a second ack is already_acked.
	ack, _ := d.client.ExecAckWithResponse(context.Background(), "run-1", auth(testToken))
	if ack.StatusCode() != http.StatusConflict || !strings.Contains(string(ack.Body), "already_acked") {
		t.Fatalf("ack after run: %d %s", ack.StatusCode(), ack.Body)
	}
}

// Catches: a run retried with the same exec_id spawning a second child (the
// marker file would get a second line) and a retry failing instead of
// answering the released exec's stream (a gap for the released bytes, exit).
func TestRunRouteRetryNeverSpawnsTwice(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	marker := filepath.Join(t.TempDir(), "spawns")
	req := shell("run-twice", "echo spawned >> "+marker+"; printf hello")
	for i := range 2 {
		resp := d.runExec(context.Background(), req, protocol.FramesMediaType)
		fs := readFrames(t, resp.Body, 0)
		resp.Body.Close()
		switch i {
		case 0:
			if string(fs.stdout) != "hello" || len(fs.gaps) != 0 {
				t.Fatalf("first run: %q gaps %v", fs.stdout, fs.gaps)
			}
		case 1:
			if len(fs.stdout) != 0 || len(fs.gaps) != 1 || fs.gaps[0] != (protocol.GapEvent{From: 0, To: 5}) {
				t.Fatalf("retried run: %q gaps %v", fs.stdout, fs.gaps)
			}
		}
		if fs.exit.ExitCode == nil || *fs.exit.ExitCode != 0 {
			t.Fatalf("run %d: exit %+v", i, fs.exit)
		}
	}
	b, _ := os.ReadFile(marker)
	if string(b) != "spawned\n" {
		t.Fatalf("the command ran %d times: %q", strings.Count(string(b), "\n"), b)
	}
}

// Catches: releasing the exec when the run's connection is lost before the
// exit event (the caller would never see the output), and a lost run not
// being resumable through the stream and ack routes.
func TestRunRouteLostBeforeExitLeavesTheExecUnacked(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx, cancel := context.WithCancel(context.Background())
	req := shell("run-lost", "printf first; read -r _; printf second")
	req.Stdin = true
	resp := d.runExec(ctx, req, protocol.FramesMediaType)
	r := frames.NewReader(resp.Body, 4096)
	f, err := r.Next()
	if err != nil || f.Type != protocol.FrameStdout || string(f.Payload) != "first" {
		t.Fatalf("first frame: %v %d %q", err, f.Type, f.Payload)
	}
	cancel()
	resp.Body.Close()
	eof := "eof"
	if s, _ := d.client.ExecStdinWithResponse(context.Background(), "run-lost", protocol.StdinRequest{Signal: &eof}, auth(testToken)); s.StatusCode() != 200 {
		t.Fatalf("stdin eof: %d %s", s.StatusCode(), s.Body)
	}
	o := d.waitExited("run-lost")
	if o.Phase != string(protocol.PhaseExited) || o.Stdout == nil || *o.Stdout != "firstsecond" {
		t.Fatalf("after a lost run: phase %s stdout %v", o.Phase, o.Stdout)
	}
	out, gaps, exit := collect(t, d.stream("run-lost", u64(5)), 5)
	if string(out) != "second" || len(gaps) != 0 || exit.Offset != 11 {
		t.Fatalf("resumed stream: %q %v %+v", out, gaps, exit)
	}
	ack, _ := d.client.ExecAckWithResponse(context.Background(), "run-lost", auth(testToken))
	if ack.StatusCode() != 200 {
		t.Fatalf("ack: %d %s", ack.StatusCode(), ack.Body)
	}
}

// Catches: the run route skipping start's checks (an empty exec_id or an
// argv[0] that does not exist must be start's 400 and 500, not a stream).
func TestRunRouteRefusesAsStartDoes(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	resp := d.runExec(offContract(context.Background()), protocol.StartRequest{ExecID: "", Command: []string{"true"}}, "")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "malformed_request") {
		t.Fatalf("empty exec_id: %d %s", resp.StatusCode, b)
	}
	resp = d.runExec(context.Background(), protocol.StartRequest{ExecID: "nope", Command: []string{"/does/not/exist"}}, protocol.FramesMediaType)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(string(b), "spawn_failed") {
		t.Fatalf("missing argv[0]: %d %s", resp.StatusCode, b)
	}
}

// Catches: frames carrying anything but the raw bytes (base64, or a
// payload cut at the 48 KiB SSE chunk and mislabelled), offsets that do not
// continue across frames, resume (?offset=) ignored in frame mode, a gap
// frame missing when the resume point predates the replay window, and an
// Accept of q=0 still getting frames.
func TestStreamFramesCarryRawBytesWithSSEOffsets(t *testing.T) {
	d := startDaemon(t, func(c *Config) { c.StreamReplayBytes = 1 << 20 })
	d.bootstrap(nil)
	// 3 MiB of every byte value on stdout, a marker on stderr: over the
	// replay window, so a late read from 0 starts with a gap. The stdout and
	// stderr pumps promise no order between them, so the marker is written
	// only once the stream shows all of stdout recorded (the test then sends
	// stdin's end): it lands at offset 3 MiB, after the gap, every time.
	req := shell("fr", "head -c 3145728 /dev/urandom > /tmp/.fr-$$; cat /tmp/.fr-$$; rm /tmp/.fr-$$; read _; printf E >&2")
	req.Stdin = true
	d.mustStart(req)
	get := func(offset *uint64, accept string) *http.Response {
		resp, err := d.client.ExecStream(context.Background(), "fr", &protocol.ExecStreamParams{Offset: offset}, auth(testToken),
			func(_ context.Context, r *http.Request) error { r.Header.Set("Accept", accept); return nil })
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v", err)
		}
		return resp
	}
	waitRecorded(t, get(nil, protocol.FramesMediaType).Body, 3<<20)
	eof := "eof"
	if s, err := d.client.ExecStdinWithResponse(context.Background(), "fr", protocol.StdinRequest{Signal: &eof}, auth(testToken)); err != nil || s.StatusCode() != 200 {
		t.Fatalf("stdin eof: %v", err)
	}
	d.waitExited("fr")
	resp := get(nil, "text/event-stream, "+protocol.FramesMediaType)
	if ct := resp.Header.Get("Content-Type"); ct != protocol.FramesMediaType {
		t.Fatalf("content type %q", ct)
	}
	all := readFrames(t, resp.Body, 0)
	resp.Body.Close()
	if len(all.gaps) != 1 || all.gaps[0].From != 0 || all.exit.Offset != 3<<20+1 || string(all.stderr) != "E" {
		t.Fatalf("from 0: gaps %v exit %+v stderr %q", all.gaps, all.exit, all.stderr)
	}
	kept := all.gaps[0].To
	if uint64(len(all.stdout)) != 3<<20-kept {
		t.Fatalf("from 0: %d stdout bytes after a gap to %d", len(all.stdout), kept)
	}
	// The same bytes through SSE, and a frame resume in the middle.
	sse, _, _ := collect(t, d.stream("fr", &kept), kept)
	if !bytes.Equal(sse, all.combined) {
		t.Fatal("frames and SSE carry different bytes")
	}
	mid := kept + 12345
	resp = get(&mid, protocol.FramesMediaType)
	part := readFrames(t, resp.Body, mid)
	resp.Body.Close()
	if len(part.gaps) != 0 || !bytes.Equal(part.combined, all.combined[12345:]) {
		t.Fatalf("resumed at %d: %d bytes, gaps %v", mid, len(part.stdout), part.gaps)
	}
	resp = get(&mid, protocol.FramesMediaType+";q=0")
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("q=0 answered %q", ct)
	}
}

// waitRecorded reads a live frame stream until its output (gaps included)
// reaches want bytes, then closes it: the exec has published that much.
func waitRecorded(t *testing.T, body io.ReadCloser, want uint64) {
	t.Helper()
	defer body.Close()
	r := frames.NewReader(body, 64<<10)
	var cursor uint64
	for cursor < want {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("live frames ended at %d of %d: %v", cursor, want, err)
		}
		switch f.Type {
		case protocol.FrameStdout, protocol.FrameStderr:
			cursor = f.Offset + uint64(len(f.Payload))
		case protocol.FrameGap:
			var g protocol.GapEvent
			if err := json.Unmarshal(f.Payload, &g); err != nil {
				t.Fatalf("gap frame %s: %v", f.Payload, err)
			}
			cursor = g.To
		case protocol.FrameExit:
			t.Fatalf("exit frame at %d before %d bytes were recorded", cursor, want)
		}
	}
}

// Catches: a frame keepalive that is not an empty type-0 frame (the reader
// refuses it) and keepalives missing from a quiet frame stream.
func TestFrameKeepaliveOnAQuietStream(t *testing.T) {
	d := startDaemon(t, func(c *Config) { c.SSEKeepalive = 20 * time.Millisecond })
	d.bootstrap(nil)
	resp := d.runExec(context.Background(), shell("quiet", "sleep 0.2; printf done"), protocol.FramesMediaType)
	defer resp.Body.Close()
	fs := readFrames(t, resp.Body, 0)
	if fs.keepalives == 0 || string(fs.stdout) != "done" {
		t.Fatalf("keepalives %d, stdout %q", fs.keepalives, fs.stdout)
	}
}
