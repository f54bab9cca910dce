package agentd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// fastClient talks to a daemon without the contract transport, whose body
// buffering and validation would dominate what a benchmark measures.
func fastClient(b *testing.B, base string) *protocol.ClientWithResponses {
	b.Helper()
	c, err := protocol.NewClientWithResponses(base, protocol.WithHTTPClient(&http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true},
	}))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkExecRoundTrip measures start → exited poll of /bin/true through
// agentd over loopback HTTP, against a bare os/exec run of the same binary in
// the same benchmark (x-os/exec is the ratio; the target is ≤ 1.5).
func BenchmarkExecRoundTrip(b *testing.B) {
	d := startDaemon(b, func(c *Config) { c.ExecTTL = time.Second })
	d.bootstrap(nil)
	c := fastClient(b, d.base)
	ctx := context.Background()
	// The client waits for the exit the way a client that does not spin
	// should: it follows the stream to its exit event, then polls once for
	// the exited outcome. A busy poll loop would mostly measure two cores
	// fighting over a spinning client.
	run := func(i int) {
		id := "rt-" + strconv.Itoa(i)
		resp, err := c.ExecStartWithResponse(ctx, protocol.StartRequest{ExecID: id, Command: []string{"/bin/true"}}, auth(testToken))
		if err != nil || resp.StatusCode() != 200 {
			b.Fatalf("start: %v", err)
		}
		stream, err := c.ExecStream(ctx, id, nil, auth(testToken))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, stream.Body)
		stream.Body.Close()
		p, err := c.ExecPollWithResponse(ctx, id, auth(testToken))
		if err != nil || p.JSON200.Phase != protocol.PhaseExited {
			b.Fatalf("poll after the exit event: %v", err)
		}
	}
	run(-1) // warm the connection pool and the daemon
	for range 3 {
		_ = exec.Command("/bin/true").Run()
	}

	baseStart := time.Now()
	for range b.N {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	baseline := time.Since(baseStart)

	b.ResetTimer()
	for i := range b.N {
		run(i)
	}
	b.StopTimer()
	b.ReportMetric(float64(baseline.Nanoseconds())/float64(b.N), "os/exec-ns/op")
	b.ReportMetric(float64(b.Elapsed())/float64(baseline), "x-os/exec")
}

// sseDecoder reads output events with no per-event allocation, the way a
// client that keeps up should.
type sseDecoder struct {
	br  *bufio.Reader
	dec []byte
}

// run decodes until the exit event and returns the decoded byte count and
// whether any gap event arrived.
func (s *sseDecoder) run() (total int64, gap bool, err error) {
	event := ""
	marker := []byte(`"output":"`)
	for {
		line, err := s.br.ReadSlice('\n')
		if err != nil {
			return total, gap, err
		}
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			event = string(bytes.TrimSpace(line[7:]))
			if event == protocol.EventExit {
				return total, gap, nil
			}
			if event == protocol.EventGap {
				gap = true
			}
		case bytes.HasPrefix(line, []byte("data: ")) && event == protocol.EventOutput:
			i := bytes.Index(line, marker)
			if i < 0 {
				return total, gap, fmt.Errorf("output event without output: %.80s", line)
			}
			enc := line[i+len(marker):]
			enc = enc[:bytes.IndexByte(enc, '"')]
			if n := base64.StdEncoding.DecodedLen(len(enc)) + 8; n > len(s.dec) {
				s.dec = make([]byte, n)
			}
			n, err := decodeBase64(s.dec, enc)
			if err != nil {
				return total, gap, err
			}
			total += int64(n)
		}
	}
}

const streamBenchBytes = 256 << 20

