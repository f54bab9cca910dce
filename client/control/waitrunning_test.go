package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/microvms/microvms/client"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// scriptedVM is a stand-in control plane on 127.0.0.1 that answers
// GetMicrovm for one MicroVM with the next state of a script, repeating the
// last one. Unlike the emulator (which moves a resumed VM to PENDING), it can
// hold a VM in SUSPENDED after a resume.
type scriptedVM struct {
	mu     sync.Mutex
	states []cp.MicrovmState
	reason string
	polls  int
}

func (s *scriptedVM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const id = "mvm-0123456789abcdef"
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/microvms/"+id) {
		http.Error(w, `{"message":"not scripted"}`, http.StatusNotFound)
		return
	}
	s.mu.Lock()
	st := s.states[min(s.polls, len(s.states)-1)]
	s.polls++
	s.mu.Unlock()
	out := cp.GetMicrovmResponse{
		MicrovmId: id, State: st, Endpoint: id + ".microvms.example",
		ImageArn:                 "arn:aws:lambda:us-east-1:123456789012:microvm-image:img",
		ImageVersion:             "1",
		MaximumDurationInSeconds: 3600,
		StartedAt:                1.7e9,
	}
	if s.reason != "" && (st == cp.MicrovmStateTERMINATED || st == cp.MicrovmStateTERMINATING) {
		out.StateReason = &s.reason
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func scriptedClient(t *testing.T, s *scriptedVM) *Client {
	t.Helper()
	srv := httptest.NewServer(s) // listens on 127.0.0.1
	t.Cleanup(srv.Close)
	c, err := New(ctxT(t), Options{
		Region:      client.USEast1,
		Endpoint:    srv.URL,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""),
		MaxBackoff:  1,
		MaxAttempts: 1,
		Now:         func() time.Time { return fixedNow },
		Getenv:      func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Catches: WaitRunning failing on SUSPENDED or SUSPENDING (waiting on
// MicrovmTerminalStates instead of MicrovmDeadStates). After ResumeMicrovm
// the VM still reads SUSPENDED for a few polls; calling that LaunchDied
// made client/sandbox mark a live VM terminated.
func TestWaitRunningWaitsThroughSuspendedAfterResume(t *testing.T) {
	s := &scriptedVM{states: []cp.MicrovmState{
		cp.MicrovmStateSUSPENDED, cp.MicrovmStateSUSPENDED, cp.MicrovmStateSUSPENDING,
		cp.MicrovmStateSUSPENDED, cp.MicrovmStateRUNNING,
	}}
	c := scriptedClient(t, s)
	var seen []string
	o := fastWait
	o.Progress = func(p Progress) { seen = append(seen, p.State) }
	got, err := c.WaitRunning(ctxT(t), "mvm-0123456789abcdef", o)
	if err != nil {
		t.Fatalf("a resumed VM still SUSPENDED must be waited for: %v (states seen %v)", err, seen)
	}
	if got.State != cp.MicrovmStateRUNNING || len(seen) != 5 {
		t.Fatalf("returned %s after %d polls %v, want RUNNING on the 5th", got.State, len(seen), seen)
	}
}

// Catches: the opposite wrong edit, a fatal set that no longer holds the
// dead states (nil, or only SUSPENDED): a VM that dies while waited for
// must fail at once as LaunchDied naming the finding and carrying the
// stateReason, not poll to the timeout.
func TestWaitRunningFailsFastOnADeadState(t *testing.T) {
	const reason = "Run lifecycle hook returned HTTP status 500."
	for _, dead := range []cp.MicrovmState{cp.MicrovmStateTERMINATING, cp.MicrovmStateTERMINATED} {
		s := &scriptedVM{reason: reason, states: []cp.MicrovmState{cp.MicrovmStatePENDING, dead, cp.MicrovmStateRUNNING}}
		c := scriptedClient(t, s)
		got, err := c.WaitRunning(ctxT(t), "mvm-0123456789abcdef", fastWait)
		ce := requireKind(t, err, taxonomy.KindLaunchDied, taxonomy.MicrovmStateFinding)
		if !strings.Contains(ce.Message(), reason) || !strings.Contains(ce.Message(), string(dead)) {
			t.Fatalf("%s: the error should name the state and carry the stateReason: %v", dead, err)
		}
		if got == nil || got.State != dead || s.polls != 2 {
			t.Fatalf("%s: want the dead VM back after 2 polls, got %v after %d", dead, got, s.polls)
		}
	}
}

// Catches: WaitSuspended waiting through a dead state, or failing on the
// SUSPENDING it passes through on the way.
func TestWaitSuspendedPassesSuspendingAndFailsOnDead(t *testing.T) {
	s := &scriptedVM{states: []cp.MicrovmState{cp.MicrovmStateRUNNING, cp.MicrovmStateSUSPENDING, cp.MicrovmStateSUSPENDED}}
	if got, err := scriptedClient(t, s).WaitSuspended(ctxT(t), "mvm-0123456789abcdef", fastWait); err != nil || got.State != cp.MicrovmStateSUSPENDED {
		t.Fatalf("WaitSuspended: %v %v", got, err)
	}
	s = &scriptedVM{states: []cp.MicrovmState{cp.MicrovmStateSUSPENDING, cp.MicrovmStateTERMINATED}}
	_, err := scriptedClient(t, s).WaitSuspended(ctxT(t), "mvm-0123456789abcdef", fastWait)
	requireKind(t, err, taxonomy.KindPlatform, taxonomy.MicrovmStateFinding)
}

// Catches: an image with no builds listed yet called wedged
// (`len(builds) >= 0`): "every build PENDING" says nothing when there are
// none, so the wait goes on. A stand-in control plane on 127.0.0.1 answers
// CREATING with no builds for three polls, then CREATED.
func TestImageWithNoBuildsListedYetIsNotWedged(t *testing.T) {
	var mu sync.Mutex
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/builds") {
			_, _ = w.Write([]byte(`{"items":[]}`))
			return
		}
		mu.Lock()
		polls++
		state := "CREATING"
		if polls > 3 {
			state = "CREATED"
		}
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(cp.GetMicrovmImageOutput{
			ImageArn: "arn:aws:lambda:us-east-1:123456789012:microvm-image:fresh", Name: "fresh",
			State: cp.MicrovmImageState(state), CreatedAt: 1.7e9,
		})
	}))
	t.Cleanup(srv.Close)
	c, err := New(ctxT(t), Options{
		Region: client.USEast1, Endpoint: srv.URL, MaxAttempts: 1, MaxBackoff: 1,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""),
		Now:         func() time.Time { return fixedNow },
		Getenv:      func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	o := fastWait
	o.Grace = 1 // past the grace period from the first poll
	got, err := c.WaitImage(ctxT(t), mustRef(t, "fresh"), "1.0", o)
	if err != nil || got == nil || got.State != cp.MicrovmImageState("CREATED") {
		t.Fatalf("%+v %v", got, err)
	}
}
