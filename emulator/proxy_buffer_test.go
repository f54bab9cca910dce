package emulator

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/taxonomy"
)

// writeSizes is a net.Conn that remembers its largest Write.
type writeSizes struct {
	net.Conn
	mu  *sync.Mutex
	max *int
}

func (c writeSizes) Write(p []byte) (int, error) {
	c.mu.Lock()
	*c.max = max(*c.max, len(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

type recordingListener struct {
	net.Listener
	mu  *sync.Mutex
	max *int
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return writeSizes{c, l.mu, l.max}, nil
}

// The endpoint proxy moves a large body in pieces bigger than net/http's
// 32 KiB copy buffer, both ways: an upload, sized or chunked, reaches the
// guest, and a download the caller, in writes of up to wideconn.Bytes. The
// guest waits before it reads an upload, so the bytes are waiting for the
// proxy's reads, and answers the download with its length in one write.
// Catches: the ReverseProxy's BufferPool dropped (every response write is
// at most 32 KiB, and with FlushInterval -1 each is a flush); the guest's
// connection left unwrapped by wideconn (the transport's ReadFrom copies a
// sized upload through io.Copy's 32 KiB); and the forwarded body left
// unwrapped (a chunked upload re-chunked at 32 KiB).
func TestEndpointProxyCopiesInLargePieces(t *testing.T) {
	const size = 8 << 20
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	var mu sync.Mutex
	var toGuest, toCaller int
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/up":
			time.Sleep(100 * time.Millisecond)
			got, err := io.ReadAll(r.Body)
			if err != nil || !bytes.Equal(got, payload) {
				http.Error(w, "upload mangled", http.StatusBadRequest)
				return
			}
		case "/down":
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, _ = w.Write(payload)
		}
	}))
	t.Cleanup(app.Close)
	s, vm, tok := proxiedTo(t, app.URL, func(c net.Conn) net.Conn { return writeSizes{c, &mu, &toGuest} })
	front := httptest.NewUnstartedServer(s.endpointHandler(vm))
	front.Listener = recordingListener{front.Listener, &mu, &toCaller}
	front.Start()
	t.Cleanup(front.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	do := func(method, path string, body io.Reader) []byte {
		req, _ := http.NewRequestWithContext(ctx, method, front.URL+path, body)
		req.Header.Set(taxonomy.ProxyAuthHeader, tok)
		req.Header.Set(taxonomy.ProxyPortHeader, "8080")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: HTTP %d, %v: %s", method, path, resp.StatusCode, err, got)
		}
		return got
	}
	largest := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := toGuest
		toGuest = 0
		return n
	}
	do(http.MethodPut, "/up", bytes.NewReader(payload))
	if n := largest(); n <= 32<<10 {
		t.Errorf("a sized upload reached the guest in writes of at most %d bytes: it went through io.Copy's 32 KiB buffer", n)
	}
	// No length: sent chunked, one chunk (a MultiReader hands the transport
	// the bytes.Reader's WriteTo).
	do(http.MethodPut, "/up", io.MultiReader(bytes.NewReader(payload)))
	if n := largest(); n <= 32<<10 {
		t.Errorf("a chunked upload reached the guest in writes of at most %d bytes: it was re-chunked at io.Copy's 32 KiB", n)
	}
	if got := do(http.MethodGet, "/down", nil); !bytes.Equal(got, payload) {
		t.Fatalf("the download arrived as %d bytes, not the %d sent", len(got), size)
	}
	mu.Lock()
	defer mu.Unlock()
	if toCaller <= 32<<10 {
		t.Errorf("the download reached the caller in writes of at most %d bytes: the proxy's copy buffer is net/http's 32 KiB", toCaller)
	}
}
