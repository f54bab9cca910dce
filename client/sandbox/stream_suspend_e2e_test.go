package sandbox

// Streams across suspend and resume: a command streaming its output when
// its sandbox is suspended (by the caller, or by the idle policy) is
// reattached after the resume at its cursor, over SSE and over binary
// frames, with no byte lost or repeated.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// counterLines is what counterScript prints: batches lines numbered
// 1..batches*per, each "%09d\n".
func counterLines(batches, per int) []byte {
	var b bytes.Buffer
	for i := 1; i <= batches*per; i++ {
		fmt.Fprintf(&b, "%09d\n", i)
	}
	return b.Bytes()
}

// counterScript prints counterLines(batches, per) in batches, pausing
// between them, so the output is still flowing when the test suspends.
func counterScript(batches, per int, pause time.Duration) string {
	return fmt.Sprintf("b=0; while [ $b -lt %d ]; do seq -f '%%09g' $((b*%d+1)) $((b*%d+%d)); b=$((b+1)); sleep %.3f; done",
		batches, per, per, per, pause.Seconds())
}

// mediaTap is the session's transport: it makes every exec stream ask for
// SSE alone when sse is set (agentd answers frames when they are offered),
// and records the content type each stream answer came with, so a test
// knows which path it exercised.
type mediaTap struct {
	sse   bool
	mu    sync.Mutex
	types map[string]int
}

func (m *mediaTap) RoundTrip(r *http.Request) (*http.Response, error) {
	isStream := strings.HasSuffix(r.URL.Path, "/stream") || r.URL.Path == "/v1/exec/run"
	if isStream && m.sse {
		r = r.Clone(r.Context())
		r.Header.Set("Accept", "text/event-stream")
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && isStream && resp.StatusCode == http.StatusOK {
		m.mu.Lock()
		if m.types == nil {
			m.types = map[string]int{}
		}
		m.types[resp.Header.Get("Content-Type")]++
		m.mu.Unlock()
	}
	return resp, err
}

func (m *mediaTap) saw() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.types {
		out[k] = v
	}
	return out
}

// followed is one stream read to its end: stdout in order, and the first
// thing that went wrong.
type followed struct {
	out  bytes.Buffer
	got  atomic.Int64 // bytes read so far, for the test to time its suspend
	err  error
	exit *protocol.ExitEvent
	// holdAt, when set, is where the reader stops reading until hold is
	// closed, so the suspend lands mid-stream however fast the rest flows.
	holdAt int64
	hold   chan struct{}
}

// follow reads st to its exit event, refusing any gap, any stderr, and any
// output not contiguous with what came before.
func follow(st *client.Stream, f *followed) {
	var next uint64
	for range 10_000_000 { // bounded: far more events than the output can make
		ev, err := st.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			f.err = fmt.Errorf("after %d bytes: %w", next, err)
			return
		}
		switch ev.Kind {
		case client.EventOutput:
			if ev.Offset != next || ev.Stream != protocol.StreamStdout {
				f.err = fmt.Errorf("%s output at %d, want stdout at %d", ev.Stream, ev.Offset, next)
				return
			}
			next += uint64(len(ev.Data))
			f.out.Write(ev.Data)
			f.got.Store(int64(next))
			if f.hold != nil && int64(next) >= f.holdAt {
				<-f.hold
				f.hold = nil
			}
		case client.EventGap:
			f.err = fmt.Errorf("gap %+v after %d bytes", ev.Gap, next)
			return
		case client.EventExit:
			x := ev.Exit
			f.exit = &x
		}
	}
	f.err = fmt.Errorf("no exit event after %d bytes", next)
}

