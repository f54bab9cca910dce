package agentd

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// waitIdle waits, bounded, until health says no exec is running. Unlike
// waitExited it never polls, so a huge exited outcome is not read (and
// validated) on the way.
func (d *daemon) waitIdle() {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		h, err := d.client.HealthWithResponse(context.Background())
		if err == nil && h.JSON200 != nil && !h.JSON200.Busy {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatal("execs still running")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// allocatedDuring is how many bytes of heap this process (test and daemon
// alike) allocated while fn ran.
func allocatedDuring(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// An exited poll and the ack stream the head out: writing 16 MiB of held
// NUL output as 96 MiB of JSON allocates a small fixed buffer, not the body.
// Catches: building the body whole (string copy, ToValidUTF8, json.Marshal:
// one poll took RSS from 27 to 99 MiB, eight concurrent ones to 2.6 GiB).
func TestPollAndAckAreStreamed(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.mustStart(shell("nul", "head -c 8388608 /dev/zero; head -c 8388608 /dev/zero >&2"))
	d.waitIdle()
	raw := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer raw.CloseIdleConnections()
	get := func(method, path string) int64 {
		req, _ := http.NewRequest(method, d.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, call := range []struct{ method, path string }{{"GET", "/v1/exec/nul"}, {"POST", "/v1/exec/nul/ack"}} {
		var n int64
		alloc := allocatedDuring(func() { n = get(call.method, call.path) })
		if n < 2*6*8<<20 {
			t.Fatalf("%s: %d bytes of body, want the escaped 16 MiB", call.path, n)
		}
		if alloc > 4<<20 {
			t.Errorf("%s %s allocated %d bytes for a %d-byte body: it was built whole", call.method, call.path, alloc, n)
		}
	}
}
