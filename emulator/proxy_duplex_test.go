package emulator

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testvm"
)

// pausingConn holds the writer that sends the bytes containing mark: they
// go out, then Write waits for release. The endpoint proxy's transport writes
// a request body from its own goroutine, so this pauses that goroutine just
// after the guest has the whole request and before the transport's last
// read of the incoming body.
type pausingConn struct {
	net.Conn
	mark    []byte
	release <-chan struct{}
	paused  chan<- struct{}
	once    sync.Once
}

func (c *pausingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && bytes.Contains(p, c.mark) {
		c.once.Do(func() { close(c.paused) })
		<-c.release
	}
	return n, err
}

// The order issue 51 met under load, made by hand: the guest answers a POST
// as soon as it has the body (agentd's run route does), the answer's
// headers reach the caller, and only then does the proxy's transport take
// its last look at the incoming body. net/http's server, writing the
// proxy's response headers, drains and closes an unread request body unless
// the handler asked for full duplex; the transport's read then fails
// ("invalid Read on closed Body"), it closes the connection to the guest,
// and the answer is cut mid-body ("ReverseProxy read error during body
// copy: use of closed network connection", which also went to stderr).
// Catches: the endpoint proxy not enabling full duplex (the cut), and its
// ReverseProxy logging through the standard logger (the stderr line).
func TestEndpointProxyAnswerSurvivesTheGuestAnsweringBeforeTheBodyIsDone(t *testing.T) {
	var stderr syncBuffer
	log.SetOutput(&stderr)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	mark := []byte("body-ends-here")
	release, paused, more := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var releaseOnce, moreOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	defer moreOnce.Do(func() { close(more) })

	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/exec/run" {
			return // the run hook, and any probe
		}
		_, _ = io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "head;")
		w.(http.Flusher).Flush()
		<-more
		_, _ = io.WriteString(w, "tail")
	}))
	t.Cleanup(app.Close)
	s, vm, tok := proxiedTo(t, app.URL, func(c net.Conn) net.Conn {
		return &pausingConn{Conn: c, mark: mark, release: release, paused: paused}
	})

	// The endpoint handler served with a trace in every request's context:
	// the proxy's transport reports through it when it has finished writing
	// the request to the guest, and how.
	wrote := make(chan error, 1)
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		select {
		case wrote <- i.Err:
		default:
		}
	}}
	front := httptest.NewUnstartedServer(s.endpointHandler(vm))
	front.Config.BaseContext = func(net.Listener) context.Context {
		return httptrace.WithClientTrace(context.Background(), trace)
	}
	front.Start()
	t.Cleanup(front.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/v1/exec/run", bytes.NewReader(append([]byte(`{"x":"`), append(mark, `"}`...)...)))
	req.Header.Set(taxonomy.ProxyAuthHeader, tok)
	req.Header.Set(taxonomy.ProxyPortHeader, "8080")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The caller has the headers (and "head;"): the server has written them.
	// Only now may the transport finish with the request body.
	select {
	case <-paused:
	case <-ctx.Done():
		t.Fatal("the transport never wrote the body's end")
	}
	releaseOnce.Do(func() { close(release) })
	select {
	case err := <-wrote:
		if err != nil {
			t.Errorf("the proxy's transport failed writing the request after the answer began: %v (the server drained and closed the body under it: full duplex is off)", err)
		}
	case <-ctx.Done():
		t.Fatal("the transport never finished the request")
	}
	moreOnce.Do(func() { close(more) })
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "head;tail" {
		t.Errorf("the answer reached the caller as %q (%v), want head;tail whole", body, err)
	}
	if line := stderr.String(); line != "" {
		t.Errorf("the proxy logged to the standard logger (a user's stderr): %q", line)
	}
}

// proxiedTo runs a MicroVM whose guest is the server at appURL, every
// connection to it passed through wrap, and answers the emulator, the VM
// (for its endpointHandler) and a token for port 8080.
func proxiedTo(t *testing.T, appURL string, wrap func(net.Conn) net.Conn) (*Server, *microvm, string) {
	t.Helper()
	launcher := func(ctx context.Context, spec GuestSpec) (*Guest, error) {
		return &Guest{
			Dial: func(ctx context.Context, port int) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", strings.TrimPrefix(appURL, "http://"))
				if err != nil {
					return nil, err
				}
				return wrap(c), nil
			},
			Stop: func() {},
		}, nil
	}
	s, base := serve(t, Options{VMs: launcher})
	out := run(t, s, base, testvm.Payload())
	waitState(t, base, out.MicrovmId, cp.MicrovmStateRUNNING)
	tok := mintToken(t, base, out.MicrovmId, 5, `[{"port":8080}]`)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s, s.vms[out.MicrovmId], tok
}

// syncBuffer is a bytes.Buffer the standard logger may write from any
// goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
