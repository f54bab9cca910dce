package client_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
)

// wiretap is a reverse proxy in front of a real agentd recording each
// exchange (method, path, the answer's content type). With reference set it
// plays a daemon without issue 35's additions: POST /v1/exec/run and
// GET /v1/capabilities are 404, /v1/schema lists neither the route nor frames, and the Accept header is
// cut to SSE, as a daemon that ignores it would answer.
type wiretap struct {
	url       string
	reference bool
	// schemaLies keeps the daemon's own document (listing the run route)
	// while the route itself is 404, as behind something that blocks it.
	schemaLies bool
	mu         sync.Mutex
	exchanges  []string
}

func newWiretap(t *testing.T, target string, reference bool, schemaLies ...bool) *wiretap {
	u, _ := url.Parse(target)
	w := &wiretap{reference: reference, schemaLies: len(schemaLies) > 0 && schemaLies[0]}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		// Recorded before the answer's headers leave, so a client that
		// has its answer always finds the exchange recorded.
		rec := &recorder{ResponseWriter: rw, record: func(ct string) {
			w.mu.Lock()
			w.exchanges = append(w.exchanges, r.Method+" "+r.URL.Path+" "+ct)
			w.mu.Unlock()
		}}
		if w.reference {
			switch {
			case r.URL.Path == "/v1/exec/run":
				http.NotFound(rec, r)
				return
			case r.URL.Path == "/v1/capabilities" && !w.schemaLies:
				http.NotFound(rec, r) // the reference has no such route
				return
			case r.URL.Path == "/v1/schema" && !w.schemaLies:
				w.referenceSchema(t, rec, target)
				return
			}
			r.Header.Set("Accept", "text/event-stream")
		}
		// Full duplex, as the emulator's endpoint proxy: agentd's run route
		// answers before the transport's last read of the request body,
		// and the server would otherwise close that body under it and cut
		// the answer (issue 51; emulator
		// TestEndpointProxyAnswerSurvivesTheGuestAnsweringBeforeTheBodyIsDone).
		_ = http.NewResponseController(rw).EnableFullDuplex()
		rp.ServeHTTP(rec, r)
	}))
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

type recorder struct {
	http.ResponseWriter
	record func(contentType string)
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.wrote = true
		r.record(r.Header().Get("Content-Type"))
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() { r.ResponseWriter.(http.Flusher).Flush() }

// referenceSchema is the daemon's own document without the run route and
// without frames.
func (w *wiretap) referenceSchema(t *testing.T, rw http.ResponseWriter, target string) {
	resp, err := http.Get(target + "/v1/schema")
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Error(err)
		return
	}
	delete(doc, "frames")
	var kept []any
	for _, r := range doc["routes"].([]any) {
		if r.(map[string]any)["path"] != "/v1/exec/run" {
			kept = append(kept, r)
		}
	}
	doc["routes"] = kept
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(doc)
}

func (w *wiretap) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.exchanges
	w.exchanges = nil
	return out
}

