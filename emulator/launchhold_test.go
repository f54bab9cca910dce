package emulator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/internal/testvm"
)

// Catches: a GetMicrovm that answers PENDING at once while the guest is
// still starting (the waiter then sleeps its backoff past the moment the
// launch ends: 13 ms at the median and 69 ms at p95 of BenchmarkTTI's
// create → first output), and a held read that does not wake when the
// launch ends. The guest's launch is held open by the test until the read
// has arrived; the read must then answer RUNNING.
func TestGetMicrovmMidLaunchAnswersWhenTheLaunchEnds(t *testing.T) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer hook.Close()
	release := make(chan struct{})
	launcher := func(ctx context.Context, spec GuestSpec) (*Guest, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &Guest{Ports: map[int]string{spec.HookPort: strings.TrimPrefix(hook.URL, "http://")}, Stop: func() {}}, nil
	}
	s, base := serve(t, Options{WallClock: true, VMs: launcher, StateDir: t.TempDir()})
	vm := run(t, s, base, testvm.Payload())
	got := make(chan string, 1)
	go func() { // no t.Fatal off the test's goroutine: an error is the answer
		req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/2025-09-09/microvms/"+vm.MicrovmId, nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		var g cp.GetMicrovmResponse
		_ = json.NewDecoder(resp.Body).Decode(&g)
		got <- string(g.State)
	}()
	// Bounded: until the read is recorded (about ten seconds at most).
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatal("the GetMicrovm never arrived")
		}
		n := 0
		for _, r := range s.Requests() {
			if r.Method == "GET" && strings.Contains(r.Path, vm.MicrovmId) {
				n++
			}
		}
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// A read answered at once shows here; a held one does not (the wait
	// only gives a wrong answer time to arrive, it decides nothing).
	select {
	case state := <-got:
		close(release)
		t.Fatalf("GetMicrovm answered %s while the guest was still starting", state)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if state := <-got; state != string(cp.MicrovmStateRUNNING) {
		t.Fatalf("the held GetMicrovm answered %s once the launch ended, want RUNNING", state)
	}
}
