package agentd

import (
	"net/http"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// A fast writer's output waits for the stream its client attaches after the
// start: 4 MB (four replay windows) written before anyone attaches all
// arrive, with no gap. The grace is a minute here, so only the attach can
// end it; the 300 ms pause lets the child run ahead of the attach. Catches:
// a pump that moves the window past unread bytes while nobody has attached
// (the stream then opens with a gap over the start), and an attach that
// does not wake a pump held by the grace (the stream then stalls until the
// grace ends, past the test's 20 s client deadline).
func TestStreamAttachedAfterTheStartLosesNothing(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.StreamAttachGrace = time.Minute })
	const size = 4_000_000
	d.mustStart(protocol.StartRequest{ExecID: "fast", Command: []string{"head", "-c", "4000000", "/dev/zero"}})
	time.Sleep(300 * time.Millisecond)
	done := make(chan struct{})
	var out []byte
	var gaps []protocol.GapEvent
	var exit *protocol.ExitEvent
	go func() {
		defer close(done)
		out, gaps, exit = collect(t, d.stream("fast", nil), 0)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not finish: the held pump was not released by the attach")
	}
	if len(gaps) != 0 || len(out) != size || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Fatalf("got %d bytes, gaps %+v, exit %+v; want all %d bytes and no gap", len(out), gaps, exit, size)
	}
}

// A command nobody streams is held back at most the grace, once: an
// unattached 4 MB writer with a 100 ms grace still exits. Catches: a grace
// wait with no timer (the child blocks on its full pipe until someone
// attaches, here never, past the 20 s bound of the poll loop).
func TestAttachGraceEndsWithoutAStream(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.StreamAttachGrace = 100 * time.Millisecond; c.PollHold = 0 })
	d.mustStart(protocol.StartRequest{ExecID: "alone", Command: []string{"head", "-c", "4000000", "/dev/zero"}})
	o := d.waitExited("alone")
	if o.ExitCode == nil || *o.ExitCode != 0 {
		t.Fatalf("unattached writer: %+v", o)
	}
	if code, _ := d.poll("alone"); code != http.StatusOK {
		t.Fatalf("poll: %d", code)
	}
}

// A first stream that attaches where the held output ends (it has nothing
// to read yet) releases the pump at once too. The pump, held by the grace
// with a full window, can only be held at or below one window's worth, so
// offset 1 MiB is at or past everything written. Catches: an attach that
// does not wake the held pump; with no byte to consume the reader never
// signals progress, and both wait out the minute-long grace.
func TestFirstStreamAtTheEndReleasesTheHeldPump(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.StreamAttachGrace = time.Minute })
	const size, from = 4_000_000, 1 << 20
	d.mustStart(protocol.StartRequest{ExecID: "tail", Command: []string{"head", "-c", "4000000", "/dev/zero"}})
	time.Sleep(300 * time.Millisecond)
	done := make(chan struct{})
	var out []byte
	var gaps []protocol.GapEvent
	go func() {
		defer close(done)
		off := uint64(from)
		out, gaps, _ = collect(t, d.stream("tail", &off), from)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not finish: attaching did not release the held pump")
	}
	if len(gaps) != 0 || len(out) != size-from {
		t.Fatalf("got %d bytes from offset %d, gaps %+v; want %d and no gap", len(out), from, gaps, size-from)
	}
}
