package client

// Streams against the fake agent: reconnection at the cursor, gaps, holes
// and overlaps, keepalives and idle timeouts, refusals.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client/internal/ssetest"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

func collect(t *testing.T, st *Stream) (stdout, stderr string, gaps []protocol.GapEvent, exit *protocol.ExitEvent, err error) {
	t.Helper()
	var o, e bytes.Buffer
	for {
		ev, err := st.Next()
		if err == io.EOF {
			return o.String(), e.String(), gaps, exit, nil
		}
		if err != nil {
			return o.String(), e.String(), gaps, exit, err
		}
		switch ev.Kind {
		case EventOutput:
			if ev.Stream == protocol.StreamStdout {
				o.Write(ev.Data)
			} else {
				e.Write(ev.Data)
			}
		case EventGap:
			gaps = append(gaps, ev.Gap)
		case EventExit:
			x := ev.Exit
			exit = &x
		}
	}
}

// A server that drops the connection in the middle of a frame. The client
// must reattach at exactly the bytes it delivered and reassemble the output
// once. Catches: reattaching at 0 (duplicates), at the server's last offset
// rather than the delivered one, treating the cut as the end, or counting the
// half frame.
func TestStreamReconnectsAtCursorAfterCut(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.chunks = []chunk{{protocol.StreamStdout, "hello "}, {protocol.StreamStderr, "warn\n"}, {protocol.StreamStdout, "world\n"}}
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		if n != 0 {
			return false
		}
		frames, _ := f.framesFrom(offset)
		io.WriteString(w, frames[0]+frames[1])
		io.WriteString(w, frames[2][:20]) // half a frame
		flush(w)
		panic(http.ErrAbortHandler) // drop the connection
	}
	s := direct(t, srv.URL, f.token)
	out, errs, gaps, exit, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if err != nil {
		t.Fatal(err)
	}
	if out != "hello world\n" || errs != "warn\n" || len(gaps) != 0 || exit == nil {
		t.Fatalf("out %q err %q gaps %v exit %v", out, errs, gaps, exit)
	}
	if !slices.Equal(f.attaches, []uint64{0, 11}) {
		t.Fatalf("attach offsets %v, want [0 11]", f.attaches)
	}
}

// A body that ends cleanly without an exit event is a cut, not the end.
// Catches: treating EOF as completion (the stream would end with no exit).
func TestStreamCleanEOFWithoutExitReconnects(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.chunks = []chunk{{protocol.StreamStdout, "abc"}, {protocol.StreamStdout, "def"}}
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		if n == 0 {
			frames, _ := f.framesFrom(offset)
			io.WriteString(w, frames[0])
			return true
		}
		return false
	}
	s := direct(t, srv.URL, f.token)
	out, _, _, exit, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if err != nil || out != "abcdef" || exit == nil || !slices.Equal(f.attaches, []uint64{0, 3}) {
		t.Fatalf("out %q exit %v err %v attaches %v", out, exit, err, f.attaches)
	}
}

// Catches: swallowing a gap, or not advancing the cursor past it (a
// reconnect would be told about the same gap forever).
func TestStreamSurfacesGapAndFollowsIt(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		switch n {
		case 0:
			io.WriteString(w, ssetest.OutputFrame(0, protocol.StreamStdout, []byte("ab")))
			io.WriteString(w, ssetest.GapFrame(2, 100))
			io.WriteString(w, ssetest.OutputFrame(100, protocol.StreamStdout, []byte("cd")))
			return true // cut after the gap
		default:
			io.WriteString(w, ssetest.OutputFrame(offset, protocol.StreamStdout, []byte("ef")))
			io.WriteString(w, ssetest.ExitFrame(0, offset+2))
			return true
		}
	}
	s := direct(t, srv.URL, f.token)
	st := s.Exec("e1").Stream(context.Background(), 0)
	out, _, gaps, _, err := collect(t, st)
	if err != nil {
		t.Fatal(err)
	}
	if out != "abcdef" || !slices.Equal(gaps, []protocol.GapEvent{{From: 2, To: 100}}) {
		t.Fatalf("out %q gaps %v", out, gaps)
	}
	if !slices.Equal(f.attaches, []uint64{0, 102}) {
		t.Fatalf("attaches %v, want [0 102]", f.attaches)
	}
	if st.Cursor() != 104 {
		t.Errorf("cursor %d", st.Cursor())
	}
}

// Output that skips ahead without a gap event is surfaced as a gap, and an
// overlapping replay is trimmed. Catches: silently accepting a hole, or
// delivering replayed bytes twice.
func TestStreamHolesAndOverlaps(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		io.WriteString(w, ssetest.OutputFrame(0, protocol.StreamStdout, []byte("abc")))
		io.WriteString(w, ssetest.OutputFrame(1, protocol.StreamStdout, []byte("bcde"))) // overlap
		io.WriteString(w, ssetest.OutputFrame(9, protocol.StreamStdout, []byte("z")))    // hole 5..9
		io.WriteString(w, ssetest.ExitFrame(0, 10))
		return true
	}
	s := direct(t, srv.URL, f.token)
	out, _, gaps, _, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if err != nil || out != "abcdez" || !slices.Equal(gaps, []protocol.GapEvent{{From: 5, To: 9}}) {
		t.Fatalf("out %q gaps %v err %v", out, gaps, err)
	}
}

