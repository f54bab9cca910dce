package agentd

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
)

// The SPEC §6 rows not covered by bench_test.go. Each baseline runs in the
// same benchmark, interleaved with the measured work, so background load on
// the machine falls on both alike; the ratio is the reported metric.

const (
	concClients     = 50
	concExecsEach   = 5
	transferBytes   = 256 << 20
	benchHTTPIdle   = 64
	transferBufSize = 1 << 20
)

func benchHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchHTTPIdle, DisableCompression: true}}
}

// roundTrip is one client's short exec: start /bin/true, follow the stream to
// its exit event, poll the exited outcome — what BenchmarkExecRoundTrip does.
func roundTrip(ctx context.Context, c *protocol.ClientWithResponses, token, id string) error {
	resp, err := c.ExecStartWithResponse(ctx, protocol.StartRequest{ExecID: id, Command: []string{"/bin/true"}}, auth(token))
	if err != nil {
		return err
	}
	if resp.StatusCode() != 200 {
		return &benchError{"start " + id + ": " + strconv.Itoa(resp.StatusCode())}
	}
	stream, err := c.ExecStream(ctx, id, nil, auth(token))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stream.Body)
	stream.Body.Close()
	p, err := c.ExecPollWithResponse(ctx, id, auth(token))
	if err != nil {
		return err
	}
	if p.JSON200 == nil || p.JSON200.Phase != protocol.PhaseExited {
		return &benchError{"poll " + id + ": not exited after the exit event"}
	}
	return nil
}

type benchError struct{ s string }

func (e *benchError) Error() string { return e.s }

// fanOut runs each of clients goroutines through n calls of one, and returns
// the wall time of the whole batch and the first error.
func fanOut(clients, n int, one func(client, k int) error) (time.Duration, error) {
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	t0 := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range n {
				if err := one(c, k); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return time.Since(t0), *e
	}
	return time.Since(t0), nil
}

// concurrentExecs is the 50 clients × 5 short execs workload against base.
func concurrentExecs(ctx context.Context, c *protocol.ClientWithResponses, token, prefix string) (time.Duration, error) {
	return fanOut(concClients, concExecsEach, func(cl, k int) error {
		return roundTrip(ctx, c, token, prefix+"-"+strconv.Itoa(cl)+"-"+strconv.Itoa(k))
	})
}

// bareExecs is the baseline: the same 250 runs of /bin/true with the same
// concurrency, through os/exec.
func bareExecs() (time.Duration, error) {
	return fanOut(concClients, concExecsEach, func(int, int) error { return exec.Command("/bin/true").Run() })
}

// BenchmarkExecConcurrent measures the wall time of 50 clients each running
// 5 short execs (start → exit event → poll) through agentd, against bare
// os/exec doing the same 250 runs with the same concurrency (x-os/exec; the
// target is ≤ 1.3).
func BenchmarkExecConcurrent(b *testing.B) {
	d := startDaemon(b, func(c *Config) { c.ExecTTL = time.Second })
	d.bootstrap(nil)
	c, err := protocol.NewClientWithResponses(d.base, protocol.WithHTTPClient(benchHTTPClient()))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// Warm both: connections, the daemon's pools, the page cache.
	if _, err := concurrentExecs(ctx, c, testToken, "warm"); err != nil {
		b.Fatal(err)
	}
	if _, err := bareExecs(); err != nil {
		b.Fatal(err)
	}
	var baseline, measured time.Duration
	for i := range b.N {
		base, err := bareExecs()
		if err != nil {
			b.Fatal(err)
		}
		got, err := concurrentExecs(ctx, c, testToken, "c"+strconv.Itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		baseline += base
		measured += got
	}
	b.ReportMetric(float64(measured.Nanoseconds())/float64(b.N), "agentd-ns/batch")
	b.ReportMetric(float64(baseline.Nanoseconds())/float64(b.N), "os/exec-ns/batch")
	b.ReportMetric(float64(measured)/float64(baseline), "x-os/exec")
}

// writeBenchFile makes a file of n bytes of incompressible-looking content
// (a repeated 1 MiB random block: no filesystem will dedupe or skip it).
func writeBenchFile(b *testing.B, path string, n int) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i*7919>>3 ^ i>>11)
	}
	for written := 0; written < n; written += len(block) {
		if _, err := f.Write(block[:min(len(block), n-written)]); err != nil {
			b.Fatal(err)
		}
	}
}

// settle writes back every dirty page before a timed transfer, so neither
// side pays for the previous one's writeback.
func settle() { syscall.Sync() }

// localCopy is the baseline: io.Copy between two files (copy_file_range on
// Linux), optionally followed by fsync, which the daemon's upload does before
// it answers.
func localCopy(src, dst string, sync bool) (time.Duration, error) {
	t0 := time.Now()
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return 0, err
	}
	if sync {
		if err := out.Sync(); err != nil {
			out.Close()
			return 0, err
		}
	}
	if err := out.Close(); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// upload sends src to the daemon's path through the client package.
