package agentd

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// errorRecorder is a testing.TB whose Errorf is captured, so a test can prove
// the contract transport fails a test when it should.
type errorRecorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *errorRecorder) Helper() {}

// The validator is only worth its exchanges if it can fail. Catches: a
// contractTransport that swallows errors, skips responses, or runs without
// IncludeResponseStatus (an undescribed status would pass).
func TestContractTransportFailsOffSpecExchanges(t *testing.T) {
	srv, err := NewServer(testConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	real := srv.inner
	srv.inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/health":
			w.WriteHeader(http.StatusTeapot) // a status the spec does not list
		case "/v1/schema":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`[1,2]`)) // a body of the wrong shape
		default:
			real.ServeHTTP(w, r)
		}
	})
	d := serveDaemon(t, srv)
	rec := &errorRecorder{TB: t}
	d.http.Transport.(*contractTransport).t = rec
	before := exchanges.Load()
	ctx := context.Background()
	_, _ = d.client.Health(ctx)
	_, _ = d.client.Schema(ctx)
	_, _ = d.client.HookRun(ctx, protocol.RunHookEnvelope{RunHookPayload: strp(`{"agent_token":"a"}`)})
	if got := exchanges.Load() - before; got != 3 {
		t.Fatalf("validated %d exchanges, want 3", got)
	}
	joined := strings.Join(rec.errs, "\n")
	for _, want := range []string{"418", "/v1/schema"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the off-spec %s exchange was not reported; errors:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "/run") {
		t.Errorf("an on-spec exchange was reported: %s", joined)
	}
}

// hijackless answers 200 with no version header. serveOuter sets the header
// before the handler runs, so the test strips it from the outer writer.
func hijackless(w http.ResponseWriter) {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	w.Header().Del("microvms-agentd-version")
	w.WriteHeader(http.StatusOK)
}

// Catches: a daemon that stops stamping the version header on some class of
// response (the spec marks it required on every response, and the contract
// transport checks it on each exchange of every test above).
func TestContractMissingVersionHeaderIsReported(t *testing.T) {
	srv, err := NewServer(testConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv.inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hijackless(w) })
	d := serveDaemon(t, srv)
	rec := &errorRecorder{TB: t}
	d.http.Transport.(*contractTransport).t = rec
	_, _ = d.client.HookReady(context.Background())
	if len(rec.errs) == 0 || !strings.Contains(strings.Join(rec.errs, "\n"), "microvms-agentd-version") {
		t.Fatalf("a response without the version header passed validation: %v", rec.errs)
	}
}
