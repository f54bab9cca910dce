package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/internal/testbin"
)

// TestEngineRefusesBeforeAnySandbox drives `microvm engine` in-process with
// requests that must be refused locally, each answered by its own id with a
// failure envelope carrying the generated code and exit code, then ends it by
// closing stdin. The lifecycle itself is exercised end to end by the Python
// and TypeScript packages' tests (make test-clients).
func TestEngineRefusesBeforeAnySandbox(t *testing.T) {
	in := strings.Join([]string{
		`{"id":1,"op":"run","args":{"command":["true"]}}`,
		`{"id":2,"op":"create","args":{"local":true,"bogus":1}}`,
		`{"id":3,"op":"create","args":{"local":true,"image":"x"}}`,
		`{"id":4,"op":"create","args":{"region":"mars-north-1"}}`,
		`{"id":5,"op":"bogus"}`,
		``,
	}, "\n")
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"engine"}, strings.NewReader(in), &out, &errOut)
	if code != 0 {
		t.Fatalf("engine exited %d; stderr: %s", code, errOut.String())
	}
	got := map[int64]map[string]any{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r struct {
			ID       int64          `json:"id"`
			Envelope map[string]any `json:"envelope"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a reply frame is not JSON: %q", sc.Text())
		}
		got[r.ID] = r.Envelope
	}
	// Catches: an engine that answers a request twice, drops one, or mixes ids.
	if len(got) != 5 {
		t.Fatalf("want one envelope for each of 5 requests, got %v", got)
	}
	for id, want := range map[int64]string{1: "send create or attach first", 2: "bogus", 3: "local mode", 4: "mars-north-1", 5: `unknown op "bogus"`} {
		env := got[id]
		// Catches: a refusal reported as success, or an exit code that is
		// not the InvalidArg row of the generated table.
		if env["status"] != "error" || env["code"] != "ERR_INVALID_ARG" || env["exitCode"] != float64(2) {
			t.Errorf("request %d: want an ERR_INVALID_ARG failure with exit 2, got %v", id, env)
		}
		if msg, _ := env["error"].(string); !strings.Contains(msg, want) {
			t.Errorf("request %d: the message %q does not name %q", id, msg, want)
		}
	}
}

// TestEngineLaunchPolicyRefusals drives create's launch policy and the
// handle ops before a sandbox: each refusal names its finding (a launch
// value the service refuses is refused before any emulator starts), and
// cancel of a request that is not in flight is an answer, not a failure.
func TestEngineLaunchPolicyRefusals(t *testing.T) {
	in := strings.Join([]string{
		`{"id":1,"op":"create","args":{"local":true,"maxDurationSec":28801}}`,
		`{"id":2,"op":"create","args":{"local":true,"maxIdleSec":10}}`,
		`{"id":3,"op":"create","args":{"local":true,"launchEnv":["NOEQUALS"]}}`,
		`{"id":4,"op":"start","args":{"command":["true"]}}`,
		`{"id":5,"op":"cancel","args":{"requestId":99}}`,
		``,
	}, "\n")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"engine"}, strings.NewReader(in), &out, &errOut); code != 0 {
		t.Fatalf("engine exited %d; stderr: %s", code, errOut.String())
	}
	got := map[int64]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r struct {
			ID       int64           `json:"id"`
			Envelope json.RawMessage `json:"envelope"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a reply frame is not JSON: %q", sc.Text())
		}
		got[r.ID] = string(r.Envelope)
	}
	// Catches: launch values passed to the service unchecked (or dropped),
	// a refusal without its finding, and cancel failing on a finished request.
	for id, want := range map[int64][]string{
		1: {`"code":"ERR_INVALID_ARG"`, "maxDurationSec 28801", "max-duration"},
		2: {`"code":"ERR_INVALID_ARG"`, "maxIdleSec 10", "idle-policy"},
		3: {`"code":"ERR_INVALID_ARG"`, "NOEQUALS"},
		4: {`"code":"ERR_INVALID_ARG"`, "send create or attach first"},
		5: {`"status":"ok"`, `"done":false`},
	} {
		for _, w := range want {
			if !strings.Contains(got[id], w) {
				t.Errorf("request %d: %s does not contain %s", id, got[id], w)
			}
		}
	}
}

// engineConn drives an in-process `microvm engine` one request at a time.
type engineConn struct {
	t       *testing.T
	in      *io.PipeWriter
	mu      sync.Mutex
	replies map[int64]chan json.RawMessage
	done    chan int
}

