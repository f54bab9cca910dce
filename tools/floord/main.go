// Command floord is the least a daemon can do for one exec the way the
// shared ruler drives agentd's run route (`--agentd-wait run`): read the
// start request, fork and exec, read the child's stdout to EOF, wait4, and
// answer POST /v1/exec/run with the whole stream in one write: the output
// and the exit event, as binary frames or SSE as the Accept header asks. It
// also answers the run hook and /v1/health the way the ruler's bootstrap
// needs. No auth, no limits, no replay window, no registry, no logging.
//
// It exists only to be measured beside agentd through the same ruler (as
// --agentd-bin), so that the exec rows can say "floor X, agentd Y": what it
// costs over os/exec is what one HTTP exchange and a pipe cost on this
// machine, which no daemon speaking the run route over net/http gets under.
//
// It must never be built into an image or listen beyond loopback: it runs
// any command for anyone who can reach it. It binds 127.0.0.1 only, and
// ignores every agentd setting but AGENTD_PORT.
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// framesMediaType and the frame types are protocol v1's binary frames
// (api/openapi.yaml x-frames); the tool keeps its own copy so it depends on
// nothing of the project.
const (
	framesMediaType = "application/vnd.microvms.frames"
	frameStdout     = 1
	frameExit       = 4
	frameHeader     = 13
)

func main() {
	port := os.Getenv("AGENTD_PORT")
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		fmt.Fprintln(os.Stderr, "floord: AGENTD_PORT must be a port number")
		os.Exit(2)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floord:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "floord:", err)
		os.Exit(1)
	}
	f := &floor{null: null.Fd(), output: os.Getenv("FLOORD_OUTPUT") != "0"}
	fmt.Fprintln(os.Stderr, "floord listening on", ln.Addr())
	if err := http.Serve(ln, f.routes()); err != nil {
		fmt.Fprintln(os.Stderr, "floord:", err)
		os.Exit(1)
	}
}

type floor struct {
	null uintptr
	// output: the child's stdout goes through a pipe and comes back as one
	// stdout frame (or event) before the exit, as agentd's does; without it
	// (FLOORD_OUTPUT=0) stdout is /dev/null, os/exec's own default.
	output bool
}

func (f *floor) routes() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST /aws/lambda-microvms/runtime/v1/run", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	m.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok","bootstrapped":true}`)
	})
	m.HandleFunc("POST /v1/exec/run", f.run)
	return m
}

// run is one exec in one exchange.
func (f *floor) run(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Command []string `json:"command"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Command) == 0 {
		http.Error(w, "bad run request", http.StatusBadRequest)
		return
	}
	out, code, err := f.exec(req.Command)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	exit := `{"exit_code":` + strconv.Itoa(code) + `,"offset":` + strconv.Itoa(len(out)) + `}`
	var body []byte
	h := w.Header()
	if strings.Contains(r.Header.Get("Accept"), framesMediaType) {
		h.Set("Content-Type", framesMediaType)
		if len(out) > 0 {
			body = appendFrame(body, frameStdout, 0, out)
		}
		body = appendFrame(body, frameExit, uint64(len(out)), []byte(exit))
	} else {
		h.Set("Content-Type", "text/event-stream")
		if len(out) > 0 {
			ev, _ := json.Marshal(map[string]any{"offset": 0, "stream": "stdout", "output": out})
			body = fmt.Appendf(body, "event: output\nid: %d\ndata: %s\n\n", len(out), ev)
		}
		body = fmt.Appendf(body, "event: exit\nid: %d\ndata: %s\n\n", len(out), exit)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// exec forks and execs argv in its own process group, with stdin on
// /dev/null, reads its stdout to EOF when output is on, and reaps it.
func (f *floor) exec(argv []string) ([]byte, int, error) {
	stdout := f.null
	var rd, wr *os.File
	if f.output {
		var err error
		if rd, wr, err = os.Pipe(); err != nil {
			return nil, 0, err
		}
		defer rd.Close()
		stdout = wr.Fd()
	}
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{f.null, stdout, f.null},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if wr != nil {
		// The write end's last copy is the child's from here on.
		_ = wr.Close()
	}
	if err != nil {
		return nil, 0, err
	}
	var out []byte
	if rd != nil {
		out, _ = io.ReadAll(rd)
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	return out, ws.ExitStatus(), nil
}

func appendFrame(b []byte, typ byte, off uint64, payload []byte) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}
