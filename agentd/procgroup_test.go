package agentd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// bothSignalPaths runs f with pidfd group signals (Linux 6.9+) and with the
// by-number fallback the platform's 6.1 guest kernel takes.
func bothSignalPaths(t *testing.T, f func(t *testing.T)) {
	for _, pidfd := range []bool{true, false} {
		name := "pidfd"
		if !pidfd {
			name = "by-number"
		}
		t.Run(name, func(t *testing.T) {
			was := pidfdGroupSignals.Load()
			pidfdGroupSignals.Store(pidfd)
			t.Cleanup(func() { pidfdGroupSignals.Store(was) })
			f(t)
		})
	}
}

// reuseNumber simulates what pid reuse does once an exec's group is empty:
// the number the exec captured now names another exec's group.
func reuseNumber(d *daemon, gone, owner string) {
	e, o := d.srv.execs.get(gone), d.srv.execs.get(owner)
	e.sigMu.Lock()
	e.pgid = o.pgid
	e.sigMu.Unlock()
}

func waitEscalations(t *testing.T, d *daemon) {
	t.Helper()
	done := make(chan struct{})
	go func() { d.srv.execs.escalations.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("an escalation never ended")
	}
}

// canaryRuns checks a canary exec stays running for a short bounded while.
func canaryRuns(t *testing.T, d *daemon, id string) {
	t.Helper()
	for range 20 {
		if _, o := d.poll(id); o.Phase != string(protocol.PhaseRunning) {
			t.Fatalf("canary %s was signalled: phase %s signal %s", id, o.Phase, o.raw["signal"])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Catches: ExecKill signalling -pgid by number after the child was reaped and
// its pipes closed (escalate's unconditional unix.Kill(-e.pgid, SIGTERM)):
// once the group is empty the number can name another exec's group, which
// would be killed and reported killed:true.
func TestKillAfterExitSignalsNothing(t *testing.T) {
	bothSignalPaths(t, func(t *testing.T) {
		d := bootedDaemon(t, func(c *Config) { c.KillGrace = 200 * time.Millisecond })
		d.mustStart(shell("canary", "sleep 60"))
		d.mustStart(protocol.StartRequest{ExecID: "done", Command: []string{"true"}})
		d.waitExited("done")
		reuseNumber(d, "done", "canary")
		resp, err := d.client.ExecKillWithResponse(context.Background(), "done", auth(testToken))
		if err != nil || resp.StatusCode() != 200 {
			t.Fatalf("kill: %v %d", err, resp.StatusCode())
		}
		if resp.JSON200.Killed {
			t.Fatal("a kill after the exec's group was gone reported killed:true")
		}
		waitEscalations(t, d)
		canaryRuns(t, d, "canary")
	})
}

// Catches: the escalation goroutine sending SIGKILL to -pgid at the end of
// kill_grace without re-checking that the group can still be the exec's
// (the old unix.Kill(-e.pgid, 0) probe then unix.Kill(-e.pgid, SIGKILL)); and,
// by number, taking "kill(-pgid, 0) succeeds" alone as proof the group is
// ours once it has truly emptied and the number names a newer group.
//
// A number can only be reused once its group is empty, so the reuse is faked
// only after every member of x is gone and reaped, onto a canary started after
// x's reap: what pid reuse could really produce.
func TestEscalationRechecksTheGroupBeforeSIGKILL(t *testing.T) {
	bothSignalPaths(t, func(t *testing.T) {
		d := bootedDaemon(t, func(c *Config) { c.KillGrace = 30 * time.Second })
		dir := t.TempDir()
		ready, stop := filepath.Join(dir, "ready"), filepath.Join(dir, "stop")
		// A lone leader that ignores SIGTERM and exits when told: once it is
		// reaped the group is truly empty (no orphan is left for an init that
		// may never reap it).
		d.mustStart(shell("x", "trap '' TERM; touch "+ready+"; while [ ! -e "+stop+" ]; do sleep 0.01; done"))
		waitFile(t, ready)
		resp, _ := d.client.ExecKillWithResponse(context.Background(), "x", auth(testToken))
		if resp.StatusCode() != 200 || !resp.JSON200.Killed {
			t.Fatalf("kill of a live exec: %d %s", resp.StatusCode(), resp.Body)
		}
		if err := os.WriteFile(stop, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		d.waitExited("x")
		// The escalation sees the empty group and ends long before kill_grace.
		waitEscalationsWithin(t, d, 10*time.Second)

		time.Sleep(30 * time.Millisecond) // a later clock tick than x's reap
		d.mustStart(shell("canary", "sleep 60"))
		e, o := d.srv.execs.get("x"), d.srv.execs.get("canary")
		e.sigMu.Lock()
		e.pgid = o.pgid
		e.groupGone = false // as if no probe had yet seen x's group empty
		e.sigMu.Unlock()
		resp, _ = d.client.ExecKillWithResponse(context.Background(), "x", auth(testToken))
		if resp.StatusCode() != 200 || resp.JSON200.Killed {
			t.Fatalf("kill of an exec whose group number names a newer group: %d %s", resp.StatusCode(), resp.Body)
		}
		waitEscalations(t, d)
		canaryRuns(t, d, "canary")
	})
}

// Catches: the by-number fallback treating the group as gone once the leader
// is reaped and both pipes are closed (signalGroup's old
// "e.reaped && e.pipesOpen == 0 && !e.lingered" check), so a member that
// ignores SIGTERM and holds no pipe keeps the pgid and never gets SIGKILL.
func TestKillEscalatesToAnOrphanedMember(t *testing.T) {
	bothSignalPaths(t, func(t *testing.T) {
		d := bootedDaemon(t, func(c *Config) { c.KillGrace = 300 * time.Millisecond })
		pidFile := filepath.Join(t.TempDir(), "pid")
		d.mustStart(shell("x", "(trap '' TERM; exec sh -c 'echo $$ >"+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"; exec sleep 1000') </dev/null >/dev/null 2>&1 & sleep 60"))
		waitFile(t, pidFile)
		raw, _ := os.ReadFile(pidFile)
		pid := strings.TrimSpace(string(raw))
		t.Cleanup(func() {
			if n, err := strconv.Atoi(pid); err == nil && n > 0 {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		})
		resp, _ := d.client.ExecKillWithResponse(context.Background(), "x", auth(testToken))
		if resp.StatusCode() != 200 || !resp.JSON200.Killed {
			t.Fatalf("kill: %d %s", resp.StatusCode(), resp.Body)
		}
		d.waitExited("x")
		deadline := time.Now().Add(10 * time.Second)
		for procAlive(pid) {
			if time.Now().After(deadline) {
				t.Fatal("the TERM-ignoring member outlived kill_grace: no SIGKILL reached it")
			}
			time.Sleep(10 * time.Millisecond)
		}
		waitEscalations(t, d)
	})
}

// procAlive reports whether pid exists and is not a zombie (an init that does
// not reap leaves a killed orphan as one).
func procAlive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(path); err != nil; _, err = os.Stat(path) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitEscalationsWithin(t *testing.T, d *daemon, limit time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { d.srv.execs.escalations.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatal("the escalation kept waiting on an empty group")
	}
}

// Catches: the timeout timer stopped right after the reap (timer.Stop() after
// waitChild), so a grandchild still holding the pipes outlives timeout_sec and
// the exec runs on until output_linger.
func TestTimeoutKillsAGrandchildHoldingThePipes(t *testing.T) {
	bothSignalPaths(t, func(t *testing.T) {
		// The linger outlasts the bound below, so only the timeout can end
		// the exec in time.
		d := bootedDaemon(t, func(c *Config) { c.OutputLinger = 8 * time.Second; c.KillGrace = time.Second })
		req := shell("x", "sleep 60 & exit 0")
		timeout := 0.5
		req.TimeoutSec = &timeout
		began := time.Now()
		d.mustStart(req)
		o := d.waitExited("x")
		if took := time.Since(began); took > 5*time.Second {
			t.Fatalf("exec ended after %v: timeout_sec never reached the grandchild", took)
		}
		if o.WritersMayBeAlive != nil && *o.WritersMayBeAlive {
			t.Fatal("writers_may_be_alive: the grandchild was not killed by the timeout")
		}
	})
}

// Catches: the pidfd kept open until ack plus TTL although the group was
// known gone when output ended (no markGoneLocked after supervise's pumps).
func TestPidfdClosedOnceTheGroupIsGone(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.mustStart(protocol.StartRequest{ExecID: "x", Command: []string{"true"}})
	d.waitExited("x")
	e := d.srv.execs.get("x")
	e.sigMu.Lock()
	defer e.sigMu.Unlock()
	if e.pidfd != nil || !e.groupGone {
		t.Fatalf("after a finished exec with no members left: pidfd open %v, group gone %v", e.pidfd != nil, e.groupGone)
	}
}
