package agentd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// floorServer is the least a net/http daemon can do for one exec the way the
// shared ruler drives it (start, follow the stream to its exit event, ack):
// fork and exec in the start handler, block in wait4 for the exit, answer
// the three requests with fixed bodies. No auth, no output, no limits, no
// logging. It exists only to be measured beside agentd: what it costs over
// os/exec is what three sequential HTTP exchanges on this machine cost,
// which no daemon speaking protocol v1 over net/http gets under.
type floorServer struct {
	mu    sync.Mutex
	execs map[string]chan int
	null  *os.File
}

func (f *floorServer) routes() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/exec/start", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ExecID  string   `json:"exec_id"`
			Command []string `json:"command"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Command) == 0 {
			http.Error(w, "bad start", http.StatusBadRequest)
			return
		}
		fd := f.null.Fd()
		pid, err := syscall.ForkExec(req.Command[0], req.Command, &syscall.ProcAttr{
			Files: []uintptr{fd, fd, fd}, Sys: &syscall.SysProcAttr{Setpgid: true}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		done := make(chan int, 1)
		f.mu.Lock()
		f.execs[req.ExecID] = done
		f.mu.Unlock()
		go func() {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
			done <- ws.ExitStatus()
		}()
		fmt.Fprintf(w, `{"exec_id":%q,"phase":"running"}`, req.ExecID)
	})
	m.HandleFunc("GET /v1/exec/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		done := f.execs[r.PathValue("id")]
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		code := <-done
		done <- code
		fmt.Fprintf(w, "event: exit\ndata: {\"exit_code\":%d,\"offset\":0}\n\n", code)
	})
	m.HandleFunc("POST /v1/exec/{id}/ack", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		done := f.execs[r.PathValue("id")]
		delete(f.execs, r.PathValue("id"))
		f.mu.Unlock()
		fmt.Fprintf(w, `{"exec_id":%q,"phase":"acked","exit_code":%d,"stdout":"","stderr":""}`, r.PathValue("id"), <-done)
	})
	// The file routes as the ruler drives them: a raw body gathered 1 MiB
	// per write into the named file (no temp file, no fsync), and a plain
	// GET served with io.Copy, which net/http turns into sendfile.
	m.HandleFunc("PUT /v1/fs/file", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Create(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		buf := make([]byte, 1<<20)
		for {
			n, err := io.ReadFull(r.Body, buf)
			if n > 0 {
				if _, werr := f.Write(buf[:n]); werr != nil {
					http.Error(w, werr.Error(), http.StatusInternalServerError)
					return
				}
			}
			if err != nil {
				break
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("GET /v1/fs/file", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		defer f.Close()
		st, _ := f.Stat()
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		_, _ = io.Copy(w, f)
	})
	return m
}

// rulerUpload and rulerDownload move a file the way the ruler's agentd
// adapter does: the upload body is the open file with its size (sendfile on
// this side), the download is written as each read returns.
func rulerUpload(b *testing.B, hc *http.Client, base, token, src, dst string) {
	f, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	req, _ := http.NewRequest("PUT", base+"/v1/fs/file?path="+dst, f)
	req.ContentLength = st.Size()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b.Fatalf("upload: %d", resp.StatusCode)
	}
}

func rulerDownload(b *testing.B, hc *http.Client, base, token, src, dst string) {
	req, _ := http.NewRequest("GET", base+"/v1/fs/file?path="+src, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("download: %d", resp.StatusCode)
	}
	f, err := os.Create(dst)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := f.Write(buf[:n]); werr != nil {
				b.Fatal(werr)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// rulerExec is one exec as the shared ruler's agentd adapter runs it with
// --agentd-wait stream: start, read the stream to its exit event, ack.
func rulerExec(b *testing.B, hc *http.Client, base, token, id string) {
	do := func(method, path, body string) *http.Response {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body == "" {
			req.Body = nil
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
		return resp
	}
	resp := do("POST", "/v1/exec/start", `{"exec_id":"`+id+`","command":["/bin/true"]}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp = do("GET", "/v1/exec/"+id+"/stream?offset=0", "")
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			b.Fatalf("stream of %s ended without an exit event: %v", id, err)
		}
		if bytes.HasPrefix(line, []byte("event: exit")) {
			break
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp = do("POST", "/v1/exec/"+id+"/ack", "")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// BenchmarkExecRoundTripFloor runs /bin/true the ruler's way through agentd
// and through floorServer, beside os/exec, interleaved in one run. x-os/exec
// is agentd's ratio (the ruler's exec_rtt row), floor-x-os/exec the floor's,
// and x-floor what agentd costs over the floor. The same floor built as a
// daemon and driven by the shared ruler measured 1.67-1.83x os/exec on this
// 2-core machine (2026-12-01, four runs), and 1.29-1.39x on a later boot
// whose fork/exec was faster (five runs, agentd 1.45-1.56x beside it): the
// issue's 1.3x is at or below what a daemon serving the ruler's three
// sequential exchanges over net/http reaches; x-floor is the part agentd
// can still win back.
func BenchmarkExecRoundTripFloor(b *testing.B) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	floor := &floorServer{execs: map[string]chan int{}, null: null}
	benchBesideFloor(b, floor.routes(), rulerExec, "fl-")
}

