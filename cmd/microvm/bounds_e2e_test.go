package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/taxonomy"
)

// hostileAgentd is a loopback HTTP server playing a guest that took over
// agentd's port: every route it is given sends without end (at most
// limit bytes per request, so a client without a bound is measured, not
// left to grow until the machine runs out).
func hostileAgentd(t *testing.T, routes map[string]http.HandlerFunc) string {
	mux := http.NewServeMux()
	for p, h := range routes {
		mux.HandleFunc(p, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func sendEndless(w http.ResponseWriter, head string, chunk []byte, limit int64) {
	n, _ := w.Write([]byte(head))
	for total := int64(n); total < limit; {
		n, err := w.Write(chunk)
		total += int64(n)
		if err != nil {
			return
		}
	}
}

// runMeasured runs the CLI and reports its peak resident set (ru_maxrss).
func runMeasured(t *testing.T, env []string, args ...string) (invocation, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, coverEnv()...), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running microvm %v: %v", args, err)
	}
	var rss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss << 10 // KiB on Linux
	}
	return invocation{stdout: out.String(), stderr: errb.String(), code: code}, rss
}

func failure(t *testing.T, inv invocation) (kind, message string) {
	t.Helper()
	env := envelope(t, inv)
	data, _ := env["data"].(map[string]any)
	kind, _ = data["kind"].(string)
	message, _ = env["message"].(string)
	if message == "" {
		b, _ := json.Marshal(env)
		message = string(b)
	}
	return kind, message
}

// `microvm exec --stream` against a guest sending one endless SSE data line
// (issue 44: the attaching client grew to 3.56 GB in 8 s). The CLI fails
// with exit 5, data.kind TooLarge, naming MAX_SSE_LINE_BYTES, and its peak
// resident set stays far under what was sent. Wrong edits caught: any
// unbounded line reader (the CLI's RSS grows with the 512 MiB sent), and the
// bound read as a cut stream (exit 13 after reconnecting into it).
func TestCLIRefusesAnEndlessSSELine(t *testing.T) {
	const limit = 512 << 20
	url := hostileAgentd(t, map[string]http.HandlerFunc{
		"POST /v1/exec/start": func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				ExecID string `json:"exec_id"`
			}
			_ = json.NewDecoder(r.Body).Decode(&req)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"exec_id":` + strconv.Quote(req.ExecID) + `}`))
		},
		"GET /v1/exec/{id}/stream": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sendEndless(w, "event: output\ndata: ", bytes.Repeat([]byte("A"), 64<<10), limit)
		},
	})
	env := []string{"MICROVM_ENDPOINT=" + url, "MICROVM_AGENT_TOKEN=tok", "MICROVM_DIRECT=1"}
	inv, rss := runMeasured(t, env, "--json", "exec", "--stream", "--", "true")
	kind, msg := failure(t, inv)
	t.Logf("exec --stream against an endless SSE line: exit %d, peak RSS %d MiB", inv.code, rss>>20)
	if inv.code != 5 || kind != "TooLarge" || !strings.Contains(msg, "MAX_SSE_LINE_BYTES") {
		t.Fatalf("exit %d, kind %q, message %q: want 5, TooLarge, naming MAX_SSE_LINE_BYTES", inv.code, kind, msg)
	}
	if rss > 128<<20 {
		t.Fatalf("peak RSS %d MiB against a %d MiB line bound", rss>>20, taxonomy.MaxSSELineBytes>>20)
	}
}

// `microvm cp vm:/big LOCAL` against a guest sending without end: the copy
// stops at --max-bytes with exit 5, TooLarge naming it, and leaves nothing
// at LOCAL or beside it (issue 44: a 100 GiB sparse guest file filled a
// 1 GiB target). Wrong edits caught: --max-bytes parsed but not passed to
// the download (the 64 MiB sent arrive whole, exit 0), and the temporary
// file left behind.
func TestCLICpStopsAtMaxBytes(t *testing.T) {
	url := hostileAgentd(t, map[string]http.HandlerFunc{
		"GET /v1/fs/file": func(w http.ResponseWriter, r *http.Request) {
			sendEndless(w, "", bytes.Repeat([]byte("D"), 1<<20), 64<<20)
		},
	})
	env := []string{"MICROVM_ENDPOINT=" + url, "MICROVM_AGENT_TOKEN=tok", "MICROVM_DIRECT=1"}
	dir := t.TempDir()
	local := filepath.Join(dir, "big")
	inv, _ := runMeasured(t, env, "--json", "cp", "vm:/big", local, "--max-bytes", strconv.Itoa(8<<20))
	kind, msg := failure(t, inv)
	if inv.code != 5 || kind != "TooLarge" || !strings.Contains(msg, "--max-bytes") {
		t.Fatalf("exit %d, kind %q, message %q: want 5, TooLarge, naming --max-bytes", inv.code, kind, msg)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a refused download left %v", ents)
	}
	// --max-bytes with an upload is refused, not ignored.
	up := filepath.Join(t.TempDir(), "up")
	if err := os.WriteFile(up, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if inv := cli(t, env, "", "--json", "cp", up, "vm:/x", "--max-bytes", "10"); inv.code != 2 || !strings.Contains(inv.stdout, "download only") {
		t.Fatalf("--max-bytes on an upload: exit %d, want 2: %s", inv.code, inv.stdout)
	}
}

// `microvm watch --for` against a guest sending changes without end: the
// report it gathers stops at MAX_WATCH_EVENTS with exit 5, TooLarge naming
// it. Wrong edit caught: gathering events until the window ends, however
// many arrive (the CLI's memory grows with the flood).
func TestCLIWatchStopsAtMaxWatchEvents(t *testing.T) {
	url := hostileAgentd(t, map[string]http.HandlerFunc{
		"GET /v1/fs/watch": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			var b bytes.Buffer
			for i := range 1000 {
				fmt.Fprintf(&b, "event: fs\ndata: {\"seq\":%d,\"op\":\"create\",\"path\":\"/w/f\"}\n\n", i)
			}
			sendEndless(w, "event: ready\ndata: {\"path\":\"/w\",\"watched_dirs\":1}\n\n", b.Bytes(), 1<<30)
		},
	})
	env := []string{"MICROVM_ENDPOINT=" + url, "MICROVM_AGENT_TOKEN=tok", "MICROVM_DIRECT=1"}
	inv, rss := runMeasured(t, env, "--json", "watch", "--for", "60s", "/w")
	kind, msg := failure(t, inv)
	t.Logf("watch against endless changes: exit %d, peak RSS %d MiB", inv.code, rss>>20)
	if inv.code != 5 || kind != "TooLarge" || !strings.Contains(msg, "MAX_WATCH_EVENTS") {
		t.Fatalf("exit %d, kind %q, message %q: want 5, TooLarge, naming MAX_WATCH_EVENTS", inv.code, kind, msg)
	}
}