// Catches: Run not using the run route against a daemon that offers it
// (more than one exchange per exec), discovery repeated per exec, the
// outcome or the exact bytes (NUL, invalid UTF-8, stderr apart) lost on the
// one-exchange path, and Run acking an exec the run route already released.
func TestRunTakesOneExchangeWhenTheDaemonOffersTheRoute(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	tap := newWiretap(t, d.base, false)
	s := session(t, tap.url, token)
	for i := range 2 {
		r, err := s.Run(ctx, []string{`printf 'a\000b\377'; printf e >&2; exit 3`}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
		if err != nil {
			t.Fatal(err)
		}
		if r.ExitStatus != 3 || r.Stdout != "a\x00b\xff" || r.Stderr != "e" || r.Phase != protocol.PhaseAcked || r.Truncated {
			t.Fatalf("run %d: %+v", i, r)
		}
		got := tap.take()
		want := []string{"POST /v1/exec/run " + protocol.FramesMediaType}
		if i == 0 {
			// The capabilities, not the 124 KB document.
			want = append([]string{"GET /v1/capabilities application/json"}, want...)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("run %d exchanges %q, want %q", i, got, want)
		}
		// Released by the route: the record says acked.
		if p, err := session(t, d.base, token).Exec(r.ExecID).Poll(ctx); err != nil || p.Phase != protocol.PhaseAcked {
			t.Fatalf("after run %d: %+v %v", i, p, err)
		}
	}
}

// Catches: a client that needs the run route or frames (a reference daemon
// would fail every Run), discovery that does not fall back on a document
// without them, and the fallback giving a different result.
func TestRunFallsBackAgainstADaemonWithoutTheRoutes(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	tap := newWiretap(t, d.base, true)
	s := session(t, tap.url, token)
	r, err := s.Run(ctx, []string{`printf 'a\000b\377'; printf e >&2; exit 3`}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitStatus != 3 || r.Stdout != "a\x00b\xff" || r.Stderr != "e" || r.Phase != protocol.PhaseAcked {
		t.Fatalf("fallback run: %+v", r)
	}
	got := strings.Join(tap.take(), "|")
	for _, want := range []string{"GET /v1/capabilities text/plain", "GET /v1/schema", "POST /v1/exec/start", "/stream text/event-stream", "POST /v1/exec/" + r.ExecID + "/ack"} {
		if !strings.Contains(got, want) {
			t.Fatalf("fallback exchanges %s lack %q", got, want)
		}
	}
	if strings.Contains(got, "/v1/exec/run") || strings.Contains(got, protocol.FramesMediaType) {
		t.Fatalf("fallback used the additions: %s", got)
	}
	// StartStream falls back the same way: Start, then a stream to ack.
	e, st, err := s.StartStream(ctx, []string{"printf hi"}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.Data...)
	}
	if string(out) != "hi" || st.Released() {
		t.Fatalf("fallback StartStream: %q released %v", out, st.Released())
	}
	if err := e.Release(ctx); err != nil {
		t.Fatalf("the fallback exec must still be acked: %v", err)
	}
}

// Catches: frames not asked for on the stream route (the body would be
// SSE and base64), frames read wrong (bytes differ), and a large output
// on the run route losing bytes or its stdout/stderr split.
func TestStreamUsesFramesAndKeepsEveryByte(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	s := session(t, d.base, token)
	blob := randomBytes(t, 3<<20)
	file := filepath.Join(d.dir, "blob")
	if err := s.WriteFile(ctx, file, bytes.NewReader(blob), 0o600); err != nil {
		t.Fatal(err)
	}
	tap := newWiretap(t, d.base, false)
	via := session(t, tap.url, token)
	var out, errOut bytes.Buffer
	r, err := via.Run(ctx, []string{"cat " + file + "; head -c 1000 " + file + " >&2"}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}, Stdout: &out, Stderr: &errOut})
	if err != nil || r.ExitStatus != 0 {
		t.Fatalf("run: %+v %v", r, err)
	}
	if !bytes.Equal(out.Bytes(), blob) || !bytes.Equal(errOut.Bytes(), blob[:1000]) || r.Stdout != string(blob) {
		t.Fatalf("stdout %d bytes (equal %v), stderr %d bytes", out.Len(), bytes.Equal(out.Bytes(), blob), errOut.Len())
	}
	e, err := s.Start(ctx, []string{"cat " + file}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	tap.take()
	st := via.Exec(e.ID()).Stream(ctx, 0)
	var got []byte
	for {
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Data...)
	}
	if !bytes.Equal(got, blob) || st.Released() {
		t.Fatalf("stream: %d bytes, equal %v, released %v", len(got), bytes.Equal(got, blob), st.Released())
	}
	if ex := tap.take(); len(ex) != 1 || !strings.HasSuffix(ex[0], "/stream "+protocol.FramesMediaType) {
		t.Fatalf("stream exchanges %q", ex)
	}
}

