package client_test

// Regression tests for the session-plane review, each against a real agentd
// (startAgentd) over loopback.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: Process.Close cancelling the stream and then waiting for the
// demultiplexer while it is blocked in a pipe Write that nobody reads (a
// pipe write ignores the context), i.e. Close that does not close the pipes
// before <-done. With that edit Close never returns and the test fails on
// its context deadline.
func TestAgentdProcessCloseWithUnreadPipe(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	s := session(t, d.base, token)
	for _, tc := range []struct {
		name    string
		readOne bool
	}{
		// Never read at all: demux blocks on its first output event (or, if
		// Close wins the race, never writes; either way Close must return).
		{"NeverRead", false},
		// One byte read proves demux is inside a Write to the stdout pipe: a
		// pipe write blocks until its whole chunk has been read, so this
		// case reaches the blocked state deterministically.
		{"OneByteRead", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			p, err := s.Spawn(ctx, []string{"head", "-c", "2000000", "/dev/zero"}, client.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = p.Exec().Kill(context.Background()) })
			if tc.readOne {
				var b [1]byte
				if _, err := io.ReadFull(p.Stdout(), b[:]); err != nil {
					t.Fatal(err)
				}
			}
			closed := make(chan struct{})
			go func() { _ = p.Close(); close(closed) }()
			select {
			case <-closed:
			case <-ctx.Done():
				t.Fatalf("Process.Close never returned with an unread stdout: %v", ctx.Err())
			}
			// The readers end (they do not block) with the Interrupted error
			// Close caused, not a clean EOF a caller could take for the end.
			for name, r := range map[string]io.Reader{"stdout": p.Stdout(), "stderr": p.Stderr()} {
				_, err := io.ReadAll(r)
				if client.KindOf(err) != taxonomy.KindInterrupted || !errors.Is(err, context.Canceled) {
					t.Fatalf("%s after Close: %v, want an Interrupted error wrapping context.Canceled", name, err)
				}
			}
		})
	}
}

// requireCtxKind asserts err is the kind a cancelled (Interrupted, no wire
// kind) or expired (Timeout, wire kind ExecTimeout) context maps to.
func requireCtxKind(t *testing.T, what string, err error, deadline bool) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s: %v, want a *client.Error", what, err)
	}
	w, hasWire := ce.WireKind()
	if deadline {
		if ce.Kind() != taxonomy.KindTimeout || w != taxonomy.WireExecTimeout || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s past its deadline: kind %v wire %v (%v); want Timeout/ExecTimeout wrapping DeadlineExceeded", what, ce.Kind(), w, err)
		}
		return
	}
	if ce.Kind() != taxonomy.KindInterrupted || hasWire || !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s cancelled: kind %v wire %v/%v (%v); want Interrupted with no wire kind wrapping Canceled", what, ce.Kind(), w, hasWire, err)
	}
}

// requireStillRunning asserts the exec was left alone, then kills it.
func requireStillRunning(t *testing.T, ctx context.Context, s *client.Session, id string) {
	t.Helper()
	r, err := s.Exec(id).Poll(ctx)
	if err != nil || !r.Running() {
		t.Fatalf("exec %s after the call ended: phase %s, %v; want it left running", id, r.Phase, err)
	}
	if _, err := s.Exec(id).Kill(ctx); err != nil {
		t.Fatal(err)
	}
}

