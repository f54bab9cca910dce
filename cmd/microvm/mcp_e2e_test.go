package main_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/gen/mcpapi"
)

// guestInitArg0 is the argv[0] every local guest's init runs under
// (localvm/isolate_linux.go); a process with it is a guest still up.
const mcpGuestInitArg0 = "microvms-emulator-guest-init"

// guestInits are the guest init processes descended from pid, by /proc.
func guestInits(t *testing.T, pid int) []int {
	t.Helper()
	parent := map[int]int{}
	argv0 := map[int]string{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		p, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		parent[p], _ = strconv.Atoi(f[1])
		cmd, _ := os.ReadFile(d + "/cmdline")
		argv0[p], _, _ = strings.Cut(string(cmd), "\x00")
	}
	var out []int
	for p, a := range argv0 {
		if a != mcpGuestInitArg0 {
			continue
		}
		for q, hops := parent[p], 0; q > 1 && hops < 64; q, hops = parent[q], hops+1 {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// alive reports which of pids still run as a guest init.
func stillGuests(pids []int) []int {
	var out []int
	for _, p := range pids {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err == nil && strings.HasPrefix(string(cmd), mcpGuestInitArg0) {
			out = append(out, p)
		}
	}
	return out
}

// mcpServerProc is one `microvm mcp --local` process under test.
type mcpServerProc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan error
}

func (p *mcpServerProc) waitExit(t *testing.T, bound time.Duration) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("the server exited with %v; log:\n%s", err, p.stderr.String())
		}
	case <-time.After(bound):
		_ = p.cmd.Process.Kill()
		t.Fatalf("the server did not exit within %s of its session ending; log:\n%s", bound, p.stderr.String())
	}
}

// startMCP starts the server with pipes for stdio (http empty) or on a free
// loopback port, whose URL it returns.
func startMCP(t *testing.T, http bool) (p *mcpServerProc, stdin io.WriteCloser, stdout io.ReadCloser, url string) {
	t.Helper()
	env, _ := lifecycleEnv(t)
	args := []string{"mcp", "--local"}
	if http {
		args = append(args, "--http", "127.0.0.1:0")
	}
	return startMCPWith(t, http, env, args...)
}

