package agentd

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// A retried start that waited on the first start of its exec_id answers the
// phase the exec has when the first start finishes, not "running" by
// default: a client that retries a start after a timeout must learn that a
// short command has already exited. Which of the two a real retry meets is a
// race between the child and the retry's goroutine, so the test holds the
// first start open itself: it claims the id as start does, parks a retry on
// the claim, spawns a child that exits, and only then publishes it.
// Catches, in start's wait branch, `e := r.get(id); e != nil` negated (the
// retry answers "running" for an exited child, and would dereference nil
// for a collected one).
func TestRetryThatWaitedAnswersTheExitedPhase(t *testing.T) {
	d := bootedDaemon(t, nil)
	r := d.srv.execs
	sp, serr := buildSpec(&protocol.StartRequest{ExecID: "raced", Command: []string{"true"}}, nil)
	if serr != nil {
		t.Fatalf("spec: %v", serr)
	}
	op := &startOp{done: make(chan struct{})}
	r.mu.Lock()
	r.starting["raced"] = op
	r.mu.Unlock()

	type answer struct {
		phase protocol.Phase
		err   *startError
	}
	retried := make(chan answer, 1)
	go func() {
		ph, err := r.start("raced", sp)
		retried <- answer{ph, err}
	}()
	waitForParkedStart(t)

	e, err := r.spawn("raced", sp)
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	select {
	case <-e.finished:
	case <-time.After(30 * time.Second):
		t.Fatal("`true` did not finish in 30 s")
	}
	r.mu.Lock()
	delete(r.starting, "raced")
	r.execs["raced"] = e
	r.mu.Unlock()
	close(op.done)

	select {
	case a := <-retried:
		if a.err != nil || a.phase != protocol.PhaseExited {
			t.Fatalf("the retry answered %q, %v; want %q: its exec had exited before the first start returned", a.phase, a.err, protocol.PhaseExited)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the retry did not return after the first start finished")
	}
}

// waitForParkedStart waits until a goroutine is blocked receiving inside
// registry.start: the retry has passed the execs check and waits on the
// claim, so publishing the exec cannot send it down the other branch.
func waitForParkedStart(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for range 3000 {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[chan receive") && strings.Contains(g, "(*registry).start(") {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the retried start never waited on the first start's claim")
}