// benchBesideFloor times one exec through agentd (exec), one through a floor
// server answering the same requests (floor), and /bin/true run by os/exec,
// in an order rotated every round as the ruler rotates its targets, and
// reports agentd and the floor against os/exec and agentd over the floor.
func benchBesideFloor(b *testing.B, floor http.Handler, exec1 func(b *testing.B, hc *http.Client, base, token, id string), tag string) {
	d := startDaemon(b, func(c *Config) { c.ExecTTL = time.Second })
	d.bootstrap(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	fs := &http.Server{Handler: floor}
	go func() { _ = fs.Serve(ln) }()
	defer fs.Close()
	floorBase := "http://" + ln.Addr().String()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}

	var base, agentdT, floorT time.Duration
	round := func(i int, tag string, timed bool) {
		steps := []func(){
			func() { _ = exec.Command("/bin/true").Run() },
			func() { exec1(b, hc, d.base, testToken, tag+"a-"+strconv.Itoa(i)) },
			func() { exec1(b, hc, floorBase, "", tag+"f-"+strconv.Itoa(i)) },
		}
		for k := range steps {
			j := (i + k) % len(steps)
			t0 := time.Now()
			steps[j]()
			if timed {
				switch dt := time.Since(t0); j {
				case 0:
					base += dt
				case 1:
					agentdT += dt
				case 2:
					floorT += dt
				}
			}
		}
	}
	for i := range 20 {
		round(i, "warm-", false) // warm both servers and the connection pool
	}
	b.ResetTimer()
	for i := range b.N {
		round(i, tag, true)
	}
	b.StopTimer()
	b.ReportMetric(float64(agentdT)/float64(base), "x-os/exec")
	b.ReportMetric(float64(floorT)/float64(base), "floor-x-os/exec")
	b.ReportMetric(float64(agentdT)/float64(floorT), "x-floor")
}