func startMCPWith(t *testing.T, http bool, env []string, args ...string) (p *mcpServerProc, stdin io.WriteCloser, stdout io.ReadCloser, url string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, coverEnv()...), env...)
	p = &mcpServerProc{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	var err error
	if stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	if http {
		re := regexp.MustCompile(`http://127\.0\.0\.1:\d+/mcp`)
		for range 3000 {
			if m := re.FindString(p.stderr.String()); m != "" {
				return p, stdin, stdout, m
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the server never said where it listens; log:\n%s", p.stderr.String())
	}
	return p, stdin, stdout, ""
}

// progressSeen counts progress notifications by token.
type progressSeen struct {
	mu   sync.Mutex
	msgs map[string][]string
	ch   chan struct{}
}

func (ps *progressSeen) handler(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	tok := fmt.Sprint(req.Params.ProgressToken)
	ps.msgs[tok] = append(ps.msgs[tok], req.Params.Message)
	select {
	case ps.ch <- struct{}{}:
	default:
	}
}

func (ps *progressSeen) of(tok string) []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return slices.Clone(ps.msgs[tok])
}

func connectMCP(t *testing.T, ctx context.Context, tr mcp.Transport) (*mcp.ClientSession, *progressSeen) {
	t.Helper()
	ps := &progressSeen{msgs: map[string][]string{}, ch: make(chan struct{}, 1)}
	c := mcp.NewClient(&mcp.Implementation{Name: "microvm-mcp-test", Version: "1"}, &mcp.ClientOptions{ProgressNotificationHandler: ps.handler})
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs, ps
}

// call runs one tool and decodes its structured result into out; a tool
// error fails the test unless wantErr.
func call(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s answered a tool error: %s", name, text(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("%s: structured result %s: %v", name, raw, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// checkToolList is the drift test: the tools the server lists are exactly
// docs/mcp-tools.json, which `make gen` writes from api/mcp.yaml. Catches:
// a tool registered with a hand-written or inferred schema, a declared tool
// left unregistered, an extra tool, a description or hint edited in code.
func checkToolList(t *testing.T, ctx context.Context, cs *mcp.ClientSession) {
	t.Helper()
	raw, err := os.ReadFile("../../docs/mcp-tools.json")
	if err != nil {
		t.Fatal(err)
	}
	var published struct {
		Tools []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(raw, &published); err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]map[string]any{}
	for _, tool := range res.Tools {
		b, _ := json.Marshal(tool)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		served[tool.Name] = m
	}
	if len(served) != len(published.Tools) || len(published.Tools) != len(mcpapi.Tools) {
		t.Fatalf("served %d tools, docs/mcp-tools.json has %d, gen/mcpapi %d", len(served), len(published.Tools), len(mcpapi.Tools))
	}
	for _, want := range published.Tools {
		name := want["name"].(string)
		got, ok := served[name]
		if !ok {
			t.Errorf("%s is declared but not served", name)
			continue
		}
		for _, k := range []string{"title", "description", "inputSchema", "outputSchema", "annotations"} {
			if !reflect.DeepEqual(got[k], want[k]) {
				t.Errorf("%s %s: served %v, declared %v", name, k, got[k], want[k])
			}
		}
	}
}

// exercise is the whole scenario against one connected client.
func exercise(t *testing.T, ctx context.Context, cs *mcp.ClientSession, ps *progressSeen, server int) (sandboxID string) {
	checkToolList(t, ctx, cs)

	var created mcpapi.SandboxCreateResult
	call(t, ctx, cs, mcpapi.ToolSandboxCreate, map[string]any{"env": map[string]string{"GREETING": "hi"}}, &created)
	if created.SandboxID == "" || created.State != "RUNNING" || created.LiveSandboxes != 1 || created.MaxLiveSandboxes != mcpapi.MaxLiveSandboxes {
		t.Fatalf("create: %+v", created)
	}
	id := created.SandboxID
	// The check below that no guest remains means something only if it
	// sees the guest while it runs.
	if len(guestInits(t, server)) == 0 {
		t.Fatalf("no %s process under the server while %s runs", mcpGuestInitArg0, id)
	}

	var ex mcpapi.SandboxExecResult
	call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": id, "command": "uname -a"}, &ex)
	if ex.ExitCode == nil || *ex.ExitCode != 0 || !strings.Contains(ex.Stdout, "Linux") || ex.Truncated {
		t.Fatalf("uname -a: %+v", ex)
	}

	// Catches: a non-zero exit turned into a tool error, or its code lost.
	res := call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": id, "command": "echo out; echo err >&2; echo $GREETING $EXTRA; exit 3", "env": map[string]string{"EXTRA": "there"}}, &ex)
	if ex.ExitCode == nil || *ex.ExitCode != 3 || ex.Stdout != "out\nhi there\n" || ex.Stderr != "err\n" || ex.Signal != nil {
		t.Fatalf("exit 3: %+v", ex)
	}
	if !strings.HasPrefix(text(res), "exit code 3") {
		t.Fatalf("exit 3 rendered as %q", text(res))
	}
	// Catches: the exit event's usage dropped from the structured result.
	if ex.Usage == nil || ex.Usage.StdoutBytes != int64(len("out\nhi there\n")) || ex.Usage.StderrBytes != 4 || ex.Usage.Source == "" || ex.OomKilled {
		t.Fatalf("exit 3 usage: %+v oom %v", ex.Usage, ex.OomKilled)
	}

	// Catches: output past the cap returned whole, or cut without saying so.
	res = call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": id, "command": "head -c 100000 /dev/zero | tr '\\0' a"}, &ex)
	if len(ex.Stdout) != mcpapi.MaxOutputBytes || ex.StdoutBytes != 100000 || !ex.Truncated || !strings.Contains(text(res), "stdout truncated") {
		t.Fatalf("capped output: %d bytes kept of %d, truncated %v, text ends %q", len(ex.Stdout), ex.StdoutBytes, ex.Truncated, text(res)[max(0, len(text(res))-120):])
	}

	// A long exec reports progress to a caller that asked for it: the start,
	// then the interval's ticks.
	params := &mcp.CallToolParams{Name: mcpapi.ToolSandboxExec, Arguments: map[string]any{"sandbox_id": id, "command": "sleep 2.5; echo slept"}}
	params.SetProgressToken("slow-1")
	pres, err := cs.CallTool(ctx, params)
	if err != nil || pres.IsError {
		t.Fatalf("slow exec: %v %s", err, text(pres))
	}
	if msgs := ps.of("slow-1"); len(msgs) < 2 || !strings.HasPrefix(msgs[0], "started ") {
		t.Fatalf("progress of a 2.5 s exec: %q", msgs)
	}

	// A call the client cancels takes its command with it. Catches: an
	// exec left running in the sandbox after its caller gave up on it.
	cctx, ccancel := context.WithCancel(ctx)
	params = &mcp.CallToolParams{Name: mcpapi.ToolSandboxExec, Arguments: map[string]any{"sandbox_id": id, "command": "exec sleep 301"}}
	params.SetProgressToken("cancelled-1")
	gone := make(chan struct{})
	go func() { _, _ = cs.CallTool(cctx, params); close(gone) }()
	for len(ps.of("cancelled-1")) == 0 {
		select {
		case <-ps.ch:
		case <-ctx.Done():
			t.Fatal("the exec never reported its start")
		}
	}
	ccancel()
	<-gone
	for i := 0; ; i++ {
		call(t, ctx, cs, mcpapi.ToolSandboxExec, map[string]any{"sandbox_id": id, "command": "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"}, &ex)
		if !strings.Contains(ex.Stdout, "sleep 301") {
			break
		}
		if i == 100 {
			t.Fatalf("sleep 301 still runs after its call was cancelled: %q", ex.Stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}

	var wrote mcpapi.SandboxWriteFileResult
	call(t, ctx, cs, mcpapi.ToolSandboxWriteFile, map[string]any{"sandbox_id": id, "path": "/tmp/mcp/notes.txt", "content": "hello from mcp\n"}, &wrote)
	if wrote.Bytes != 15 {
		t.Fatalf("write: %+v", wrote)
	}
	binary := []byte{0, 1, 2, 0xff, 0xfe}
	call(t, ctx, cs, mcpapi.ToolSandboxWriteFile, map[string]any{"sandbox_id": id, "path": "/tmp/mcp/blob.bin", "content": base64.StdEncoding.EncodeToString(binary), "encoding": "base64", "mode": "0600"}, &wrote)
	var read mcpapi.SandboxReadFileResult
	call(t, ctx, cs, mcpapi.ToolSandboxReadFile, map[string]any{"sandbox_id": id, "path": "/tmp/mcp/notes.txt"}, &read)
	if read.Encoding != "text" || read.Content != "hello from mcp\n" || read.Bytes != 15 {
		t.Fatalf("read text: %+v", read)
	}
	// Catches: bytes that are not UTF-8 returned as mangled text.
	call(t, ctx, cs, mcpapi.ToolSandboxReadFile, map[string]any{"sandbox_id": id, "path": "/tmp/mcp/blob.bin"}, &read)
	if got, _ := base64.StdEncoding.DecodeString(read.Content); read.Encoding != "base64" || !bytes.Equal(got, binary) {
		t.Fatalf("read bytes: %+v", read)
	}
	// Issue 51.7: a missing file's hint names the path, not "". Catches a
	// stat built without its path, which the hint quoted as "".
	missing, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpapi.ToolSandboxReadFile, Arguments: map[string]any{"sandbox_id": id, "path": "/tmp/mcp/nope.txt"}})
	if err != nil || !missing.IsError || !strings.Contains(text(missing), `"/tmp/mcp/nope.txt" does not exist in the VM`) || strings.Contains(text(missing), `"" does not exist`) {
		t.Fatalf("read of a missing file: %v %s", err, text(missing))
	}
	var listed mcpapi.SandboxListFilesResult
	call(t, ctx, cs, mcpapi.ToolSandboxListFiles, map[string]any{"sandbox_id": id, "path": "/tmp/mcp"}, &listed)
	names := map[string]string{}
	for _, e := range listed.Entries {
		names[e.Name] = e.Mode
	}
	if len(listed.Entries) != 2 || names["notes.txt"] == "" || names["blob.bin"] != "0600" || listed.Truncated {
		t.Fatalf("list: %+v", listed)
	}

	// Arguments the declared schema refuses never reach the handler.
	bad, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpapi.ToolSandboxExec, Arguments: map[string]any{"sandbox_id": id}})
	if err == nil && !bad.IsError {
		t.Fatalf("an exec without a command was accepted: %s", text(bad))
	}
	return id
}