// BenchmarkStreamThroughput measures 256 MiB of child stdout through the SSE
// stream, decoded, against reading the same child's stdout from a raw pipe in
// the same run (x-raw-pipe is throughput as a fraction of the pipe's; the
// target is ≥ 0.4 with zero bytes lost to gap).
func BenchmarkStreamThroughput(b *testing.B) {
	d := startDaemon(b, nil)
	d.bootstrap(nil)
	c := fastClient(b, d.base)
	ctx := context.Background()
	script := "exec head -c " + strconv.Itoa(streamBenchBytes) + " /dev/zero"
	b.SetBytes(streamBenchBytes)

	var baseline time.Duration
	buf := make([]byte, 64<<10)
	for range b.N {
		t0 := time.Now()
		cmd := exec.Command("sh", "-c", script)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		n, _ := io.CopyBuffer(io.Discard, io.NopCloser(out), buf)
		_ = cmd.Wait()
		if n != streamBenchBytes {
			b.Fatalf("raw pipe read %d bytes", n)
		}
		baseline += time.Since(t0)
	}

	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		id := "tp-" + strconv.Itoa(i)
		// The child waits for a line on stdin, so the reader is attached
		// before the first byte and a gap would be a real loss.
		resp, err := c.ExecStartWithResponse(ctx, protocol.StartRequest{ExecID: id, Command: []string{"sh", "-c", "read go; " + script}, Stdin: true}, auth(testToken))
		if err != nil || resp.StatusCode() != 200 {
			b.Fatalf("start: %v", err)
		}
		stream, err := c.ExecStream(ctx, id, nil, auth(testToken))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		go func() {
			_, _ = c.ExecStdinWithResponse(ctx, id, protocol.StdinRequest{DataB64: strp("Z28K"), Signal: strp("eof")}, auth(testToken))
		}()
		dec := &sseDecoder{br: bufio.NewReaderSize(stream.Body, 256<<10)}
		total, gap, err := dec.run()
		stream.Body.Close()
		if err != nil || gap || total != streamBenchBytes {
			b.Fatalf("stream: %d bytes, gap %v, err %v", total, gap, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(baseline)/float64(b.Elapsed()), "x-raw-pipe")
}

// procStatusKiB reads a field such as VmRSS or VmHWM from /proc/<pid>/status.
func procStatusKiB(b *testing.B, pid int, field string) float64 {
	b.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	b.Fatalf("%s not in /proc/%d/status", field, pid)
	return 0
}

// BenchmarkRSS reports the agentd binary's resident memory idle and with 100
// live execs (targets: ≤ 10 MiB idle, ≤ 25 MiB peak). It measures a real
// subprocess, so the test binary's own heap does not count.
func BenchmarkRSS(b *testing.B) {
	p := startBinary(b)
	ctx := context.Background()
	payload := `{"agent_token":"rss"}`
	if r, _ := p.client.HookRunWithResponse(ctx, protocol.RunHookEnvelope{RunHookPayload: &payload}); r.StatusCode() != 200 {
		b.Fatal("bootstrap")
	}
	c := fastClient(b, p.base)
	pid := p.cmd.Process.Pid
	time.Sleep(200 * time.Millisecond)
	idle := procStatusKiB(b, pid, "VmRSS")
	for i := range 100 {
		r, err := c.ExecStartWithResponse(ctx, protocol.StartRequest{ExecID: "live-" + strconv.Itoa(i), Command: []string{"sleep", "60"}, Stdin: true}, auth("rss"))
		if err != nil || r.StatusCode() != 200 {
			b.Fatalf("start %d: %v", i, err)
		}
	}
	h, _ := c.HealthWithResponse(ctx)
	if !h.JSON200.Busy || h.JSON200.Execs != 100 {
		b.Fatalf("health with 100 execs: %+v", h.JSON200)
	}
	time.Sleep(200 * time.Millisecond)
	live := procStatusKiB(b, pid, "VmRSS")
	peak := procStatusKiB(b, pid, "VmHWM")
	for i := range 100 {
		_, _ = c.ExecKillWithResponse(ctx, "live-"+strconv.Itoa(i), auth("rss"))
	}
	for range b.N {
	}
	b.ReportMetric(idle/1024, "idle-MiB")
	b.ReportMetric(live/1024, "100execs-MiB")
	b.ReportMetric(peak/1024, "peak-MiB")
}

// pairDecode maps two base64 characters (first in the high byte) to 12 bits,
// or 0xffff when either is not in the standard alphabet.
var pairDecode = func() []uint16 {
	t := make([]uint16, 1<<16)
	var val [256]int
	for i := range val {
		val[i] = -1
	}
	for i := 0; i < 64; i++ {
		val[stdAlphabet[i]] = i
	}
	for i := range t {
		a, b := val[i>>8], val[i&0xff]
		if a < 0 || b < 0 {
			t[i] = 0xffff
		} else {
			t[i] = uint16(a<<6 | b)
		}
	}
	return t
}()

// decodeBase64 is the benchmark client's decoder: 8 characters to 6 bytes per
// step, so the client is not what the stream benchmark measures. dst needs 2
// bytes of slack past the decoded length.
func decodeBase64(dst, src []byte) (int, error) {
	di, si := 0, 0
	for ; len(src)-si > 8 && len(dst)-di >= 8; si, di = si+8, di+6 {
		a := pairDecode[uint16(src[si])<<8|uint16(src[si+1])]
		b := pairDecode[uint16(src[si+2])<<8|uint16(src[si+3])]
		c := pairDecode[uint16(src[si+4])<<8|uint16(src[si+5])]
		d := pairDecode[uint16(src[si+6])<<8|uint16(src[si+7])]
		if (a|b|c|d)&0xf000 != 0 {
			break // padding or invalid: leave it to the standard decoder
		}
		v := uint64(a)<<52 | uint64(b)<<40 | uint64(c)<<28 | uint64(d)<<16
		binary.BigEndian.PutUint64(dst[di:], v)
	}
	n, err := base64.StdEncoding.Decode(dst[di:], src[si:])
	return di + n, err
}