// BenchmarkFileTransferFloor moves 256 MiB up and down the ruler's way
// through agentd and through floorServer, beside a local file copy, in one
// run: x-copy is agentd's ratio (the ruler's file rows), floor-x-copy the
// floor's, x-floor agentd over the floor. The floor built as a daemon and
// driven by the ruler measured 0.32-0.36x up and 0.33-0.41x down on this
// machine while agentd measured 0.30-0.32x and 0.39-0.52x (2026-12-01, two
// interleaved pairs under load). On a later boot, whose local copy ran at
// 5.8-7.1 GB/s, the floor measured 0.23-0.25x up and 0.26-0.33x down and a
// bare loopback socket fed by sendfile moved 1.2-1.6 GiB/s (about 0.25x):
// the 0.6x and 0.7x are past what loopback HTTP into ext4 gives a
// net/http daemon here. agentd's upload over the floor was its fsync: with
// the fsync and writeback kicks off it measured 0.24-0.28x (2026-12-01).
// On a later boot (local copy 2.3-2.7 GB/s), with the fsync asked for only
// by ?sync=true, the ruler moved from 0.57-0.58x to 0.64-0.65x (two
// interleaved pairs). In-process the order of the three copies decides much
// (the ruler's prewarm ballast is what evens out guest page reuse); the
// ruler's figures are the ones that count.
func BenchmarkFileTransferFloor(b *testing.B) {
	d := startDaemon(b, nil)
	d.bootstrap(nil)
	floor := &floorServer{execs: map[string]chan int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	fsrv := &http.Server{Handler: floor.routes()}
	go func() { _ = fsrv.Serve(ln) }()
	defer fsrv.Close()
	floorBase := "http://" + ln.Addr().String()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	dir := b.TempDir()
	src := filepath.Join(dir, "src.bin")
	writeBenchFile(b, src, transferBytes)
	b.SetBytes(transferBytes)
	for _, dirn := range []string{"upload", "download"} {
		b.Run(dirn, func(b *testing.B) {
			remote := filepath.Join(dir, "remote.bin")
			if dirn == "download" {
				if _, err := localCopy(src, remote, false); err != nil {
					b.Fatal(err)
				}
			}
			var base, agentdT, floorT time.Duration
			for range b.N {
				settle()
				t, err := localCopy(src, filepath.Join(dir, "local.bin"), false)
				if err != nil {
					b.Fatal(err)
				}
				base += t
				for _, tgt := range []struct {
					base, token string
					sum         *time.Duration
				}{{d.base, testToken, &agentdT}, {floorBase, "", &floorT}} {
					if dirn == "upload" {
						// As the ruler does: each upload creates its file. Over
						// an existing one agentd's rename replaces it, which on
						// ext4 (auto_da_alloc) starts writeback of the new file:
						// 0.22x against 0.57x fresh on one boot.
						_ = os.Remove(remote)
					}
					settle()
					t0 := time.Now()
					if dirn == "upload" {
						rulerUpload(b, hc, tgt.base, tgt.token, src, remote)
					} else {
						rulerDownload(b, hc, tgt.base, tgt.token, remote, filepath.Join(dir, "down.bin"))
					}
					*tgt.sum += time.Since(t0)
				}
			}
			b.ReportMetric(float64(base)/float64(agentdT), "x-copy")
			b.ReportMetric(float64(base)/float64(floorT), "floor-x-copy")
			b.ReportMetric(float64(floorT)/float64(agentdT), "x-floor")
		})
	}
}

// rulerPolledExec is the ruler's exec with --agentd-wait poll: start, then
// GET /v1/exec/{id} with a backoff from 100 us doubling to 5 ms until the
// phase is exited, then ack.
func rulerPolledExec(b *testing.B, hc *http.Client, base, token, id string) (polls int) {
	do := func(method, path, body string) []byte {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body == "" {
			req.Body = nil
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}
	do("POST", "/v1/exec/start", `{"exec_id":"`+id+`","command":["/bin/true"]}`)
	delay := time.Duration(0)
	for {
		polls++
		var p struct {
			Phase string `json:"phase"`
		}
		if err := json.Unmarshal(do("GET", "/v1/exec/"+id, ""), &p); err != nil {
			b.Fatal(err)
		}
		if p.Phase == "exited" {
			break
		}
		if delay == 0 {
			delay = 100 * time.Microsecond
		} else if delay *= 2; delay > 5*time.Millisecond {
			delay = 5 * time.Millisecond
		}
		time.Sleep(delay)
	}
	do("POST", "/v1/exec/"+id+"/ack", "")
	return polls
}

// BenchmarkExecRoundTripPolled is the ruler's polled exec_rtt row through
// agentd beside os/exec, interleaved (x-os/exec; the target is
// 1.5x), with the polls each exec took. poll_hold_secs is what keeps that
// near one: the first poll waits for the exit instead of answering running
// and sending the client into its backoff (2.65-2.85x on the ruler before
// it, 1.82-1.83x after, 2026-12-01).
func BenchmarkExecRoundTripPolled(b *testing.B) {
	d := startDaemon(b, func(c *Config) { c.ExecTTL = time.Second })
	d.bootstrap(nil)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	for i := range 20 {
		rulerPolledExec(b, hc, d.base, testToken, "pw-"+strconv.Itoa(i))
		_ = exec.Command("/bin/true").Run()
	}
	var base, got time.Duration
	polls := 0
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		_ = exec.Command("/bin/true").Run()
		base += time.Since(t0)
		t0 = time.Now()
		polls += rulerPolledExec(b, hc, d.base, testToken, "p-"+strconv.Itoa(i))
		got += time.Since(t0)
	}
	b.StopTimer()
	b.ReportMetric(float64(got)/float64(base), "x-os/exec")
	b.ReportMetric(float64(polls)/float64(b.N), "polls/exec")
}