// TestMCPLocal drives `microvm mcp --local` with the official SDK's client
// over stdio and over streamable HTTP through the whole scenario of issue
// 38, then closes the client: the server must terminate what the session
// created, report it, and (stdio) exit, leaving no guest.
func TestMCPLocal(t *testing.T) {
	agentdBin(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			p, stdin, stdout, url := startMCP(t, transport == "http")
			var tr mcp.Transport = &mcp.IOTransport{Reader: stdout, Writer: stdin}
			if url != "" {
				tr = &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}
			}
			cs, ps := connectMCP(t, ctx, tr)
			id := exercise(t, ctx, cs, ps, p.cmd.Process.Pid)
			guests := guestInits(t, p.cmd.Process.Pid)

			var term mcpapi.SandboxTerminateResult
			call(t, ctx, cs, mcpapi.ToolSandboxTerminate, map[string]any{"sandbox_id": id}, &term)
			if term.State != "TERMINATED" || len(term.Leaked) != 0 {
				t.Fatalf("terminate: %+v", term)
			}
			// Catches: a terminated sandbox still addressable.
			if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpapi.ToolSandboxExec, Arguments: map[string]any{"sandbox_id": id, "command": "true"}}); err != nil || !r.IsError || !strings.Contains(text(r), "ERR_INVALID_ARG") {
				t.Fatalf("exec after terminate: %v %+v", err, r)
			}
			// One more, left running: the session's end must take it down.
			var second mcpapi.SandboxCreateResult
			call(t, ctx, cs, mcpapi.ToolSandboxCreate, nil, &second)
			guests = append(guests, guestInits(t, p.cmd.Process.Pid)...)
			if err := cs.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			if transport == "http" {
				// The HTTP server outlives its sessions: the DELETE ended
				// this one, so its teardown is in the log; then stop it.
				waitLog(t, p, "teardown (session 1, the client closed the session): 1 sandboxes, 0 leaked: "+second.SandboxID+" terminated")
				_ = p.cmd.Process.Signal(syscall.SIGINT)
			}
			p.waitExit(t, time.Minute)
			t.Logf("server log:\n%s", p.stderr.String())
			if left := stillGuests(guests); len(left) != 0 {
				t.Fatalf("guest inits %v outlived the server; log:\n%s", left, p.stderr.String())
			}
			if !strings.Contains(p.stderr.String(), second.SandboxID+" terminated") {
				t.Fatalf("no teardown report for %s; log:\n%s", second.SandboxID, p.stderr.String())
			}
		})
	}
}

