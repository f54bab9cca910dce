package agentd

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// A request still in flight when the shutdown's grace runs out has its
// connection closed: the daemon's exit is bounded even if a handler never
// returns. The grace is 50 ms here (the daemon's is 10 s). Catches, in
// shutdownWithin, `err != nil` negated before hs.Close (Close then runs only
// after a clean Shutdown, and a stuck request holds its connection, and the
// daemon, for as long as its handler blocks).
func TestShutdownClosesWhatOutlivesTheGrace(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	got := make(chan error, 1)
	go func() {
		c := &http.Client{Timeout: 60 * time.Second}
		resp, err := c.Get("http://" + ln.Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
			err = errors.New("a response came back: " + resp.Status)
		}
		got <- err
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the request never reached the handler")
	}

	shut := make(chan struct{})
	go func() { shutdownWithin(hs, 50*time.Millisecond); close(shut) }()
	select {
	case err := <-got:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the client timed out instead of seeing its connection closed: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stuck request's connection was still open 20 s after a 50 ms grace")
	}
	select {
	case <-shut:
	case <-time.After(20 * time.Second):
		t.Fatal("shutdownWithin did not return")
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want ErrServerClosed", err)
	}
}