// A connection that goes silent (no bytes, not even keepalives) for longer
// than the idle timeout is dead: the client reattaches at its cursor.
// Catches: waiting forever on a silent connection, or a timer that is not
// re-armed by keepalives. The timeout is injected; nothing asserts on time.
func TestStreamIdleTimeoutReattaches(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.chunks = []chunk{{protocol.StreamStdout, "abc"}}
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		if n == 0 {
			frames, _ := f.framesFrom(offset)
			io.WriteString(w, frames[0])
			flush(w)
			<-r.Context().Done() // silent until the client gives up
			return true
		}
		return false
	}
	s := direct(t, srv.URL, f.token, WithIdleTimeout(50*time.Millisecond))
	out, _, _, exit, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if err != nil || out != "abc" || exit == nil {
		t.Fatalf("out %q exit %v err %v", out, exit, err)
	}
	if !slices.Equal(f.attaches, []uint64{0, 3}) {
		t.Fatalf("attaches %v", f.attaches)
	}
}

// Keepalive comments are activity. Catches: an idle timer that only counts
// events. The server sends comments every 10 ms for 1.5 s, longer than the
// 1 s timeout, and then the output; there must be exactly one attach. (With
// an 80 ms timeout a loaded machine's late 10 ms sleep alone ended the
// stream now and then.)
func TestStreamKeepalivesKeepConnectionAlive(t *testing.T) {
	t.Parallel()
	f, srv := newFakeAgent(t)
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		for range 150 {
			io.WriteString(w, ":\n\n")
			flush(w)
			time.Sleep(10 * time.Millisecond)
		}
		io.WriteString(w, ssetest.OutputFrame(0, protocol.StreamStdout, []byte("ok")))
		io.WriteString(w, ssetest.ExitFrame(0, 2))
		return true
	}
	s := direct(t, srv.URL, f.token, WithIdleTimeout(time.Second))
	out, _, _, _, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if err != nil || out != "ok" || len(f.attaches) != 1 {
		t.Fatalf("out %q err %v attaches %v", out, err, f.attaches)
	}
}

// A stream that keeps dying gives up with a retryable error instead of
// looping forever, and says it was the silence that ended it. Catches: an
// unbounded reconnect loop, and an idle give-up without ErrStreamCut and the
// idle cause in its chain.
//
// The idle timeout is 200 ms, not less: the headers must reach the client
// within it, or the attach itself reads as unanswered (a different give-up);
// at 10 ms a loaded machine did that now and then.
func TestStreamGivesUpAfterRepeatedSilence(t *testing.T) {
	t.Parallel()
	f, srv := newFakeAgent(t)
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		flush(w)
		<-r.Context().Done()
		return true
	}
	s := direct(t, srv.URL, f.token, WithIdleTimeout(200*time.Millisecond))
	s.maxReattach = 2
	_, _, _, _, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if KindOf(err) != taxonomy.KindRetryable || len(f.attaches) != 3 || !errors.Is(err, ErrStreamCut) || !errors.Is(err, errStreamIdle) {
		t.Fatalf("err %v after %d attaches", err, len(f.attaches))
	}
	// The idle cause names the timeout. Catches the stream's read error kept
	// in place of the idle body's cause (`c != nil` negated in Next).
	if !strings.Contains(err.Error(), "idle timeout (200ms)") {
		t.Fatalf("the give-up does not name the idle timeout: %v", err)
	}
}

// A stream whose bodies keep ending cleanly without an exit event gives up
// naming that end (io.EOF) as the last connection's cause. Catches the
// read error dropped when the body had no idle cause (`c != nil` negated:
// the last cause is then nil and the error says nothing of it).
func TestStreamGivesUpNamingTheLastEnd(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool { return true }
	s := direct(t, srv.URL, f.token)
	s.maxReattach = 1
	_, _, _, _, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if !errors.Is(err, ErrStreamCut) || !errors.Is(err, io.EOF) || len(f.attaches) != 2 {
		t.Fatalf("err %v after %d attaches", err, len(f.attaches))
	}
}

// Catches: skipping a chunk whose base64 is bad (silent loss) or reconnecting
// into the same bad bytes forever.
func TestStreamBadBase64Fails(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		io.WriteString(w, "event: output\ndata: {\"offset\":0,\"stream\":\"stdout\",\"output\":\"!!notbase64\"}\n\n")
		return true
	}
	s := direct(t, srv.URL, f.token)
	_, _, _, _, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if KindOf(err) != taxonomy.KindProtocol || !strings.Contains(err.Error(), "base64") || len(f.attaches) != 1 {
		t.Fatalf("err %v attaches %v", err, f.attaches)
	}
}

// Catches: failing on (or delivering) an event name this client does not know.
func TestStreamDropsUnknownEvents(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		io.WriteString(w, "event: progress\ndata: {\"pct\":50}\n\n")
		io.WriteString(w, "data: nameless\n\n")
		io.WriteString(w, "id: 7\nretry: 10\n\n")
		io.WriteString(w, ssetest.OutputFrame(0, protocol.StreamStdout, []byte("x")))
		io.WriteString(w, "event: output-v2\ndata: {}\n\n")
		io.WriteString(w, ssetest.ExitFrame(3, 1))
		return true
	}
	s := direct(t, srv.URL, f.token)
	out, _, _, exit, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if err != nil || out != "x" || exit == nil || *exit.ExitCode != 3 {
		t.Fatalf("out %q exit %v err %v", out, exit, err)
	}
}

// Catches: a 404 at attach (the exec was collected) being reconnected forever.
func TestStreamNotFoundIsFatal(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.statusOnce["stream"] = []int{404}
	s := direct(t, srv.URL, f.token)
	_, _, _, _, err := collect(t, s.Exec("gone").Stream(context.Background(), 0))
	if !errors.Is(err, WireKindError(taxonomy.WireNotFound)) || len(f.attaches) != 1 {
		t.Fatalf("err %v attaches %v", err, f.attaches)
	}
}