func waitLog(t *testing.T, p *mcpServerProc, want string) {
	t.Helper()
	for range 3000 {
		if strings.Contains(p.stderr.String(), want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the log never said %q:\n%s", want, p.stderr.String())
}

// TestMCPAbruptEnd ends the session in the middle of a long exec, the way a
// crashing agent does: over stdio its pipes close with no MCP goodbye; over
// HTTP the server is interrupted. Either way the exec's sandbox is
// terminated with a teardown report, the server exits, and no guest is
// left. Catches: teardown that waits for the exec to finish (300 s), a
// session end that is never noticed, an interrupt that skips teardown.
func TestMCPAbruptEnd(t *testing.T) {
	agentdBin(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			p, stdin, stdout, url := startMCP(t, transport == "http")
			var tr mcp.Transport = &mcp.IOTransport{Reader: stdout, Writer: stdin}
			if url != "" {
				tr = &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}
			}
			cs, ps := connectMCP(t, ctx, tr)
			var created mcpapi.SandboxCreateResult
			call(t, ctx, cs, mcpapi.ToolSandboxCreate, nil, &created)
			guests := guestInits(t, p.cmd.Process.Pid)
			if len(guests) == 0 {
				t.Fatal("no guest init under the server")
			}
			params := &mcp.CallToolParams{Name: mcpapi.ToolSandboxExec, Arguments: map[string]any{"sandbox_id": created.SandboxID, "command": "sleep 300"}}
			params.SetProgressToken("long")
			go func() { _, _ = cs.CallTool(ctx, params) }()
			// The first progress notification says the exec started.
			for len(ps.of("long")) == 0 {
				select {
				case <-ps.ch:
				case <-ctx.Done():
					t.Fatal("the exec never reported its start")
				}
			}
			why := "the client closed the session"
			if transport == "stdio" {
				stdin.Close()
				stdout.Close()
			} else {
				why = "the server was interrupted"
				_ = p.cmd.Process.Signal(syscall.SIGINT)
			}
			p.waitExit(t, time.Minute)
			t.Logf("server log:\n%s", p.stderr.String())
			if left := stillGuests(guests); len(left) != 0 {
				t.Fatalf("guest inits %v outlived the server; log:\n%s", left, p.stderr.String())
			}
			if want := "teardown (session 1, " + why + "): 1 sandboxes, 0 leaked: " + created.SandboxID + " terminated"; !strings.Contains(p.stderr.String(), want) {
				t.Fatalf("the log lacks %q:\n%s", want, p.stderr.String())
			}
		})
	}
}
