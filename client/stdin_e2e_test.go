package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// copyChunk is the data of one CopyStdin request: 256 KiB, under the
// daemon's 1 MiB max_stdin_write_bytes.
const copyChunk = 256 << 10

// stdinRequests is how many stdin requests the proxy carried for id.
func stdinRequests(p *cutProxy, id string) int {
	n := 0
	for _, tgt := range p.targets() {
		if tgt == "/v1/exec/"+id+"/stdin" {
			n++
		}
	}
	return n
}

// shortReader yields at most 1000 bytes a read, as a pipe may: chunks must
// be filled across reads, not sent per read.
type shortReader struct{ r io.Reader }

func (s shortReader) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), 1000)]) }

// TestAgentdCopyStdin feeds wc -c through a counting proxy in front of the
// real daemon. Catches: the EOF sent as a request of its own after the last
// chunk (one request too many, for an empty input two), a close sent before
// the last chunk or the last chunk dropped (wc counts short), a chunk sent
// per read rather than filled (hundreds of requests), a chunk over the
// daemon's cap (413), closeAtEOF ignored either way (wc never ends, or the
// exec is no longer running), a read error reported as the daemon's, and
// written not counting what the daemon took.
func TestAgentdCopyStdin(t *testing.T) {
	t.Parallel()
	d := startAgentd(t)
	d.bootstrap(t, token)
	px := newCutProxy(t, d.addr, 0, 0) // cuts nothing; counts requests
	s := session(t, px.url(), token)

	// count runs wc -c fed by CopyStdin and returns what wc counted.
	count := func(t *testing.T, ctx context.Context, id string, in io.Reader, wantWritten int64) string {
		t.Helper()
		ex, err := s.Start(ctx, []string{"wc", "-c"}, client.StartOptions{ExecID: id, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		p := ex.Attach(ctx, 0)
		defer p.Close()
		w, err := ex.CopyStdin(ctx, in, true)
		if err != nil || w != wantWritten {
			t.Fatalf("CopyStdin: %d bytes, %v; want %d", w, err, wantWritten)
		}
		out, _, _, _ := readBoth(ctx, p)
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}

	for _, tc := range []struct {
		name string
		n    int
		reqs int
	}{
		{"empty: the close alone", 0, 1},
		{"short", 6, 1},
		{"one byte under a chunk", copyChunk - 1, 1},
		{"exactly one chunk", copyChunk, 1},
		{"one byte over a chunk", copyChunk + 1, 2},
		{"exactly three chunks", 3 * copyChunk, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			id := "copy-" + strconv.Itoa(tc.n)
			got := count(t, ctx, id, shortReader{bytes.NewReader(bytes.Repeat([]byte("x"), tc.n))}, int64(tc.n))
			if got != strconv.Itoa(tc.n) {
				t.Fatalf("wc counted %s bytes, want %d", got, tc.n)
			}
			if n := stdinRequests(px, id); n != tc.reqs {
				t.Fatalf("%d stdin requests for %d bytes, want %d (the last chunk carries the EOF)", n, tc.n, tc.reqs)
			}
		})
	}

	t.Run("without closeAtEOF stdin stays open", func(t *testing.T) {
		ctx := testCtx(t)
		ex, err := s.Start(ctx, []string{"cat"}, client.StartOptions{ExecID: "copy-open", Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		if w, err := ex.CopyStdin(ctx, strings.NewReader("abc"), false); err != nil || w != 3 {
			t.Fatalf("%d %v", w, err)
		}
		if r, err := ex.Poll(ctx); err != nil || !r.Running() {
			t.Fatalf("stdin was closed without closeAtEOF: %+v %v", r, err)
		}
		if w, err := ex.CopyStdin(ctx, strings.NewReader(""), true); err != nil || w != 0 {
			t.Fatalf("the close: %d %v", w, err)
		}
		p := ex.Attach(ctx, 0)
		out, _, _, _ := readBoth(ctx, p)
		if _, err := p.Wait(ctx); err != nil || string(out) != "abc" {
			t.Fatalf("%q %v", out, err)
		}
		if n := stdinRequests(px, "copy-open"); n != 2 {
			t.Fatalf("%d stdin requests, want 2", n)
		}
	})

	t.Run("a read failure is the caller's, after what was written", func(t *testing.T) {
		ctx := testCtx(t)
		ex, err := s.Start(ctx, []string{"cat"}, client.StartOptions{ExecID: "copy-readerr", Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		defer ex.Kill(context.Background())
		boom := errors.New("boom")
		in := io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("y"), 2*copyChunk)), iotest.ErrReader(boom))
		w, err := ex.CopyStdin(ctx, in, true)
		if client.KindOf(err) != taxonomy.KindInvalidArg || !errors.Is(err, boom) {
			t.Fatalf("got %v (kind %v), want InvalidArg wrapping the read error", err, client.KindOf(err))
		}
		// The first chunk went (its successor was read whole); the second
		// waited for the read that failed.
		if w != copyChunk {
			t.Fatalf("written %d, want %d", w, copyChunk)
		}
		if r, err := ex.Poll(ctx); err != nil || !r.Running() {
			t.Fatalf("a failed copy closed stdin: %+v %v", r, err)
		}
	})

	// Catches: a copy that must finish before the output is read, and one
	// started before the output stream is connected (Attach connects in the
	// background). 4 MiB through cat is four times the daemon's replay
	// window, so output not read while stdin is still being fed is lost (a
	// gap) or the copy stalls. The proxy holds every stream request 300 ms,
	// so a copy that does not wait for Attached runs a whole window ahead of
	// the stream before the daemon knows of a reader to hold cat back for.
	t.Run("concurrently with the output", func(t *testing.T) {
		ctx := testCtx(t)
		slow := newCutProxy(t, d.addr, 0, 0)
		slow.streamDelay.Store(int64(300 * time.Millisecond))
		s := session(t, slow.url(), token)
		in := randomBytes(t, 4<<20)
		ex, err := s.Start(ctx, []string{"cat"}, client.StartOptions{ExecID: "copy-cat", Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		p := ex.Attach(ctx, 0)
		defer p.Close()
		select {
		case <-p.Attached():
		case <-ctx.Done():
			t.Fatal("the stream never connected")
		}
		if err := p.Err(); err != nil {
			t.Fatalf("the stream failed to connect: %v", err)
		}
		var wg sync.WaitGroup
		var w int64
		var cerr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w, cerr = ex.CopyStdin(ctx, bytes.NewReader(in), true); cerr != nil {
				_ = p.Close() // cat never sees EOF: end the read now, not at the test's deadline
			}
		}()
		out, _, _, _ := readBoth(ctx, p)
		wg.Wait()
		if cerr != nil || w != int64(len(in)) {
			t.Fatalf("CopyStdin: %d %v", w, cerr)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if gaps := p.Gaps(); len(gaps) > 0 || !bytes.Equal(out, in) {
			t.Fatalf("%d of %d bytes back, gaps %v", len(out), len(in), gaps)
		}
		if n := stdinRequests(slow, "copy-cat"); n != len(in)/copyChunk {
			t.Fatalf("%d stdin requests, want %d", n, len(in)/copyChunk)
		}
	})
}