// Catches: a run whose connection is cut before its exit event being
// treated as finished (or as released: the exec would never be acked), and
// the resume going anywhere but the stream route at the cursor.
func TestRunCutBeforeExitResumesAndAcks(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	s := session(t, d.base, token)
	blob := randomBytes(t, 600<<10)
	file := filepath.Join(d.dir, "blob")
	if err := s.WriteFile(ctx, file, bytes.NewReader(blob), 0o600); err != nil {
		t.Fatal(err)
	}
	// Discovery first over a clean connection, then cut the next two
	// connections (the run, then the first resume) after 200 KiB each.
	px := newCutProxy(t, d.addr, 200<<10, 0)
	via := session(t, px.url(), token)
	if _, _, err := via.StartStream(ctx, []string{"true"}, client.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	px.cuts.Store(2)
	// The pause keeps the exit event from being written before the cut
	// reaches the daemon: written, it would have released the exec.
	r, err := via.Run(ctx, []string{"cat " + file + "; sleep 0.5; printf end"}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	if err != nil || r.ExitStatus != 0 || r.Stdout != string(blob)+"end" || r.Phase != protocol.PhaseAcked {
		t.Fatalf("cut run: %v exit %d, %d bytes (equal %v) phase %s", err, r.ExitStatus, len(r.Stdout), r.Stdout == string(blob)+"end", r.Phase)
	}
	reqs := strings.Join(px.targets(), " ")
	if !strings.Contains(reqs, "/v1/exec/"+r.ExecID+"/stream?offset=") || !strings.Contains(reqs, "/v1/exec/"+r.ExecID+"/ack") {
		t.Fatalf("requests after the cut: %s", reqs)
	}
}

// Catches: a Run that fails when the document lists the run route but
// nothing serves it (a 404 without a slug), instead of falling back to
// protocol v1's routes, and a fallback that tries the dead route again.
func TestRunFallsBackWhenTheListedRouteIsNotServed(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	tap := newWiretap(t, d.base, true, true)
	s := session(t, tap.url, token)
	for i := range 2 {
		r, err := s.Run(ctx, []string{"printf ok"}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
		if err != nil || r.Stdout != "ok" || r.ExitStatus != 0 {
			t.Fatalf("run %d: %+v %v", i, r, err)
		}
		got := strings.Join(tap.take(), "|")
		if runs := strings.Count(got, "POST /v1/exec/run"); runs != 1-i || !strings.Contains(got, "POST /v1/exec/start") {
			t.Fatalf("run %d exchanges: %s", i, got)
		}
	}
}

// Catches: Spawn not taking the run route (more exchanges), Wait polling or
// acking an exec the run route already released (409 already_acked), and
// Wait's record missing the output the readers were handed.
func TestSpawnWaitOverTheRunRoute(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	tap := newWiretap(t, d.base, false)
	s := session(t, tap.url, token)
	p, err := s.Spawn(ctx, []string{`printf 'out\000'; printf err >&2; exit 5`}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, oerr, eerr := readBoth(ctx, p)
	r, err := p.Wait(ctx)
	if err != nil || oerr != nil || eerr != nil {
		t.Fatalf("wait: %v (readers %v %v)", err, oerr, eerr)
	}
	if string(stdout) != "out\x00" || string(stderr) != "err" || r.ExitStatus != 5 || r.Stdout != "out\x00" || r.Stderr != "err" || r.Phase != protocol.PhaseAcked {
		t.Fatalf("readers %q %q, record %+v", stdout, stderr, r)
	}
	got := strings.Join(tap.take(), "|")
	if got != "GET /v1/capabilities application/json|POST /v1/exec/run "+protocol.FramesMediaType {
		t.Fatalf("exchanges %s", got)
	}
}

// Catches: a stream's pooled reader handed back twice (the exit path and
// then Close, with the stream still pointing at it) or while the stream can
// still read it: two streams then read through one buffer, and one run's
// output lands in another's. Runs and explicitly closed streams go at once,
// each output larger than the reader's buffer and different in every byte
// position from the others'.
func TestConcurrentStreamsKeepTheirOwnOutput(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	s := session(t, d.base, token)
	const workers, each, size = 6, 4, 300_000
	errs := make(chan error, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			line := strings.Repeat(string(rune('a'+w)), 15) + "\n"
			want := strings.Repeat(line, size/len(line))
			cmd := []string{"yes " + strings.TrimSpace(line) + " | head -c " + strconv.Itoa(len(want))}
			for i := range each {
				var got string
				if i%2 == 0 {
					r, err := s.Run(ctx, cmd, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
					if err != nil {
						errs <- err
						return
					}
					got = r.Stdout
				} else {
					_, st, err := s.StartStream(ctx, cmd, client.StartOptions{Shell: true})
					if err != nil {
						errs <- err
						return
					}
					var b strings.Builder
					for {
						ev, err := st.Next()
						if err == io.EOF {
							break
						}
						if err != nil {
							st.Close()
							errs <- err
							return
						}
						if ev.Kind == client.EventOutput {
							b.Write(ev.Data)
						}
					}
					st.Close() // after the exit event handed the readers back
					got = b.String()
				}
				if got != want {
					errs <- fmt.Errorf("worker %d run %d: %d bytes, want %d of %q (first difference at %d)", w, i, len(got), len(want), line[:1], firstDiff(got, want))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
