package client

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// cutOnce scripts the fake agent's first stream connection to send the
// first event and end without an exit event, as a VM frozen under it does;
// the next refusals attaches are answered 502 (what a frozen VM's endpoint
// answers), the rest served whole.
func cutOnce(f *fakeAgent, refusals int) {
	f.attach = func(n int, w http.ResponseWriter, r *http.Request, offset uint64) bool {
		if n != 0 {
			return false
		}
		frames, _ := f.framesFrom(offset)
		io.WriteString(w, frames[0])
		f.mu.Lock()
		f.statusOnce["stream"] = slices.Repeat([]int{http.StatusBadGateway}, refusals)
		f.mu.Unlock()
		return true
	}
}

// Catches: a stream that counts the refusals of a suspended VM against its
// reattach budget (it gives up after five while its command is merely
// frozen), one that keeps knocking on the endpoint of a paused VM (which
// would auto-resume a VM its owner suspended on purpose), and one that
// resumes anywhere but its cursor afterwards.
func TestStreamWaitsOutAPausedVM(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.chunks = []chunk{{protocol.StreamStdout, "before "}, {protocol.StreamStdout, "after\n"}}
	// The endpoint refuses every attach until the VM runs again.
	cutOnce(f, 1<<20)
	const looks = 24 // the phase reads that find the VM still paused
	var reads atomic.Int32
	phase := func(context.Context) (VMPhase, error) {
		if reads.Add(1) <= looks {
			return VMPaused, nil
		}
		f.mu.Lock()
		f.statusOnce["stream"] = nil // resumed: the endpoint answers
		f.mu.Unlock()
		return VMRunning, nil
	}
	s := direct(t, srv.URL, f.token, WithVMPhase(phase), WithPollInterval(time.Millisecond))
	out, _, gaps, exit, err := collect(t, s.Exec("e1").Stream(context.Background(), 0))
	if err != nil {
		t.Fatalf("stream across a pause: %v", err)
	}
	if out != "before after\n" || len(gaps) != 0 || exit == nil {
		t.Fatalf("out %q gaps %v exit %v", out, gaps, exit)
	}
	// The cut connection, then nothing while the VM was paused, then the
	// reattach at the cursor once it ran.
	if !slices.Equal(f.attaches, []uint64{0, 7}) {
		t.Fatalf("attach offsets %v, want [0 7]", f.attaches)
	}
	if reads.Load() != looks+1 {
		t.Fatalf("the phase was read %d times, want %d", reads.Load(), looks+1)
	}
}

// Catches: a wait for a paused VM that outlives the caller's context (a
// stream of a VM nobody resumes must still end when its caller gives up),
// and one that ends as anything but Timeout.
func TestStreamPauseIsBoundedByTheContext(t *testing.T) {
	f, srv := newFakeAgent(t)
	f.chunks = []chunk{{protocol.StreamStdout, "before "}, {protocol.StreamStdout, "after\n"}}
	cutOnce(f, 1<<20)
	phase := func(context.Context) (VMPhase, error) { return VMPaused, nil }
	s := direct(t, srv.URL, f.token, WithVMPhase(phase), WithPollInterval(5*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, _, _, err := collect(t, s.Exec("e1").Stream(ctx, 0))
	if KindOf(err) != taxonomy.KindTimeout {
		t.Fatalf("a stream paused past its context: %v (kind %v), want Timeout", err, KindOf(err))
	}
}