func startEngine(t *testing.T) *engineConn {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &engineConn{t: t, in: inW, replies: map[int64]chan json.RawMessage{}, done: make(chan int, 1)}
	var errOut bytes.Buffer
	go func() {
		code := run(context.Background(), []string{"engine"}, inR, outW, &errOut)
		outW.Close()
		c.done <- code
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var r struct {
				ID       int64           `json:"id"`
				Envelope json.RawMessage `json:"envelope"`
			}
			if json.Unmarshal(sc.Bytes(), &r) != nil || r.Envelope == nil {
				continue
			}
			c.reply(r.ID) <- r.Envelope
		}
	}()
	return c
}

func (c *engineConn) reply(id int64) chan json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.replies[id] == nil {
		c.replies[id] = make(chan json.RawMessage, 1)
	}
	return c.replies[id]
}

// send writes one request line; wait takes its envelope.
func (c *engineConn) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

func (c *engineConn) wait(id int64) string {
	c.t.Helper()
	select {
	case env := <-c.reply(id):
		return string(env)
	case <-time.After(2 * time.Minute): // bounded: a hung engine fails, not hangs
		c.t.Fatalf("no answer to request %d", id)
		return ""
	}
}

func (c *engineConn) call(id int64, line string) string {
	c.t.Helper()
	c.send(line)
	return c.wait(id)
}

// TestEngineHandles drives one engine serving two local sandboxes under
// handles: each is its own (its own MicroVM, runs at once with the other),
// release ends one and leaves the other, a released handle is refused, not
// a fresh sandbox, a request without a handle keeps its meaning, and the end
// of stdin tears down what is left.
func TestEngineHandles(t *testing.T) {
	agentd, err := testbin.Build("cmd/agentd", testbin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := startEngine(t)
	ok := func(env string) {
		t.Helper()
		if !strings.Contains(env, `"status":"ok"`) {
			t.Fatalf("want success, got %s", env)
		}
	}
	ok(c.call(1, `{"id":1,"op":"create","sandbox":"a","args":{"local":true,"agentd":"`+agentd+`"}}`))
	ok(c.call(2, `{"id":2,"op":"create","sandbox":"b","args":{"local":true,"agentd":"`+agentd+`"}}`))
	idA := c.call(3, `{"id":3,"op":"info","sandbox":"a","args":{}}`)
	idB := c.call(4, `{"id":4,"op":"info","sandbox":"b","args":{}}`)
	if idA == idB {
		// Catches: handles that all address one sandbox.
		t.Fatalf("handles a and b answer the same sandbox: %s", idA)
	}
	// Catches: a second create refused as if the engine held one sandbox.
	ok(idB)
	// a runs a command that waits for /tmp/go (bounded); b's run must answer
	// meanwhile. Catches: one lock across handles serializing their ops.
	c.send(`{"id":5,"op":"run","sandbox":"a","args":{"shell":true,"command":["for i in $(seq 1200); do [ -f /tmp/go ] && { echo released; exit 0; }; sleep 0.05; done; echo expired"]}}`)
	if env := c.call(6, `{"id":6,"op":"run","sandbox":"b","args":{"command":["echo","b"]}}`); !strings.Contains(env, `"stdout":"b\n"`) {
		t.Fatalf("b's run: %s", env)
	}
	ok(c.call(7, `{"id":7,"op":"write","sandbox":"a","args":{"path":"/tmp/go","dataBase64":""}}`))
	if env := c.wait(5); !strings.Contains(env, `"stdout":"released\n"`) {
		t.Fatalf("a's gated run did not run beside b's: %s", env)
	}
	// The default sandbox (no handle) is still unbound: a request without a
	// handle keeps today's meaning.
	if env := c.call(8, `{"id":8,"op":"run","args":{"command":["true"]}}`); !strings.Contains(env, "send create or attach first") {
		t.Fatalf("no-handle run: %s", env)
	}
	guests := guestInitsOf(os.Getpid())
	if len(guests) < 2 {
		t.Fatalf("want the two guests under this process, got %v", guests)
	}
	if env := c.call(9, `{"id":9,"op":"release","sandbox":"a","args":{}}`); !strings.Contains(env, `"terminated":true`) {
		t.Fatalf("release: %s", env)
	}
	if env := c.call(10, `{"id":10,"op":"run","sandbox":"a","args":{"command":["true"]}}`); !strings.Contains(env, "released") {
		t.Fatalf("a released handle must be refused naming it: %s", env)
	}
	if env := c.call(11, `{"id":11,"op":"run","sandbox":"b","args":{"command":["echo","still"]}}`); !strings.Contains(env, `"stdout":"still\n"`) {
		t.Fatalf("b after a's release: %s", env)
	}
	for id, line := range map[int64]string{
		12: `{"id":12,"op":"release","args":{}}`,
		13: `{"id":13,"op":"release","sandbox":"nope","args":{}}`,
		14: `{"id":14,"op":"create","sandbox":"` + strings.Repeat("x", 129) + `","args":{"local":true}}`,
	} {
		if env := c.call(id, line); !strings.Contains(env, `"code":"ERR_INVALID_ARG"`) {
			t.Errorf("request %d: want ERR_INVALID_ARG, got %s", id, env)
		}
	}
	c.in.Close()
	select {
	case code := <-c.done:
		if code != 0 {
			t.Fatalf("engine exited %d", code)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the engine did not end with its stdin")
	}
	// Catches: an end of stdin that tears down only the default sandbox.
	for _, g := range guests {
		if processAlive(g) {
			t.Errorf("guest %d outlived the engine", g)
		}
	}
}

// guestInitsOf is the emulator guest init processes whose parent is pid.
func guestInitsOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err1 := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		stat, err2 := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err1 != nil || err2 != nil {
			continue
		}
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat)[i+1:])
		if len(f) > 1 && argv0 == "microvms-emulator-guest-init" && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// processAlive: pid is a process that is not a zombie.
