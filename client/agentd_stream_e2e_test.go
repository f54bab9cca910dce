package client_test

// Streams against a real agentd: reconnection at the cursor, giving up
// with ErrStreamCut, and the gap a late attach surfaces.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a reconnect that resumes at offset 0 (the client's overlap trim
// would hide it in the bytes, so the proxy checks the request), one that
// resumes past the cursor (bytes missing), a cut body mistaken for the end of
// the output, and the stdout/stderr split lost across a reconnect.
func TestAgentdStreamReconnectsAtCursor(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	s := session(t, d.base, token)
	blob := randomBytes(t, 400<<10)
	file := filepath.Join(d.dir, "blob")
	if err := s.WriteFile(ctx, file, bytes.NewReader(blob), 0o600); err != nil {
		t.Fatal(err)
	}
	// 800 KiB of output comes in binary frames of up to 128 KiB (or SSE
	// events of up to 64 KiB); cut the first three connections after 150 KiB
	// each, so each completes at least one frame and breaks inside a later
	// one, and three cuts cannot carry it all. All of it is inside the 1 MiB
	// replay window.
	e, err := s.Start(ctx, []string{"cat " + file + "; cat " + file + " >&2"}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	px := newCutProxy(t, d.addr, 150<<10, 3)
	via := session(t, px.url(), token)
	st := via.Exec(e.ID()).Stream(ctx, 0)
	defer st.Close()
	var out, errOut bytes.Buffer
	var next uint64
	sawExit := false
	for range 100000 { // bounded: far more events than 400 KiB can make
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream failed after %d bytes: %v", next, err)
		}
		switch ev.Kind {
		case client.EventOutput:
			if ev.Offset != next {
				t.Fatalf("output at %d, expected it contiguous at %d", ev.Offset, next)
			}
			next += uint64(len(ev.Data))
			if ev.Stream == protocol.StreamStderr {
				errOut.Write(ev.Data)
			} else {
				out.Write(ev.Data)
			}
		case client.EventGap:
			t.Fatalf("gap %+v inside the replay window", ev.Gap)
		case client.EventExit:
			sawExit = true
			if ev.Exit.Offset != next || ev.Exit.ExitCode == nil || *ev.Exit.ExitCode != 0 {
				t.Fatalf("exit %+v after %d bytes", ev.Exit, next)
			}
		}
	}
	if !sawExit || !bytes.Equal(out.Bytes(), blob) || !bytes.Equal(errOut.Bytes(), blob) {
		t.Fatalf("exit %v; stdout %d bytes equal %v; stderr %d bytes equal %v", sawExit,
			out.Len(), bytes.Equal(out.Bytes(), blob), errOut.Len(), bytes.Equal(errOut.Bytes(), blob))
	}
	reqs := px.targets()
	if len(reqs) < 4 {
		t.Fatalf("expected 3 cuts and a 4th connection, saw requests %v", reqs)
	}
	if offsetOf(t, reqs[0]) != 0 {
		t.Fatalf("first attach at %s", reqs[0])
	}
	for i := 1; i < len(reqs); i++ {
		prev, cur := offsetOf(t, reqs[i-1]), offsetOf(t, reqs[i])
		if cur <= prev || cur > next {
			t.Fatalf("reconnect %d resumed at %d after %d (total %d): %v", i, cur, prev, next, reqs)
		}
	}
	if st.Cursor() != next {
		t.Fatalf("cursor %d, delivered %d", st.Cursor(), next)
	}
}