// Catches: every ctx.Err() reported as the Timeout kind (wire ExecTimeout),
// so a user's Ctrl-C reads as "the deadline passed" and exits with the
// timeout code; and the reverse edit, a deadline reported as Interrupted.
// Each site that turns ctx.Err() into an error is reached: send (Poll),
// the SSE stream (Stream.Next), the poll loop (Process.Wait) and Run, whose
// exec must be left running either way.
func TestAgentdCancelIsInterruptedDeadlineIsTimeout(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	s := session(t, d.base, token)

	t.Run("RunCancelled", func(t *testing.T) {
		ctx := testCtx(t)
		// Started beforehand with the id Run will use (a start is
		// idempotent per id), so the exec exists whenever the cancel lands.
		id := "run-cancelled"
		o := client.StartOptions{ExecID: id}
		if _, err := s.Start(ctx, []string{"sleep", "30"}, o); err != nil {
			t.Fatal(err)
		}
		px := newCutProxy(t, d.addr, 0, 0) // records, never cuts
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			// Cancel once Run is following the stream (bounded by rctx):
			// the stream route's, or the run route's answer.
			for rctx.Err() == nil {
				for _, r := range px.targets() {
					if strings.Contains(r, "/stream") || strings.Contains(r, "/v1/exec/run") {
						cancel()
						return
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		_, err := session(t, px.url(), token).Run(rctx, []string{"sleep", "30"}, client.RunOptions{StartOptions: o})
		if ctx.Err() != nil {
			t.Fatalf("the test's own deadline passed: %v", err)
		}
		requireCtxKind(t, "Run", err, false)
		if !strings.Contains(err.Error(), id) {
			t.Fatalf("the error must name the exec id to reattach: %v", err)
		}
		requireStillRunning(t, ctx, s, id)
	})

	t.Run("RunDeadline", func(t *testing.T) {
		ctx := testCtx(t)
		id := "run-deadline"
		o := client.StartOptions{ExecID: id}
		if _, err := s.Start(ctx, []string{"sleep", "30"}, o); err != nil {
			t.Fatal(err)
		}
		_, err := s.Run(ctx, []string{"sleep", "30"}, client.RunOptions{StartOptions: o, ClientTimeout: 200 * time.Millisecond})
		requireCtxKind(t, "Run", err, true)
		requireStillRunning(t, ctx, s, id)
	})

	for _, deadline := range []bool{false, true} {
		name := "Cancelled"
		if deadline {
			name = "Expired"
		}
		t.Run("Sites"+name, func(t *testing.T) {
			ctx := testCtx(t)
			e, err := s.Start(ctx, []string{"sleep", "30"}, client.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p := e.Attach(ctx, 0)
			defer p.Close()
			var dead context.Context
			var cancel context.CancelFunc
			if deadline {
				dead, cancel = context.WithDeadline(ctx, time.Now().Add(-time.Second))
			} else {
				dead, cancel = context.WithCancel(ctx)
			}
			cancel()
			_, err = e.Poll(dead)
			requireCtxKind(t, "Poll", err, deadline)
			_, err = e.Stream(dead, 0).Next()
			requireCtxKind(t, "Stream.Next", err, deadline)
			_, err = p.Wait(dead)
			requireCtxKind(t, "Process.Wait", err, deadline)
			requireStillRunning(t, ctx, s, e.ID())
		})
	}
}

// Catches: Run keeping every streamed byte however much the child writes
// (its buffers grew without limit) and returning them although the record
// was truncated, so Result.Stdout ran past the cap Result.Truncated names;
// and, at the client's own cap, a cap off by one or below the daemon's.
func TestAgentdRunOutputIsCapped(t *testing.T) {
	t.Parallel()
	t.Run("SmallCapDaemon", func(t *testing.T) {
		const limit = 4096
		d := startAgentd(t, fmt.Sprintf("AGENTD_MAX_OUTPUT_BYTES=%d", limit))
		d.bootstrap(t, token)
		s := session(t, d.base, token)
		ctx := testCtx(t)
		// The record releases its output at the ack Run sends, so read it
		// first: start the exec under the id Run will use (a start is
		// idempotent per id), wait for it to exit, then Run it, which
		// streams all of it (inside the replay window) from offset 0.
		o := client.StartOptions{ExecID: "capped-run", Shell: true}
		cmd := []string{`head -c 50000 /dev/zero | tr '\000' x; head -c 9000 /dev/zero | tr '\000' y >&2`}
		e, err := s.Start(ctx, cmd, o)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := e.Poll(ctx)
		for err == nil && rec.Running() && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			rec, err = e.Poll(ctx)
		}
		if err != nil || rec.Running() || !rec.Truncated || len(rec.Stdout) != limit {
			t.Fatalf("record: phase %s truncated %v stdout %d bytes, %v", rec.Phase, rec.Truncated, len(rec.Stdout), err)
		}
		r, err := s.Run(ctx, cmd, client.RunOptions{StartOptions: o})
		if err != nil || !r.Success() {
			t.Fatalf("run: %+v %v", r, err)
		}
		if !r.Truncated {
			t.Fatal("Run lost the record's Truncated")
		}
		if len(r.Stdout) > limit || len(r.Stderr) > limit {
			t.Fatalf("Run returned %d/%d bytes past a %d-byte cap", len(r.Stdout), len(r.Stderr), limit)
		}
		if r.Stdout != rec.Stdout || r.Stderr != rec.Stderr || r.Stdout != strings.Repeat("x", limit) || r.Stderr != strings.Repeat("y", limit) {
			t.Fatalf("Run stdout %d bytes / stderr %d bytes differ from the record's %d / %d", len(r.Stdout), len(r.Stderr), len(rec.Stdout), len(rec.Stderr))
		}
	})

	t.Run("DefaultCap", func(t *testing.T) {
		d := startAgentd(t)
		d.bootstrap(t, token)
		s := session(t, d.base, token)
		ctx := testCtx(t)
		// Bytes that are not UTF-8, so exact streamed bytes and the record's
		// U+FFFD text differ and the test can tell which one Run returned.
		blob := randomBytes(t, protocol.DefaultMaxOutputBytes)
		file := filepath.Join(d.dir, "cap-blob")
		if err := s.WriteFile(ctx, file, strings.NewReader(string(blob)), 0o600); err != nil {
			t.Fatal(err)
		}
		// Exactly the cap: every byte fits, so Run returns them exactly.
		r, err := s.Run(ctx, []string{"cat", file}, client.RunOptions{})
		if err != nil || r.Truncated || r.Stdout != string(blob) {
			t.Fatalf("output of exactly the cap: truncated %v, %d bytes, exact %v, %v", r.Truncated, len(r.Stdout), r.Stdout == string(blob), err)
		}
		// One byte past it: Run stops buffering and returns the record's
		// head of the output (the record keeps exactly the cap).
		r, err = s.Run(ctx, []string{fmt.Sprintf(`head -c %d /dev/zero | tr '\000' x; printf z`, protocol.DefaultMaxOutputBytes)},
			client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Truncated || len(r.Stdout) != protocol.DefaultMaxOutputBytes || r.Stdout != strings.Repeat("x", protocol.DefaultMaxOutputBytes) {
			t.Fatalf("output one past the cap: truncated %v, %d bytes", r.Truncated, len(r.Stdout))
		}
	})
}

// refusingProxy stands in for the platform's endpoint proxy in front of
// agentd: it answers 403 to a request whose X-aws-proxy-auth accept refuses
// (without forwarding it) and forwards the rest.
type refusingProxy struct {
	url                string
	refused, forwarded atomic.Int64
	lastForwarded      atomic.Value // string: the last forwarded request's path
}

func newRefusingProxy(t *testing.T, target string, accept func(token string) bool) *refusingProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &refusingProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !accept(r.Header.Get(taxonomy.ProxyAuthHeader)) {
			p.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"message":"Forbidden"}`)
			return
		}
		p.forwarded.Add(1)
		p.lastForwarded.Store(r.URL.Path)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// countingMinter mints tok-1, tok-2, ...
func countingMinter(n *atomic.Int64) client.TokenMinter {
	return client.TokenMinterFunc(func(context.Context, client.MintRequest) (client.ProxyToken, error) {
		return client.NewProxyToken(map[string]string{taxonomy.ProxyAuthHeader: fmt.Sprintf("tok-%d", n.Add(1))}), nil
	})
}

// Release acks without taking the output back: the record is acked after
// it, a second Release or Ack is the documented conflict, and an exec still
// running is refused as Ack refuses it. With 8 MiB of NUL output (48 MiB of
// JSON in the answer) it still returns and the session stays usable.
// Catches: a Release that does not ack (the poll still says exited), or one
// that swallows the daemon's 409.
func TestReleaseAcksWithoutTheOutput(t *testing.T) {
	t.Parallel()
	const token = "release-token"
	d := startAgentd(t)
	d.bootstrap(t, token)
	s := session(t, d.base, token)
	ctx := testCtx(t)
	e, err := s.Start(ctx, []string{"head", "-c", "8388608", "/dev/zero"}, client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := e.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Running() {
			break
		}
	}
	if err := e.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if r, err := e.Poll(ctx); err != nil || r.Phase != protocol.PhaseAcked {
		t.Fatalf("after release the record is %+v, %v; want acked", r, err)
	}
	if err := e.Release(ctx); !errors.Is(err, client.WireKindError(taxonomy.WireConflict)) {
		t.Fatalf("a second release: %v, want the already_acked conflict", err)
	}
	running, err := s.Start(ctx, []string{"sleep", "30"}, client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer running.Kill(ctx)
	if err := running.Release(ctx); !errors.Is(err, client.WireKindError(taxonomy.WireConflict)) {
		t.Fatalf("releasing a running exec: %v, want the still_running conflict", err)
	}
}

// Process.Wait called while the child still runs polls until the record
// says exited, then releases it. Catches waitUntilExited's `err != nil`
// negated: the first poll's running record would be returned as the
// outcome, and its release refused as still_running.
func TestProcessWaitPollsUntilExited(t *testing.T) {
	t.Parallel()
	d := startAgentd(t)
	d.bootstrap(t, token)
	s := session(t, d.base, token)
	ctx := testCtx(t)
	e, err := s.Start(ctx, []string{"sleep 1; echo done"}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	p := e.Attach(ctx, 0)
	defer p.Close()
	read := make(chan string, 1)
	go func() { out, _, _, _ := readBoth(ctx, p); read <- string(out) }()
	r, err := p.Wait(ctx)
	if err != nil || !r.Success() || r.Phase != protocol.PhaseAcked {
		t.Fatalf("wait on a running exec: %+v, %v", r, err)
	}
	if out := <-read; out != "done\n" {
		t.Fatalf("stdout %q", out)
	}
}
