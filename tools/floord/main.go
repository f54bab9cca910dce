// Command floord is the least a daemon can do for one exec the way the
// shared ruler drives agentd's run route (`--agentd-wait run`): read the
// start request, fork and exec, read the child's stdout to EOF, wait4, and
// answer POST /v1/exec/run with the whole stream in one write: the output
// and the exit event, as binary frames or SSE as the Accept header asks. It
// also answers the run hook and /v1/health the way the ruler's bootstrap
// needs. No auth, no limits, no replay window, no registry, no logging.
//
// For the ruler's stream_throughput row (--stream-binary) it also answers
// start, stdin, stream and ack the least way: start forks the child onto a
// pipe and files it under its exec id; GET /v1/exec/{id}/stream copies the
// pipe straight into binary frames on the response, one frame per read, then
// reaps the child and sends the exit frame; ack forgets the exec. The stream
// can be read once, from offset 0 only; there is no ring buffer.
//
// For the file rows it answers PUT and GET /v1/fs/file the least way: the
// body read in 1 MiB pieces straight into the file at ?path=, and the file
// sent back with its length through sendfile.
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
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
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
	f := &floor{null: null.Fd(), output: os.Getenv("FLOORD_OUTPUT") != "0", splice: os.Getenv("FLOORD_STREAM") != "copy", execs: map[string]*execRec{}}
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
	// splice: the stream row's payload goes pipe to socket by splice(2)
	// (FLOORD_STREAM unset or "splice"); FLOORD_STREAM=copy reads it into
	// this process and writes it through net/http, as before.
	splice bool

	mu    sync.Mutex
	execs map[string]*execRec // started by POST /v1/exec/start, until ack
}

// execRec is one started exec: its pid, the read end of its stdout pipe and,
// when stdin was asked for, the write end of its stdin pipe.
type execRec struct {
	pid    int
	stdout *os.File
	stdin  *os.File
	reaped bool // the stream waited for it
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
	m.HandleFunc("POST /v1/exec/start", f.start)
	m.HandleFunc("POST /v1/exec/{id}/stdin", f.stdin)
	m.HandleFunc("GET /v1/exec/{id}/stream", f.stream)
	m.HandleFunc("POST /v1/exec/{id}/ack", f.ack)
	m.HandleFunc("PUT /v1/fs/file", putFile)
	m.HandleFunc("GET /v1/fs/file", getFile)
	return m
}