// Catches: a stream that keeps failing reported like any other transport
// failure (the CLI cannot tell "the daemon answered but the output never
// finished" from "the endpoint is wrong"), a give-up that touches the exec,
// and ErrStreamCut attached to a connection that never opened.
func TestAgentdStreamGivesUpWithErrStreamCut(t *testing.T) {
	t.Parallel()
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	s := session(t, d.base, token)
	// One 48 KiB output frame is ~64 KiB on the wire; every connection is cut
	// 300 bytes in, past the headers and inside that first frame, so no
	// attempt makes progress.
	e, err := s.Start(ctx, []string{"head -c 100000 /dev/zero"}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	// Each case below waits out the whole reattach backoff, so they run at
	// once, each with its own proxy (a connection count is one case's).
	concurrently(t, []namedTest{{"Stream", func(t *testing.T) {
		px := newCutProxy(t, d.addr, 300, -1)
		st := session(t, px.url(), token).Exec(e.ID()).Stream(ctx, 0)
		var serr error
		for range 1000 {
			if _, serr = st.Next(); serr != nil {
				break
			}
		}
		if !errors.Is(serr, client.ErrStreamCut) {
			t.Fatalf("exhausted reconnects: %v", serr)
		}
		var ce *client.Error
		if !errors.As(serr, &ce) || ce.Kind() != taxonomy.KindRetryable {
			t.Fatalf("exhausted reconnects must stay Retryable: %v", serr)
		}
		if w, _ := ce.WireKind(); w != taxonomy.WireTransport {
			t.Fatalf("wire kind %v", w)
		}
		if n := len(px.targets()); n < 2 {
			t.Fatalf("gave up after %d connection(s) without reconnecting", n)
		}
		if _, again := st.Next(); again != serr {
			t.Fatalf("a failed stream must keep returning its error: %v", again)
		}
		// The exec was left alone: its record is intact and ackable.
		r, err := s.Exec(e.ID()).Poll(ctx)
		for i := 0; err == nil && r.Running() && i < 1000; i++ {
			time.Sleep(10 * time.Millisecond)
			r, err = s.Exec(e.ID()).Poll(ctx)
		}
		if err != nil || !r.Success() || len(r.Stdout) != 100000 {
			t.Fatalf("exec after the stream gave up: phase %s exit %v stdout %d bytes, %v", r.Phase, r.ExitCode, len(r.Stdout), err)
		}
	}}, {"Process", func(t *testing.T) {
		// A Process over the same cut stream: both readers end with the error,
		// and Err says the output is a prefix. Catches: readers ended with a
		// clean EOF (a caller copying them would take a prefix for the output).
		px := newCutProxy(t, d.addr, 300, -1)
		p := session(t, px.url(), token).Exec(e.ID()).Attach(ctx, 0)
		_, _, oe, ee := readBoth(ctx, p)
		if !errors.Is(oe, client.ErrStreamCut) || !errors.Is(ee, client.ErrStreamCut) || !errors.Is(p.Err(), client.ErrStreamCut) {
			t.Fatalf("process readers %v / %v, Err %v", oe, ee, p.Err())
		}
		p.Close()
	}}, {"Unreachable", func(t *testing.T) {
		// A daemon that cannot be reached at all is a transport failure, not a
		// cut stream.
		dead := session(t, "http://"+freeAddr(t), token).Exec(e.ID()).Stream(ctx, 0)
		var derr error
		for range 1000 {
			if _, derr = dead.Next(); derr != nil {
				break
			}
		}
		if errors.Is(derr, client.ErrStreamCut) || !errors.Is(derr, client.WireKindError(taxonomy.WireTransport)) {
			t.Fatalf("unreachable daemon: %v", derr)
		}
	}}, {"UnreachableConnect", func(t *testing.T) {
		// Connect on a daemon that cannot be reached. Catches: a Connect whose
		// failure a later Next does not repeat (a caller would feed stdin and
		// then follow a stream that reconnects from scratch).
		dead := session(t, "http://"+freeAddr(t), token).Exec(e.ID()).Stream(ctx, 0)
		cerr := dead.Connect()
		if !errors.Is(cerr, client.WireKindError(taxonomy.WireTransport)) {
			t.Fatalf("Connect to an unreachable daemon: %v", cerr)
		}
		if _, nerr := dead.Next(); nerr != cerr {
			t.Fatalf("Next after a failed Connect: %v, want Connect's %v", nerr, cerr)
		}
	}}, {"UnreachableAttached", func(t *testing.T) {
		// Attached on a daemon that cannot be reached. Catches: an Attached
		// never closed when the stream cannot connect (a caller waiting on it
		// before feeding stdin would hang to its deadline), or closed before
		// Err says why.
		dp := session(t, "http://"+freeAddr(t), token).Exec(e.ID()).Attach(ctx, 0)
		defer dp.Close()
		select {
		case <-dp.Attached():
		case <-ctx.Done():
			t.Fatal("Attached never closed for an unreachable daemon")
		}
		if !errors.Is(dp.Err(), client.WireKindError(taxonomy.WireTransport)) {
			t.Fatalf("Err once Attached closed on a failed connection: %v", dp.Err())
		}
	}}})
}

// Catches: a late reader past the replay window told nothing (the output
// would read as whole), a gap whose range is dropped or not followed (the
// next reconnect would ask for lost bytes again), and output after the gap
// put at the wrong offset.
func TestAgentdLateAttachSurfacesGap(t *testing.T) {
	t.Parallel()
	d := startAgentd(t, "AGENTD_STREAM_BUFFER_BYTES=4096")
	d.bootstrap(t, token)
	ctx := testCtx(t)
	s := session(t, d.base, token)
	const total = 100000
	e, err := s.Start(ctx, []string{fmt.Sprintf("head -c %d /dev/zero | tr '\\000' x", total)}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Poll(ctx)
	for i := 0; err == nil && r.Running() && i < 2000; i++ {
		time.Sleep(5 * time.Millisecond)
		r, err = e.Poll(ctx)
	}
	if err != nil || r.Running() {
		t.Fatalf("exec never exited: %v", err)
	}

	st := e.Stream(ctx, 0)
	ev, err := st.Next()
	if err != nil || ev.Kind != client.EventGap || ev.Gap.From != 0 || ev.Gap.To == 0 || ev.Gap.To > total {
		t.Fatalf("first event of a late attach: %+v %v", ev, err)
	}
	if st.Cursor() != ev.Gap.To {
		t.Fatalf("cursor %d after gap to %d", st.Cursor(), ev.Gap.To)
	}
	st.Close()

	p := e.Attach(ctx, 0)
	out, _, oe, _ := readBoth(ctx, p)
	if oe != nil {
		t.Fatal(oe)
	}
	gaps := p.Gaps()
	var lost uint64
	for _, g := range gaps {
		lost += g.To - g.From
	}
	if len(gaps) == 0 || gaps[0].From != 0 || lost+uint64(len(out)) != total || strings.Trim(string(out), "x") != "" {
		t.Fatalf("delivered %d bytes, gaps %v", len(out), gaps)
	}
	rec, err := p.Wait(ctx)
	if err != nil || len(rec.Stdout) != total {
		t.Fatalf("the record keeps the whole output: %d bytes, %v", len(rec.Stdout), err)
	}
}
