// Package fswiretap is a test-only reverse proxy in front of a real agentd
// that records the sync query value of every file write (PUT /v1/fs/file)
// it forwards, so a client's or the CLI's test can see what durability it
// asked for: a completed fsync leaves nothing on disk a test can read back.
//
// It must never be imported by non-test code.
package fswiretap

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// Tap is a running proxy: URL is where clients send, Syncs what they sent.
type Tap struct {
	URL   string
	mu    sync.Mutex
	syncs []string
}

// Start proxies to the agentd at target (http://host:port) until the test
// ends.
func Start(t testing.TB, target string) *Tap {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tap := &Tap{}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/fs/file" {
			tap.mu.Lock()
			tap.syncs = append(tap.syncs, r.URL.Query().Get("sync"))
			tap.mu.Unlock()
		}
		// Full duplex, as the emulator's endpoint proxy: agentd may answer
		// before the transport's last read of the request body, and the
		// server would otherwise close that body under it (issue 51).
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	tap.URL = srv.URL
	return tap
}

// Syncs is the sync value of each file write so far, in order; "" where the
// write carried none.
func (t *Tap) Syncs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.syncs...)
}