func upload(ctx context.Context, s *client.Session, src, path string) (time.Duration, error) {
	t0 := time.Now()
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if err := s.WriteFile(ctx, path, in, 0); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// download fetches the daemon's path into dst through the client package.
func download(ctx context.Context, s *client.Session, path, dst string) (time.Duration, error) {
	t0 := time.Now()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	n, err := s.ReadFile(ctx, path, out, client.LineRange{})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != transferBytes {
		err = &benchError{"download: " + strconv.FormatInt(n, 10) + " bytes"}
	}
	return time.Since(t0), err
}

// BenchmarkFileTransfer measures a 256 MiB upload (PUT /v1/fs/file) and
// download (GET /v1/fs/file) through the repo's client package against a
// local io.Copy between files in the same run (x-copy; targets ≥ 0.6 up and
// ≥ 0.7 down; a ratio here is throughput, baseline time / measured time).
// The upload is also reported against a copy that fsyncs (x-copy+fsync),
// since the daemon makes the file durable before it answers.
func BenchmarkFileTransfer(b *testing.B) {
	d := startDaemon(b, nil)
	d.bootstrap(nil)
	s, err := client.Direct(d.base, testToken, client.WithHTTPClient(benchHTTPClient()))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dir := b.TempDir()
	src := filepath.Join(dir, "src.bin")
	writeBenchFile(b, src, transferBytes)
	remote := filepath.Join(dir, "remote.bin")
	local := filepath.Join(dir, "local.bin")
	b.SetBytes(transferBytes)

	b.Run("upload", func(b *testing.B) {
		var base, baseSync, got time.Duration
		for range b.N {
			settle()
			t, err := localCopy(src, local, false)
			if err != nil {
				b.Fatal(err)
			}
			base += t
			settle()
			if t, err = localCopy(src, local, true); err != nil {
				b.Fatal(err)
			}
			baseSync += t
			settle()
			if t, err = upload(ctx, s, src, remote); err != nil {
				b.Fatal(err)
			}
			got += t
		}
		b.ReportMetric(float64(base)/float64(got), "x-copy")
		b.ReportMetric(float64(baseSync)/float64(got), "x-copy+fsync")
	})
	b.Run("download", func(b *testing.B) {
		if _, err := localCopy(src, remote, false); err != nil {
			b.Fatal(err)
		}
		var base, got time.Duration
		for range b.N {
			settle()
			t, err := localCopy(src, local, false)
			if err != nil {
				b.Fatal(err)
			}
			base += t
			settle()
			if t, err = download(ctx, s, remote, local); err != nil {
				b.Fatal(err)
			}
			got += t
		}
		b.ReportMetric(float64(base)/float64(got), "x-copy")
	})
}

// BenchmarkPeakRSS runs the real cmd/agentd binary as a subprocess and
// reports its VmHWM under each §6 workload (target ≤ 25 MiB): 50 clients × 5
// short execs, 256 MiB through the SSE stream (read with the client
// package), a 256 MiB upload and a 256 MiB download. Each workload gets a
// fresh daemon, so each figure is that workload's own peak; peak-MiB is the
// largest.
func BenchmarkPeakRSS(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src.bin")
	writeBenchFile(b, src, transferBytes)
	remote := filepath.Join(dir, "remote.bin")
	if _, err := localCopy(src, remote, false); err != nil {
		b.Fatal(err)
	}
	const token = "rss-token"
	// each runs one workload against a fresh daemon and returns its VmHWM.
	each := func(work func(ctx context.Context, c *protocol.ClientWithResponses, s *client.Session) error) float64 {
		p := startBinary(b)
		defer func() { _ = p.cmd.Process.Kill() }() // reaped by startBinary's cleanup
		ctx := context.Background()
		payload := `{"agent_token":"` + token + `"}`
		if r, _ := p.client.HookRunWithResponse(ctx, protocol.RunHookEnvelope{RunHookPayload: &payload}); r.StatusCode() != 200 {
			b.Fatal("bootstrap")
		}
		hc := benchHTTPClient()
		defer hc.CloseIdleConnections()
		c, err := protocol.NewClientWithResponses(p.base, protocol.WithHTTPClient(hc))
		if err != nil {
			b.Fatal(err)
		}
		s, err := client.Direct(p.base, token, client.WithHTTPClient(hc))
		if err != nil {
			b.Fatal(err)
		}
		if err := work(ctx, c, s); err != nil {
			b.Fatal(err)
		}
		return procStatusKiB(b, p.cmd.Process.Pid, "VmHWM") / 1024
	}

	var execs, stream, up, down float64
	for i := range b.N {
		tag := strconv.Itoa(i)
		execs = max(execs, each(func(ctx context.Context, c *protocol.ClientWithResponses, _ *client.Session) error {
			_, err := concurrentExecs(ctx, c, token, "rss"+tag)
			return err
		}))
		stream = max(stream, each(func(ctx context.Context, c *protocol.ClientWithResponses, s *client.Session) error {
			id := "rss-stream-" + tag
			script := "exec head -c " + strconv.Itoa(streamBenchBytes) + " /dev/zero"
			if r, err := c.ExecStartWithResponse(ctx, protocol.StartRequest{ExecID: id, Command: []string{"sh", "-c", script}}, auth(token)); err != nil || r.StatusCode() != 200 {
				return &benchError{"start the stream exec"}
			}
			st := s.Exec(id).Stream(ctx, 0)
			defer st.Close()
			var total int64
			for {
				ev, err := st.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				total += int64(len(ev.Data))
			}
			if total != streamBenchBytes {
				return &benchError{"stream: " + strconv.FormatInt(total, 10) + " bytes"}
			}
			return nil
		}))
		up = max(up, each(func(ctx context.Context, _ *protocol.ClientWithResponses, s *client.Session) error {
			_, err := upload(ctx, s, src, filepath.Join(dir, "up.bin"))
			return err
		}))
		down = max(down, each(func(ctx context.Context, _ *protocol.ClientWithResponses, s *client.Session) error {
			_, err := download(ctx, s, remote, filepath.Join(dir, "local.bin"))
			return err
		}))
	}
	b.ReportMetric(execs, "execs-MiB")
	b.ReportMetric(stream, "stream-MiB")
	b.ReportMetric(up, "upload-MiB")
	b.ReportMetric(down, "download-MiB")
	b.ReportMetric(max(execs, stream, up, down), "peak-MiB")
}