// awaitBytes waits until f has read at least n bytes, bounded.
func awaitBytes(t *testing.T, f *followed, n int64, done <-chan struct{}) {
	t.Helper()
	for i := 0; i < 6000; i++ { // bounded: a minute
		if f.got.Load() >= n {
			return
		}
		select {
		case <-done:
			t.Fatalf("the stream ended after %d bytes, before the suspend: %v", f.got.Load(), f.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("the stream read %d bytes in a minute, want %d", f.got.Load(), n)
}

// checkFollowed asserts the stream delivered exactly want and exited 0.
func checkFollowed(t *testing.T, f *followed, want []byte) {
	t.Helper()
	if f.err != nil {
		t.Fatalf("stream: %v", f.err)
	}
	if f.exit == nil || f.exit.ExitCode == nil || *f.exit.ExitCode != 0 {
		t.Fatalf("exit %+v", f.exit)
	}
	got := f.out.Bytes()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("stream delivered %d bytes, want %d; first difference at byte %d: got %q want %q",
			len(got), len(want), i, clip(got, i), clip(want, i))
	}
	if f.exit.Offset != uint64(len(want)) {
		t.Fatalf("exit at offset %d, want %d", f.exit.Offset, len(want))
	}
}

func clip(b []byte, i int) []byte {
	return b[i:min(len(b), i+30)]
}

// The media types each case asks for, and the one its answers must have.
var streamMedia = []struct {
	name string
	sse  bool
	want string
}{
	{"SSE", true, "text/event-stream"},
	{"frames", false, protocol.FramesMediaType},
}

// Catches: a stream that gives up while its VM is suspended (its reattach
// budget spent on the 502s a frozen VM's endpoint answers), one that
// resumes at offset 0 or past its cursor after the resume (bytes repeated
// or lost), and a frames stream that does not resume at all. The suspend
// lasts many idle timeouts and many reattach budgets.
func TestStreamAcrossCallerSuspendLosesNoByte(t *testing.T) {
	for _, m := range streamMedia {
		t.Run(m.name, func(t *testing.T) {
			tap := &mediaTap{sse: m.sse}
			f := newFixture(t, emulator.Options{VMs: emulator.AgentdLauncher(agentdHost, nil), WallClock: true})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// A stream that learns of the resume up to 3 s late (it reattaches
			// to a paused VM at most every poll interval): the thawed writer
			// runs far past the replay window before the reattach.
			sb, err := Launch(ctx, f.cp, Options{Image: f.emu.AddImage(fmt.Sprintf("susp-%d", time.Now().UnixNano())), Wait: fast,
				SessionOptions: []client.Option{client.WithHTTPClient(&http.Client{Transport: tap}), client.WithIdleTimeout(500 * time.Millisecond),
					client.WithPollInterval(3 * time.Second)}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })

			// 9 MB as fast as seq writes it: far past the 1 MiB replay
			// window, so neither a resume at offset 0 nor a thawed writer
			// running ahead of a late reattach can hide in the replay.
			const batches, per = 90, 10000
			e, err := sb.Session().Start(ctx, []string{counterScript(batches, per, 0)}, client.StartOptions{Shell: true})
			if err != nil {
				t.Fatal(err)
			}
			st := e.Stream(ctx, 0)
			defer st.Close()
			// The reader stops at 400 KiB until the VM is suspended: the
			// writer is then held by the full replay window, not done.
			fl := &followed{holdAt: 400 << 10, hold: make(chan struct{})}
			done := make(chan struct{})
			go func() { defer close(done); follow(st, fl) }()

			awaitBytes(t, fl, 400<<10, done)
			if err := sb.Suspend(ctx); err != nil {
				t.Fatalf("suspend: %v", err)
			}
			close(fl.hold)
			// What the connection held when the VM froze still arrives;
			// then nothing does.
			time.Sleep(time.Second)
			at := fl.got.Load()
			// Frozen for six more idle timeouts: the stream's connection is
			// cut and every reattach meets a VM that takes no traffic.
			time.Sleep(3 * time.Second)
			if n := fl.got.Load(); n != at {
				t.Fatalf("%d bytes arrived while the VM was suspended", n-at)
			}
			select {
			case <-done:
				t.Fatalf("the stream ended while the VM was suspended: %v", fl.err)
			default:
			}
			if err := sb.Resume(ctx); err != nil {
				t.Fatalf("resume: %v", err)
			}
			<-done
			checkFollowed(t, fl, counterLines(batches, per))
			if saw := tap.saw(); len(saw) != 1 || saw[m.want] < 2 {
				t.Fatalf("stream answers by content type %v, want only %s, at least twice (the first attach and a reattach)", saw, m.want)
			}
		})
	}
}

// Catches: a stream that gives up when the idle policy suspends its VM
// (no keep-awake: an open stream is not traffic) and nobody wakes it for a
// while, one that loses or repeats bytes across that suspend and the
// ResumeMicrovm (or, with autoResumeEnabled, the inbound request) that
// wakes it, and one that never notices an auto-resume it did not send.
func TestStreamAcrossIdleSuspendLosesNoByte(t *testing.T) {
	for _, auto := range []bool{false, true} {
		for _, m := range streamMedia {
			name := m.name + "/ResumeMicrovm"
			if auto {
				name = m.name + "/autoResume"
			}
			t.Run(name, func(t *testing.T) { streamAcrossIdleSuspend(t, auto, m.sse, m.want) })
		}
	}
}

func streamAcrossIdleSuspend(t *testing.T, auto, sse bool, want string) {
	tap := &mediaTap{sse: sse}
	f, sb := idleSandbox(t, auto, Options{NoKeepAwake: true,
		SessionOptions: []client.Option{client.WithHTTPClient(&http.Client{Transport: tap}), client.WithIdleTimeout(500 * time.Millisecond)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Paced to outlast the 60-unit idle window several times over.
	const batches, per = 32, 10000
	e, err := sb.Session().Start(ctx, []string{counterScript(batches, per, 5*idleUnit)}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	st := e.Stream(ctx, 0)
	defer st.Close()
	fl := &followed{}
	done := make(chan struct{})
	go func() { defer close(done); follow(st, fl) }()

	stt := awaitState(t, f, sb.ID(), Suspended)
	if !strings.Contains(stt.StateReason, "maxIdleDurationSeconds") {
		t.Fatalf("idle suspend reason %q", stt.StateReason)
	}
	// Left suspended for six idle timeouts of the stream.
	time.Sleep(3 * time.Second)
	select {
	case <-done:
		t.Fatalf("the stream ended while the VM was suspended: %v", fl.err)
	default:
	}
	// The command may be suspended again before it ends; each time,
	// wake it, as its owner would: by ResumeMicrovm, or by any
	// inbound request when the VM auto-resumes.
	for i := 0; ; i++ {
		if auto {
			if _, err := sb.Session().Health(ctx); err != nil {
				t.Fatalf("the request that should auto-resume: %v", err)
			}
		} else if _, err := Open(f.cp, sb.ID()).Resume(ctx, fast); err != nil {
			t.Fatalf("resume: %v", err)
		}
		select {
		case <-done:
		case <-time.After(100 * idleUnit):
			if i == 100 {
				t.Fatal("the stream never finished")
			}
			continue
		}
		break
	}
	checkFollowed(t, fl, counterLines(batches, per))
	if saw := tap.saw(); len(saw) != 1 || saw[want] < 2 {
		t.Fatalf("stream answers by content type %v, want only %s, at least twice (the first attach and a reattach)", saw, want)
	}
}

// Catches: a stream that waits forever for a VM that was terminated while
// suspended (nothing will ever answer its reattach), and one that fails
// without saying the VM is gone.
func TestStreamOfATerminatedSuspendedVMFailsNamingTheState(t *testing.T) {
	f := newFixture(t, emulator.Options{VMs: emulator.AgentdLauncher(agentdHost, nil), WallClock: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := Launch(ctx, f.cp, Options{Image: f.emu.AddImage(fmt.Sprintf("gone-%d", time.Now().UnixNano())), Wait: fast,
		SessionOptions: []client.Option{client.WithIdleTimeout(300 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })
	e, err := sb.Session().Start(ctx, []string{"i=0; while :; do echo $i; i=$((i+1)); sleep 0.01; done"}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	st := e.Stream(ctx, 0)
	defer st.Close()
	fl := &followed{}
	done := make(chan struct{})
	go func() { defer close(done); follow(st, fl) }()
	awaitBytes(t, fl, 100, done)
	if err := sb.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	// Past a few idle timeouts the stream is waiting for the resume.
	time.Sleep(time.Second)
	if _, err := Open(f.cp, sb.ID()).Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the stream of a terminated VM never ended")
	}
	if fl.err == nil || !strings.Contains(fl.err.Error(), "TERMINAT") || client.KindOf(fl.err) != taxonomy.KindPlatform {
		t.Fatalf("stream of a terminated VM: %v (kind %v), want a Platform error naming the state", fl.err, client.KindOf(fl.err))
	}
}