func processAlive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat)[i+1:])
	return len(f) > 0 && f[0] != "Z"
}

// TestEngineReadMaxBytes reads one 100-byte guest file through each of the
// read op's modes under maxBytes: at the file's size it is read whole, one
// under it fails ERR_INVALID_ARG naming maxBytes with nothing past the bound handed
// over (the sink holds no byte, the localPath is never written), and a
// negative bound is refused.
func TestEngineReadMaxBytes(t *testing.T) {
	agentd, err := testbin.Build("cmd/agentd", testbin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := startEngine(t)
	t.Cleanup(func() { c.in.Close() })
	if env := c.call(1, `{"id":1,"op":"create","sandbox":"r","args":{"local":true,"agentd":"`+agentd+`"}}`); !strings.Contains(env, `"status":"ok"`) {
		t.Fatalf("create: %s", env)
	}
	if env := c.call(2, `{"id":2,"op":"run","sandbox":"r","args":{"shell":true,"command":["head -c 100 /dev/zero | tr '\\0' x > /tmp/f"]}}`); !strings.Contains(env, `"exitCode":0`) {
		t.Fatalf("making the file: %s", env)
	}
	dir := t.TempDir()
	sink, local := filepath.Join(dir, "sink"), filepath.Join(dir, "local")
	if err := os.WriteFile(sink, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	id := int64(10)
	read := func(args string) string {
		t.Helper()
		id++
		return c.call(id, fmt.Sprintf(`{"id":%d,"op":"read","sandbox":"r","args":{"path":"/tmp/f",%s}}`, id, args))
	}
	// Catches: maxBytes ignored in any one mode (each would answer ok), or
	// compared with >= (the file at exactly its bound refused).
	for _, mode := range []string{`"maxBytes":100`, `"maxBytes":100,"localPath":"` + local + `"`, `"maxBytes":100,"sink":"` + sink + `"`} {
		if env := read(mode); !strings.Contains(env, `"bytes":100`) {
			t.Errorf("%s: want the whole file, got %s", mode, env)
		}
	}
	if err := os.Remove(local); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sink, 0); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{`"maxBytes":99`, `"maxBytes":99,"localPath":"` + local + `"`, `"maxBytes":99,"sink":"` + sink + `"`} {
		if env := read(mode); !strings.Contains(env, `"code":"ERR_INVALID_ARG"`) || !strings.Contains(env, "maxBytes") {
			t.Errorf("%s: want ERR_INVALID_ARG naming maxBytes, got %s", mode, env)
		}
	}
	if fi, err := os.Stat(sink); err != nil || fi.Size() != 0 {
		t.Errorf("the sink holds bytes of a read past its bound: %v %v", fi, err)
	}
	if _, err := os.Stat(local); !os.IsNotExist(err) {
		t.Errorf("a read past its bound left %s: %v", local, err)
	}
	if env := read(`"maxBytes":-1`); !strings.Contains(env, `"code":"ERR_INVALID_ARG"`) {
		t.Errorf("a negative maxBytes: %s", env)
	}
}
