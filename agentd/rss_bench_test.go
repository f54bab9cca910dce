package agentd

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
)

// rssBudgetMiB is the peak resident memory api/openapi.yaml declares for
// these two workloads at the default limits (x-memory in api/openapi.yaml).
const rssBudgetMiB = 32

// rssDaemon is a bootstrapped agentd binary and a raw client for it, so the
// benchmark's own reads never buffer a body.
type rssDaemon struct {
	p     *process
	hc    *http.Client
	token string
}

func newRSSDaemon(b *testing.B, env ...string) *rssDaemon {
	b.Helper()
	p := startBinary(b, env...)
	const token = "rss-token"
	payload := `{"agent_token":"` + token + `"}`
	if r, _ := p.client.HookRunWithResponse(context.Background(), protocol.RunHookEnvelope{RunHookPayload: &payload}); r.StatusCode() != 200 {
		b.Fatal("bootstrap")
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	b.Cleanup(hc.CloseIdleConnections)
	return &rssDaemon{p: p, hc: hc, token: token}
}

// do sends one request and discards the body as it arrives, returning the
// status and the byte count.
func (d *rssDaemon) do(b *testing.B, method, path, body string) (int, int64) {
	b.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, d.p.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+d.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	return resp.StatusCode, n
}

// idle waits, bounded, until no exec is running (health's busy), without
// polling an exec: a poll of an exited exec is itself one of the workloads.
func (d *rssDaemon) idle(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		h, err := d.p.client.HealthWithResponse(context.Background())
		if err == nil && h.JSON200 != nil && !h.JSON200.Busy {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("execs still running after 5 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *rssDaemon) start(b *testing.B, id, script string) {
	b.Helper()
	body := `{"exec_id":"` + id + `","command":["` + script + `"],"shell":true}`
	if code, _ := d.do(b, "POST", "/v1/exec/start", body); code != 200 {
		b.Fatalf("start %s: %d", id, code)
	}
}

func (d *rssDaemon) peakMiB(b *testing.B) float64 {
	return procStatusKiB(b, d.p.cmd.Process.Pid, "VmHWM") / 1024
}

// BenchmarkUnattachedOutputRSS: four execs in turn, each writing 256 MiB with
// no reader attached, each acked once it has exited. The daemon keeps only
// the head (max_output_bytes per stream) and the replay ring of each, and an
// ack streams the head out, so the peak stays under the declared bound
// (before issue 12: 292 MiB).
func BenchmarkUnattachedOutputRSS(b *testing.B) {
	var peak float64
	for i := range b.N {
		d := newRSSDaemon(b)
		for k := range 4 {
			id := "unattached-" + strconv.Itoa(i) + "-" + strconv.Itoa(k)
			d.start(b, id, "head -c 268435456 /dev/zero")
			d.idle(b)
			if code, n := d.do(b, "POST", "/v1/exec/"+id+"/ack", ""); code != 200 || n < 8<<20 {
				b.Fatalf("ack %s: %d, %d bytes", id, code, n)
			}
		}
		peak = max(peak, d.peakMiB(b))
	}
	if peak > rssBudgetMiB {
		b.Errorf("peak RSS %.1f MiB is over the declared %d MiB", peak, rssBudgetMiB)
	}
	b.ReportMetric(peak, "peak-MiB")
	b.ReportMetric(rssBudgetMiB, "budget-MiB")
}

// BenchmarkConcurrentPollRSS: one exited exec holding 8 MiB of NUL stdout and
// 8 MiB of NUL stderr (JSON escapes each NUL as six bytes), polled by eight
// clients at once, three times over. A poll is streamed from the head, never
// built whole (before issue 12: 2.6 GiB).
func BenchmarkConcurrentPollRSS(b *testing.B) {
	var peak float64
	for i := range b.N {
		d := newRSSDaemon(b)
		id := "polled-" + strconv.Itoa(i)
		d.start(b, id, "head -c 8388608 /dev/zero; head -c 8388608 /dev/zero >&2")
		d.idle(b)
		for range 3 {
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if code, n := d.do(b, "GET", "/v1/exec/"+id, ""); code != 200 || n < 2*6*8<<20 {
						b.Errorf("poll: %d, %d bytes", code, n)
					}
				}()
			}
			wg.Wait()
		}
		peak = max(peak, d.peakMiB(b))
	}
	if peak > rssBudgetMiB {
		b.Errorf("peak RSS %.1f MiB is over the declared %d MiB", peak, rssBudgetMiB)
	}
	b.ReportMetric(peak, "peak-MiB")
	b.ReportMetric(rssBudgetMiB, "budget-MiB")
}

// BenchmarkStreamedOutputRSS: 256 MiB of NUL output followed the way
// `microvm exec` follows it (the client package's Attach, both streams read,
// then Wait, which polls the exited record and acks it). The stream is
// bounded by the replay ring and the poll and ack are streamed from the head
// (before issue 12: 276 MiB).
func BenchmarkStreamedOutputRSS(b *testing.B) {
	var peak float64
	for i := range b.N {
		d := newRSSDaemon(b)
		s, err := client.Direct(d.p.base, d.token, client.WithHTTPClient(d.hc))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		id := "streamed-" + strconv.Itoa(i)
		d.start(b, id, "head -c 268435456 /dev/zero")
		p := s.Exec(id).Attach(ctx, 0)
		var wg sync.WaitGroup
		var got int64
		wg.Add(2)
		go func() { defer wg.Done(); got, _ = io.Copy(io.Discard, p.Stdout()) }()
		go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, p.Stderr()) }()
		r, err := p.Wait(ctx)
		wg.Wait()
		if err != nil || got != 256<<20 || len(p.Gaps()) != 0 {
			b.Fatalf("streamed exec: %v, %d bytes, gaps %v, %+v", err, got, p.Gaps(), r)
		}
		peak = max(peak, d.peakMiB(b))
	}
	if peak > rssBudgetMiB {
		b.Errorf("peak RSS %.1f MiB is over the declared %d MiB", peak, rssBudgetMiB)
	}
	b.ReportMetric(peak, "peak-MiB")
	b.ReportMetric(rssBudgetMiB, "budget-MiB")
}