// putFile writes the body straight to ?path= (created or truncated in place:
// no temporary name, rename, disk guard or fsync), reading it in 1 MiB
// pieces as agentd does, which on this machine beat splice(2) socket to file.
func putFile(w http.ResponseWriter, r *http.Request) {
	out, err := os.Create(r.URL.Query().Get("path"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	buf := make([]byte, 1<<20)
	_, err = io.CopyBuffer(struct{ io.Writer }{out}, struct{ io.Reader }{r.Body}, buf)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getFile sends ?path= with its length, so net/http hands the copy to
// sendfile(2).
func getFile(w http.ResponseWriter, r *http.Request) {
	in, err := os.Open(r.URL.Query().Get("path"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	_, _ = io.Copy(w, in)
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
	pid, rd, _, err := f.spawn(argv, f.output, false)
	if err != nil {
		return nil, 0, err
	}
	var out []byte
	if rd != nil {
		out, _ = io.ReadAll(rd)
		_ = rd.Close()
	}
	return out, reap(pid), nil
}

// spawn forks and execs argv in its own process group. With pipeOut its
// stdout is a pipe whose read end it returns, else /dev/null; with pipeIn
// likewise its stdin, returning the write end. Stderr is /dev/null.
func (f *floor) spawn(argv []string, pipeOut, pipeIn bool) (pid int, out, in *os.File, err error) {
	files := []uintptr{f.null, f.null, f.null}
	var childEnds []*os.File
	defer func() {
		// The child's ends' last copies are the child's from here on.
		for _, c := range childEnds {
			_ = c.Close()
		}
		if err != nil {
			for _, p := range []*os.File{out, in} {
				if p != nil {
					_ = p.Close()
				}
			}
			out, in = nil, nil
		}
	}()
	if pipeIn {
		var rd *os.File
		if rd, in, err = os.Pipe(); err != nil {
			return 0, nil, nil, err
		}
		childEnds = append(childEnds, rd)
		files[0] = rd.Fd()
	}
	if pipeOut {
		var wr *os.File
		if out, wr, err = os.Pipe(); err != nil {
			return 0, nil, nil, err
		}
		childEnds = append(childEnds, wr)
		files[1] = wr.Fd()
	}
	pid, err = syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	return pid, out, in, err
}

// reap waits for pid and returns its exit status.
func reap(pid int) int {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	return ws.ExitStatus()
}

// start forks the child onto a stdout pipe (and a stdin pipe when asked)
// and files it under its exec id. Env and cwd are ignored, as run does.
func (f *floor) start(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ExecID  string   `json:"exec_id"`
		Command []string `json:"command"`
		Stdin   bool     `json:"stdin"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Command) == 0 || req.ExecID == "" {
		http.Error(w, "bad start request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	_, dup := f.execs[req.ExecID]
	f.mu.Unlock()
	if dup {
		http.Error(w, "exec id in use", http.StatusConflict)
		return
	}
	pid, out, in, err := f.spawn(req.Command, true, req.Stdin)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.execs[req.ExecID] = &execRec{pid: pid, stdout: out, stdin: in}
	f.mu.Unlock()
	reply, _ := json.Marshal(map[string]string{"exec_id": req.ExecID, "phase": "running"})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(reply)
}

func (f *floor) lookup(w http.ResponseWriter, r *http.Request) *execRec {
	f.mu.Lock()
	e := f.execs[r.PathValue("id")]
	f.mu.Unlock()
	if e == nil {
		http.Error(w, "no such exec", http.StatusNotFound)
	}
	return e
}

// stdin writes data_b64 to the child's stdin and closes it on signal "eof".
func (f *floor) stdin(w http.ResponseWriter, r *http.Request) {
	e := f.lookup(w, r)
	if e == nil {
		return
	}
	var req struct {
		Data   []byte `json:"data_b64"` // encoding/json decodes base64 into []byte
		Signal string `json:"signal"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad stdin request", http.StatusBadRequest)
		return
	}
	if e.stdin == nil {
		http.Error(w, "exec has no stdin", http.StatusConflict)
		return
	}
	if _, err := e.stdin.Write(req.Data); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if req.Signal == "eof" {
		_ = e.stdin.Close()
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, "{}")
}

// streamRead is the size of one read of the child's pipe, and so the most
// one stdout frame carries.
const streamRead = 256 << 10

// stream copies the child's stdout pipe into binary frames on the response,
// one frame per read, then reaps the child and sends the exit frame. Once,
// from offset 0, frames only.
func (f *floor) stream(w http.ResponseWriter, r *http.Request) {
	e := f.lookup(w, r)
	if e == nil {
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), framesMediaType) {
		http.Error(w, "floord streams binary frames only", http.StatusNotAcceptable)
		return
	}
	if q := r.URL.Query().Get("offset"); q != "" && q != "0" {
		http.Error(w, "floord streams from offset 0 only", http.StatusRequestedRangeNotSatisfiable)
		return
	}
	f.mu.Lock()
	rd := e.stdout
	e.stdout = nil
	f.mu.Unlock()
	if rd == nil {
		http.Error(w, "stream already read", http.StatusConflict)
		return
	}
	defer rd.Close()
	if f.splice {
		f.spliceStream(w, e, rd)
		return
	}
	w.Header().Set("Content-Type", framesMediaType)
	w.WriteHeader(http.StatusOK)
	// The headers go out now: the ruler releases a gated child only once
	// they are in.
	_ = http.NewResponseController(w).Flush()
	buf := make([]byte, frameHeader+streamRead)
	var off uint64
	for {
		n, err := rd.Read(buf[frameHeader:])
		if n > 0 {
			putHeader(buf, frameStdout, off, n)
			if _, werr := w.Write(buf[:frameHeader+n]); werr != nil {
				return // the client went away; ack reaps the child
			}
			off += uint64(n)
		}
		if err != nil {
			break
		}
	}
	_, _ = w.Write(f.exitFrame(e, off))
}

// exitFrame reaps the child and encodes the exit frame at off.
func (f *floor) exitFrame(e *execRec, off uint64) []byte {
	code := reap(e.pid)
	f.mu.Lock()
	e.reaped = true
	f.mu.Unlock()
	exit := `{"exit_code":` + strconv.Itoa(code) + `,"offset":` + strconv.FormatUint(off, 10) + `}`
	return appendFrame(nil, frameExit, off, []byte(exit))
}

// splicePipeBytes is the child's stdout pipe while it is spliced: 1 MiB,
// so one header covers up to 1 MiB of payload.
const splicePipeBytes = 1 << 20

// spliceStream is the least a daemon can do for the stream row at all:
// the connection is taken from net/http (no chunked encoding; the body
// ends when the connection closes), and each frame is a 13-byte header
// for what the pipe holds (FIONREAD) followed by splice(2) of exactly
// those bytes from the pipe to the socket, so the payload is never copied
// through this process. No ring, no replay, no second reader.
func (f *floor) spliceStream(w http.ResponseWriter, e *execRec, rd *os.File) {
	conn, bw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: " + framesMediaType + "\r\nConnection: close\r\n\r\n")
	if bw.Flush() != nil {
		return
	}
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return
	}
	sock, err := tcp.File() // a blocking duplicate: this goroutine owns it
	if err != nil {
		return
	}
	defer sock.Close()
	sfd, pfd := int(sock.Fd()), int(rd.Fd()) // Fd() leaves both blocking
	_, _ = unix.FcntlInt(uintptr(pfd), unix.F_SETPIPE_SZ, splicePipeBytes)
	var off uint64
	hdr := make([]byte, frameHeader)
	for {
		fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		n, err := unix.IoctlGetInt(pfd, unix.TIOCINQ) // TIOCINQ is FIONREAD
		if err != nil {
			return
		}
		if n == 0 { // readable and empty: the writer closed it
			break
		}
		putHeader(hdr, frameStdout, off, n)
		if _, err := unix.SendmsgN(sfd, hdr, nil, nil, unix.MSG_MORE); err != nil {
			return
		}
		for left := n; left > 0; {
			m, err := unix.Splice(pfd, nil, sfd, nil, left, unix.SPLICE_F_MOVE|unix.SPLICE_F_MORE)
			if err != nil {
				if err == unix.EINTR {
					continue
				}
				return
			}
			left -= int(m)
		}
		off += uint64(n)
	}
	_, _ = unix.Write(sfd, f.exitFrame(e, off))
}

// ack forgets the exec, killing and reaping a child the stream did not.
func (f *floor) ack(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f.mu.Lock()
	e := f.execs[id]
	delete(f.execs, id)
	var rec execRec
	if e != nil {
		rec = *e
	}
	f.mu.Unlock()
	if e == nil {
		http.Error(w, "no such exec", http.StatusNotFound)
		return
	}
	for _, p := range []*os.File{rec.stdout, rec.stdin} {
		if p != nil {
			_ = p.Close()
		}
	}
	if !rec.reaped {
		_ = syscall.Kill(-rec.pid, syscall.SIGKILL)
		reap(rec.pid)
	}
	reply, _ := json.Marshal(map[string]string{"exec_id": id, "phase": "exited"})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(reply)
}

func putHeader(b []byte, typ byte, off uint64, n int) {
	b[0] = typ
	binary.BigEndian.PutUint64(b[1:9], off)
	binary.BigEndian.PutUint32(b[9:13], uint32(n))
}

func appendFrame(b []byte, typ byte, off uint64, payload []byte) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}
