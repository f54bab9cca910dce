package agentd

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/internal/frames"
)

// runFloor is the least a net/http daemon does for one exec on the run
// route: decode the start request, fork and exec with stdout on a pipe, read
// it to EOF, wait4, and answer the output and the exit frame in one write.
// tools/floord is the same floor as a daemon the shared ruler can drive.
func runFloor(null *os.File) http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/exec/run", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Command []string `json:"command"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Command) == 0 {
			http.Error(w, "bad run", http.StatusBadRequest)
			return
		}
		rd, wr, err := os.Pipe()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer rd.Close()
		pid, err := syscall.ForkExec(req.Command[0], req.Command, &syscall.ProcAttr{
			Files: []uintptr{null.Fd(), wr.Fd(), null.Fd()}, Sys: &syscall.SysProcAttr{Setpgid: true}})
		wr.Close()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, _ := io.ReadAll(rd)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		exit := `{"exit_code":` + strconv.Itoa(ws.ExitStatus()) + `,"offset":` + strconv.Itoa(len(out)) + `}`
		var body []byte
		if len(out) > 0 {
			body = frames.Append(body, protocol.FrameStdout, 0, out)
		}
		body = frames.Append(body, protocol.FrameExit, uint64(len(out)), []byte(exit))
		w.Header().Set("Content-Type", protocol.FramesMediaType)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
	return m
}

// runOnce is one POST /v1/exec/run of /bin/true read to its exit frame, as
// the shared ruler's --agentd-wait run drives it.
func runOnce(b *testing.B, hc *http.Client, base, token, id string) {
	raw, _ := json.Marshal(protocol.StartRequest{ExecID: id, Command: []string{"/bin/true"}})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/exec/run", bytes.NewReader(raw))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", protocol.FramesMediaType)
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("run %s: %v", id, err)
	}
	r := frames.NewReader(resp.Body, 4096)
	for {
		f, err := r.Next()
		if err != nil {
			b.Fatalf("run %s ended without its exit frame: %v", id, err)
		}
		if f.Type == protocol.FrameExit {
			if !bytes.Contains(f.Payload, []byte(`"exit_code":0`)) {
				b.Fatalf("run %s: exit %s", id, f.Payload)
			}
			break
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// BenchmarkExecRunFloor runs /bin/true through agentd's run route and
// through runFloor, beside os/exec, rotated and interleaved in one run:
// x-os/exec is agentd's ratio (the ruler's exec_rtt row with --agentd-wait
// run), floor-x-os/exec the floor's, x-floor what agentd costs over the
// floor, the part a daemon speaking the run route over net/http can still
// win back.
func BenchmarkExecRunFloor(b *testing.B) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	benchBesideFloor(b, runFloor(null), runOnce, "rf-")
}
