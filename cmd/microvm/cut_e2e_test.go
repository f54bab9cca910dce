package main_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// forwarder is a loopback HTTP forwarder between the CLI and a real agentd.
// It records every request it forwards and, when told, cuts every SSE
// response just inside its exit event: everything the daemon sent before the
// exit event reaches the CLI, then the connection is aborted mid-event, so
// the CLI sees a body that broke without an exit. A reattach at the cursor
// gets only the exit event and is cut again, so no reattach makes progress
// and the client's reattach budget runs out: the stream ends with
// client.ErrStreamCut, deterministically, whatever the daemon's framing.
type forwarder struct {
	url string
	// cutExit turns the cut on.
	cutExit atomic.Bool
	// beforeStream, when set, runs before a stream request is forwarded.
	// Set only through newForwarder, before the first request.
	beforeStream func(r *http.Request)

	mu    sync.Mutex
	reqs  []string                           // "METHOD /path", in arrival order
	stdin map[string][]protocol.StdinRequest // each exec's stdin request bodies, in order
}

var errCut = errors.New("forwarder: cut inside the exit event")

func newForwarder(t *testing.T, upstream string, beforeStream func(*http.Request)) *forwarder {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{stdin: map[string][]protocol.StdinRequest{}, beforeStream: beforeStream}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // every byte as the daemon sent it
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ModifyResponse = func(resp *http.Response) error {
		if f.cutExit.Load() && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body = &exitCutter{ReadCloser: resp.Body}
		}
		return nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body protocol.StdinRequest
		id, isStdin := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/v1/exec/"), "/stdin")
		if isStdin {
			raw, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(raw, &body)
			r.Body = io.NopCloser(bytes.NewReader(raw))
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, r.Method+" "+r.URL.Path)
		if isStdin {
			f.stdin[id] = append(f.stdin[id], body)
		}
		f.mu.Unlock()
		if f.cutExit.Load() || f.beforeStream != nil {
			// A cutting or stream-holding forwarder plays a daemon without
			// issue 35's additions (no run route, SSE only): the cut lands
			// inside the SSE exit event of an exec the daemon has not
			// released, and a held stream attaches late (the run route
			// attaches at the spawn).
			if r.URL.Path == "/v1/exec/run" {
				http.NotFound(w, r)
				return
			}
			r.Header.Set("Accept", "text/event-stream")
		}
		if f.beforeStream != nil && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/stream") {
			f.beforeStream(r)
		}
		rp.ServeHTTP(w, r) // a read error mid-body aborts the connection (http.ErrAbortHandler)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	f.url = "http://" + l.Addr().String()
	return f
}

// count is how many forwarded requests were exactly "METHOD /path".
func (f *forwarder) count(req string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reqs {
		if r == req {
			n++
		}
	}
	return n
}

// stdinWrites is what the exec's stdin requests carried: the data they
// wrote, joined, and the index of each one that closed stdin.
func (f *forwarder) stdinWrites(t *testing.T, id string) (data string, requests int, closedAt []int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, b := range f.stdin[id] {
		if b.DataB64 != nil {
			p, err := base64.StdEncoding.DecodeString(*b.DataB64)
			if err != nil {
				t.Fatal(err)
			}
			data += string(p)
		}
		if b.Signal != nil && *b.Signal == "eof" {
			closedAt = append(closedAt, i)
		}
	}
	return data, len(f.stdin[id]), closedAt
}

// exitCutter passes an SSE body through up to the first bytes of its exit
// event, then fails the read, which makes the reverse proxy abort the
// connection rather than end the body cleanly.
type exitCutter struct {
	io.ReadCloser
	tail []byte // the last bytes passed, for a marker split across reads
	cut  bool
}

var exitMarker = []byte("event: " + "exit")

func (c *exitCutter) Read(p []byte) (int, error) {
	if c.cut {
		return 0, errCut
	}
	n, err := c.ReadCloser.Read(p)
	seen := append(append([]byte{}, c.tail...), p[:n]...)
	if i := bytes.Index(seen, exitMarker); i >= 0 {
		// Pass "event: e", no more: a cut inside the event, not at a boundary.
		keep := min(max(i-len(c.tail)+len("event: e"), 0), n)
		c.cut = true
		return keep, nil
	}
	c.tail = seen[max(len(seen)-len(exitMarker), 0):]
	return n, err
}

