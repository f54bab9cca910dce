package agentd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
)

// An acked entry is kept for exactly exec_ttl_secs after its ack: not a
// moment less, and collected at the TTL itself. collect is called with
// chosen times (the loop's ticker would only add waiting). Catches, in
// collect's `now.Sub(e.ackedAt) >= r.cfg.ExecTTL`: `<` (an acked entry is
// collected at once, before the TTL) and `>` (kept at exactly the TTL), and
// `n++` made `n--` (the count collect returns).
func TestAckedEntryIsKeptForExactlyTheTTL(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.ExecTTL = time.Hour })
	d.mustStart(protocol.StartRequest{ExecID: "ttl", Command: []string{"true"}})
	d.waitExited("ttl")
	if resp, err := d.client.ExecAckWithResponse(context.Background(), "ttl", auth(testToken)); err != nil || resp.StatusCode() != http.StatusOK {
		t.Fatalf("ack: %v", err)
	}
	e := d.srv.execs.get("ttl")
	d.srv.execs.mu.Lock()
	ackedAt := e.ackedAt
	d.srv.execs.mu.Unlock()
	if n := d.srv.execs.collect(ackedAt.Add(time.Hour - time.Nanosecond)); n != 0 {
		t.Fatalf("collect a nanosecond before the TTL took %d entries", n)
	}
	if code, o := d.poll("ttl"); code != http.StatusOK || o.Phase != string(protocol.PhaseAcked) {
		t.Fatalf("the acked entry before its TTL: %d %s", code, o.Phase)
	}
	if n := d.srv.execs.collect(ackedAt.Add(time.Hour)); n != 1 {
		t.Fatalf("collect at exactly the TTL took %d entries, want 1", n)
	}
	if code, _ := d.poll("ttl"); code != http.StatusNotFound {
		t.Fatalf("the entry past its TTL is still there: %d", code)
	}
}

// loggedDaemon is a bootstrapped daemon whose log (info and up) the test
// reads back.
func loggedDaemon(t *testing.T) (*daemon, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	srv, err := NewServer(testConfig(), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	d := serveDaemon(t, srv)
	d.bootstrap(nil)
	return d, logs
}

// syncBuffer is a log sink safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The daemon's log says what happened: a child killed by a signal logs
// exit_code=-1 (it has none) with its signal, and a collection logs its
// count only when it took something. Catches: derefOr(st.code, -1) made 1
// in supervise (a SIGKILLed child logged as exit_code=1, which reads as the
// command failing), and collect's `n > 0` made `>= 0` (a debug line every
// tick of an idle daemon) or `<= 0` (a collection that took entries never
// logged).
func TestDaemonLogSaysWhatHappened(t *testing.T) {
	var logs syncBuffer
	cfg := testConfig()
	cfg.ExecTTL = time.Hour
	srv, err := NewServer(cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	d := serveDaemon(t, srv)
	d.bootstrap(nil)
	d.mustStart(shell("killed", "kill -9 $$"))
	d.waitExited("killed")
	// The supervisor logs "exec finished" just after the exit becomes
	// visible, so the line may trail the poll by a moment.
	for i := 0; i < 500 && !strings.Contains(logs.String(), "exec finished"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "exit_code=-1 signal=9") {
		t.Fatalf("a SIGKILLed child's log line lacks exit_code=-1 signal=9:\n%s", logs.String())
	}
	if n := d.srv.execs.collect(time.Now()); n != 0 || strings.Contains(logs.String(), "collected acked execs") {
		t.Fatalf("a collection that took nothing (%d) logged one:\n%s", n, logs.String())
	}
	if resp, err := d.client.ExecAckWithResponse(context.Background(), "killed", auth(testToken)); err != nil || resp.StatusCode() != http.StatusOK {
		t.Fatalf("ack: %v", err)
	}
	if n := d.srv.execs.collect(time.Now().Add(2 * time.Hour)); n != 1 || !strings.Contains(logs.String(), `msg="collected acked execs" count=1`) {
		t.Fatalf("a collection that took %d entries logged:\n%s", n, logs.String())
	}
}

// A spawn that fails after its pipes were made closes every one of them,
// the stdin pipe included. The file is executable but no format the kernel
// runs, so execve itself fails (ENOEXEC) after the pipes exist. Catches: the
// stdin pipe's close on that path skipped (`stdinW != nil` negated), one
// descriptor leaked per failed start with stdin.
func TestFailedSpawnWithStdinLeaksNoDescriptor(t *testing.T) {
	d := bootedDaemon(t, nil)
	bad := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(bad, []byte{0, 1, 2, 3, 4, 5, 6, 7}, 0o755); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(es)
	}
	try := func() {
		r := d.start(protocol.StartRequest{ExecID: "bad", Command: []string{bad}, Stdin: true})
		if r.StatusCode() != http.StatusInternalServerError {
			t.Fatalf("start of a file the kernel cannot run: %d %s", r.StatusCode(), r.Body)
		}
	}
	try() // warm the connection and any lazily opened descriptor
	before := count()
	for range 20 {
		try()
	}
	if after := count(); after > before+3 {
		t.Fatalf("open descriptors grew from %d to %d over 20 failed spawns with stdin", before, after)
	}
}

// exec_ttl_secs=0 (LoadConfig takes it) means an acked entry goes at the
// collector's next tick, which is then its 10 ms floor. Catches:
// `10*time.Millisecond` made `10/time.Millisecond` in collectLoop (the
// period is then 0 and time.NewTicker panics, taking the daemon down).
func TestZeroTTLCollectsAtTheNextTick(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.ExecTTL = 0 })
	d.mustStart(protocol.StartRequest{ExecID: "zero", Command: []string{"true"}})
	d.waitExited("zero")
	if resp, err := d.client.ExecAckWithResponse(context.Background(), "zero", auth(testToken)); err != nil || resp.StatusCode() != http.StatusOK {
		t.Fatalf("ack: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if code, _ := d.poll("zero"); code == http.StatusNotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("with exec_ttl_secs=0 the acked entry was never collected")
		}
	}
}

func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			var n int
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	t.Fatal("no Threads line")
	return 0
}

// Waiting for a child parks on its pidfd through the runtime poller, so
// forty running execs cost no thread each. Catches, in waitChild, the pidfd
// path skipped (`e.pidfd != nil` or `err == nil` negated): every child then
// holds a thread blocked in waitid for its whole life.
func TestWaitingForChildrenTakesNoThreadEach(t *testing.T) {
	d := bootedDaemon(t, nil)
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Skip("no pidfd on this kernel: waiting takes the blocking path by design")
	}
	unix.Close(fd)
	before := threads(t)
	for i := range 40 {
		d.mustStart(protocol.StartRequest{ExecID: fmt.Sprintf("s%d", i), Command: []string{"sleep", "30"}})
	}
	time.Sleep(200 * time.Millisecond) // let any blocking waiter reach waitid
	if after := threads(t); after-before >= 20 {
		t.Fatalf("threads grew from %d to %d with 40 children running", before, after)
	}
}

// Releasing exactly reclaimAfterBytes starts a collection: the threshold is
// inclusive. Catches: `pending < reclaimAfterBytes` made `<=` in released
// (an ack of exactly half the default max_output_bytes, the size the
// threshold was chosen for, would never prompt one).
func TestReleasingExactlyTheThresholdCollects(t *testing.T) {
	var c reclaimer
	c.released(reclaimAfterBytes)
	for deadline := time.Now().Add(10 * time.Second); c.pending.Load() != 0 || c.running.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pending %d after releasing exactly reclaimAfterBytes: no collection started", c.pending.Load())
		}
	}
}