// ndjson splits a --stream stdout into its event lines and its final
// envelope, asserting each line is one JSON value, each event line is a
// streamEvent, and the envelope is valid and agrees with the exit status.
func ndjson(t *testing.T, inv invocation) (events []map[string]any, env map[string]any) {
	t.Helper()
	if !strings.HasSuffix(inv.stdout, "\n") {
		t.Fatalf("stdout does not end in a line: %q", inv.stdout)
	}
	lines := strings.Split(strings.TrimSuffix(inv.stdout, "\n"), "\n")
	for i, l := range lines {
		var v any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("line %d is not one JSON value: %q\nstderr=%s", i, l, inv.stderr)
		}
		if i == len(lines)-1 {
			return events, checkEnvelope(t, v, inv.code)
		}
		if err := eventSchema.Validate(v); err != nil {
			t.Fatalf("line %d fails the streamEvent schema: %v", i, err)
		}
		events = append(events, v.(map[string]any))
	}
	panic("unreachable")
}

// TestCutStream: a stream whose every connection breaks before the exit
// event. Catches: a cut stream reported as exit 0 / exitCode 0 (falling back
// to the record, or treating ErrStreamCut like the end of the stream), the
// cut mapped to the client's ERR_RETRYABLE instead of the contract's
// ERR_EXEC_FAILED, nextOffset or the resume hint dropped or wrong, the final
// envelope pretty-printed after NDJSON (no longer the last line), the failure
// written to stdout on the human path, and a resume hint that starts the
// command a second time.
func TestCutStream(t *testing.T) {
	endpoint, token := startAgentd(t)
	fw := newForwarder(t, endpoint, nil)
	fw.cutExit.Store(true)
	cut := []string{"MICROVM_ENDPOINT=" + fw.url, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	direct := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}

	t.Run("13 json: NDJSON lines, then exitCode null and a resume hint as the last line", func(t *testing.T) {
		inv := cli(t, cut, "", "--json", "exec", "--stream", "--exec-id", "cut-json", "printf 'one\\n'; printf 'two\\n' >&2")
		events, m := ndjson(t, inv)
		if inv.code != int(taxonomy.KindExecFailed.Exit()) || m["code"] != taxonomy.KindExecFailed.Code() {
			t.Fatalf("exit %d %v, want %d %s\n%s", inv.code, m["code"], taxonomy.KindExecFailed.Exit(), taxonomy.KindExecFailed.Code(), inv.stdout)
		}
		if strings.Count(inv.stdout, "\n") != len(events)+1 {
			t.Fatalf("the envelope is not one compact last line:\n%s", inv.stdout)
		}
		text := map[string]string{}
		for _, e := range events {
			if e["event"] != cliapi.EventOutput {
				t.Fatalf("a %v line from a stream that never delivered its exit", e["event"])
			}
			text[e["stream"].(string)] += e["text"].(string) // the two pipes interleave in any order
		}
		if text["stdout"] != "one\n" || text["stderr"] != "two\n" {
			t.Fatalf("the output before the cut was lost: %q", text)
		}
		d := m["data"].(map[string]any)
		for _, k := range []string{"exitCode", "truncated"} {
			if v, ok := d[k]; !ok || v != nil {
				t.Fatalf("data.%s = %v (present %t), want null: the outcome of a cut stream is unknown", k, v, ok)
			}
		}
		if d["nextOffset"] != float64(8) || d["bytes"] != float64(8) || d["events"] != float64(len(events)) || d["execId"] != "cut-json" {
			t.Fatalf("summary %v", d)
		}
		if d["kind"] != taxonomy.WireTransport.String() {
			t.Fatalf("data.kind %v", d["kind"])
		}
		if n := fw.count("GET /v1/exec/cut-json/stream"); n < 2 {
			t.Fatalf("%d stream requests: the client gave up without reattaching", n)
		}
		hint := m["suggestions"].([]any)[0].(string)
		if !strings.Contains(hint, "--stream --from-offset 8 --exec-id cut-json") {
			t.Fatalf("no resume hint: %v", m["suggestions"])
		}

		// The hint, run as it stands against the daemon directly, resumes
		// the same exec: nothing is delivered twice and the command is not
		// started again (a second run would put output past offset 8).
		// --json goes before the command's words: every word after the
		// command's first is the command's.
		sh := exec.Command("sh", "-c", strings.Replace(hint, "microvm exec ", "microvm --json exec ", 1))
		sh.Env = append(append([]string{"HOME=" + t.TempDir(), "PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}, coverEnv()...), direct...)
		var out, errb bytes.Buffer
		sh.Stdout, sh.Stderr = &out, &errb
		err := sh.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		resumed, rm := ndjson(t, invocation{stdout: out.String(), stderr: errb.String(), code: code})
		rd := rm["data"].(map[string]any)
		if code != 0 || len(resumed) != 1 || resumed[0]["event"] != cliapi.EventExit || rd["exitCode"] != float64(0) || rd["nextOffset"] != float64(8) || rd["bytes"] != float64(0) {
			t.Fatalf("resuming with %q: exit %d\n%s%s", hint, code, out.String(), errb.String())
		}
	})

	t.Run("13 human: the child's bytes on stdout, the failure on stderr", func(t *testing.T) {
		inv := cli(t, cut, "", "exec", "--stream", "--exec-id", "cut-human", "echo one")
		if inv.code != int(taxonomy.KindExecFailed.Exit()) || inv.stdout != "one\n" {
			t.Fatalf("exit %d stdout %q", inv.code, inv.stdout)
		}
		if !strings.Contains(inv.stderr, taxonomy.KindExecFailed.Code()) || !strings.Contains(inv.stderr, "--from-offset 4 --exec-id cut-human") {
			t.Fatalf("stderr %q", inv.stderr)
		}
	})

	// Catches: the wait path reporting the prefix it streamed as a passing
	// run because the record (read by poll, not the stream) says exit 0.
	t.Run("3 wait: a cut stream is not a passing run", func(t *testing.T) {
		inv := cli(t, cut, "", "--json", "exec", "--exec-id", "cut-wait", "echo one; echo two")
		m := wantFailure(t, inv, taxonomy.KindRetryable, taxonomy.KindRetryable.Finding())
		d := m["data"].(map[string]any)
		if d["kind"] != taxonomy.WireTransport.String() || d["exitCode"] != float64(0) || d["stdout"] != "one\ntwo\n" || d["execId"] != "cut-wait" {
			t.Fatalf("data %v", d)
		}
		raw := cli(t, cut, "", "exec", "echo one")
		if raw.code != int(taxonomy.KindRetryable.Exit()) || raw.stdout != "one\n" || !strings.Contains(raw.stderr, taxonomy.KindRetryable.Code()) {
			t.Fatalf("raw: exit %d stdout %q stderr %q", raw.code, raw.stdout, raw.stderr)
		}
	})
}

// TestOutputGapIsPlatform reaches row 9 with a real daemon: a 4 KiB replay
// window, a child that writes 64 KiB, and a stream request the forwarder
// holds until the exec has exited, so the first 60 KiB are gone before
// anyone reads them and the daemon says so with a gap event. Catches: a
// wait that reports output with a hole in it as a passing run, and the gap
// losing its wire kind (data.kind OutputGap) or its row.
func TestOutputGapIsPlatform(t *testing.T) {
	endpoint, token := startAgentd(t, "AGENTD_STREAM_BUFFER_BYTES=4096")
	holdUntilExited := func(r *http.Request) {
		// Bounded by the count; the sleep only paces the polls.
		for range 1000 {
			req, _ := http.NewRequest(http.MethodGet, endpoint+strings.TrimSuffix(r.URL.Path, "/stream"), nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				var p struct{ Phase string }
				_ = json.NewDecoder(resp.Body).Decode(&p)
				resp.Body.Close()
				if p.Phase == "exited" {
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	fw := newForwarder(t, endpoint, holdUntilExited)
	env := []string{"MICROVM_ENDPOINT=" + fw.url, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	inv := cli(t, env, "", "--json", "exec", "head -c 65536 /dev/zero")
	m := wantFailure(t, inv, taxonomy.KindPlatform, "")
	d := m["data"].(map[string]any)
	if d["kind"] != taxonomy.WireOutputGap.String() || d["exitCode"] != float64(0) {
		t.Fatalf("data %v", d)
	}
}

// TestStdinLastChunkCarriesEOF counts stdin requests at the forwarder: the
// last chunk and the EOF are one request. Catches: data then a separate
// close (two requests for one short write), a close sent before the last
// chunk (the child misses it), and a last chunk dropped on the way.
func TestStdinLastChunkCarriesEOF(t *testing.T) {
	endpoint, token := startAgentd(t)
	fw := newForwarder(t, endpoint, nil)
	env := []string{"MICROVM_ENDPOINT=" + fw.url, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	// wantWrites: the data arrived whole, in reqs requests, and exactly the
	// last one closed stdin (or none did, without --eof).
	wantWrites := func(t *testing.T, id, data string, reqs int, eof bool) {
		t.Helper()
		got, n, closedAt := fw.stdinWrites(t, id)
		if got != data || n != reqs {
			t.Fatalf("%s: %d stdin requests carrying %d bytes, want %d carrying %d", id, n, len(got), reqs, len(data))
		}
		if want := []int{n - 1}; eof && (len(closedAt) != 1 || closedAt[0] != want[0]) || !eof && len(closedAt) != 0 {
			t.Fatalf("%s: stdin closed by requests %v of %d (eof %t)", id, closedAt, n, eof)
		}
	}

	for _, tc := range []struct {
		name, input, cmd, want string
		reqs                   int
	}{
		{"one short chunk", "piped\n", "cat", "piped\n", 1},
		{"nothing: the close alone", "", "cat", "", 1},
		{"exactly one full chunk", strings.Repeat("y", 256<<10), "wc -c | tr -d ' '", "262144\n", 1},
		{"two chunks over the per-write cap", strings.Repeat("x", 300000), "wc -c | tr -d ' '", "300000\n", 2},
	} {
		t.Run("exec --stdin, "+tc.name, func(t *testing.T) {
			id := "stdin-" + strings.ReplaceAll(tc.name, " ", "-")
			id = strings.NewReplacer(":", "", ",", "").Replace(id)
			d := envelope(t, cli(t, env, tc.input, "--json", "exec", "--stdin", "--exec-id", id, tc.cmd))["data"].(map[string]any)
			if d["stdout"] != tc.want {
				t.Fatalf("stdout %q, want %q", d["stdout"], tc.want)
			}
			wantWrites(t, id, tc.input, tc.reqs, true)
		})
	}

	t.Run("stdin --data --eof is one request", func(t *testing.T) {
		start := func(id string) {
			req, _ := http.NewRequest("POST", endpoint+"/v1/exec/start", strings.NewReader(`{"exec_id":"`+id+`","command":["cat"],"stdin":true}`))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("start: %v %v", err, resp)
			}
			resp.Body.Close()
		}
		start("stdin-cmd")
		w := envelope(t, cli(t, env, "", "--json", "stdin", "stdin-cmd", "--data", "hi", "--eof"))["data"].(map[string]any)
		if w["written"] != float64(2) || w["eof"] != true {
			t.Fatalf("%v", w)
		}
		wantWrites(t, "stdin-cmd", "hi", 1, true)
		for i := 0; ; i++ { // bounded by the count, not the clock
			p := envelope(t, cli(t, env, "", "--json", "exec", "--poll", "stdin-cmd"))["data"].(map[string]any)
			if p["phase"] == "exited" {
				if p["stdout"] != "hi" {
					t.Fatalf("%v", p)
				}
				break
			}
			if i > 200 {
				t.Fatalf("cat never saw EOF: %v", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Without --eof the data goes alone and stdin stays open.
		start("stdin-open")
		w = envelope(t, cli(t, env, "", "--json", "stdin", "stdin-open", "--data", "x"))["data"].(map[string]any)
		if w["written"] != float64(1) || w["eof"] != false {
			t.Fatalf("%v", w)
		}
		wantWrites(t, "stdin-open", "x", 1, false)
		if p := envelope(t, cli(t, env, "", "--json", "exec", "--poll", "stdin-open"))["data"].(map[string]any); p["phase"] != "running" {
			t.Fatalf("stdin was closed without --eof: %v", p)
		}
		w = envelope(t, cli(t, env, "", "--json", "stdin", "stdin-open", "--eof"))["data"].(map[string]any)
		if w["written"] != float64(0) || w["eof"] != true {
			t.Fatalf("%v", w)
		}
		wantWrites(t, "stdin-open", "x", 2, true)
	})
}
