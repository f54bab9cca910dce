package agentd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// inPidNamespace is set in the environment of a test binary re-run as pid 1
// of its own pid namespace (unshare --pid --fork --mount-proc), where the
// test may choose the pids its children get without touching the host's.
const inPidNamespace = "AGENTD_TEST_IN_PIDNS"

// The by-number kill path finds a group's members by scanning /proc for
// directories named by digits, and every digit counts: a TERM-ignoring
// member whose pid starts with 9 still gets its SIGKILL after the leader is
// reaped. To give the member such a pid without writing the machine-wide
// ns_last_pid, the test re-runs itself as pid 1 of a new pid namespace with
// its own /proc, and the exec's script writes that namespace's ns_last_pid
// just before it forks the member.
//
// Catches: groupHasMemberStartedBy's `name[0] > '9'` made `>= '9'` (pids
// starting with 9 are skipped, so the escalation finds the group empty and
// leaves the member running).
func TestKillReachesAMemberWhosePidStartsWithNine(t *testing.T) {
	if os.Getenv(inPidNamespace) == "" {
		if os.Geteuid() != 0 {
			t.Skip("a new pid namespace needs root")
		}
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Skip("no unshare(1)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, unshare, "--pid", "--fork", "--mount-proc", "--kill-child",
			os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), inPidNamespace+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "unshare failed") {
			t.Skipf("cannot make a pid namespace here: %s", out)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("the test in its own pid namespace: %v\n%s", err, out)
		}
		return
	}
	// Never write ns_last_pid unless it is this namespace's own.
	if os.Getpid() != 1 {
		t.Fatalf("%s is set but this process is pid %d, not 1 of a new pid namespace", inPidNamespace, os.Getpid())
	}
	was := pidfdGroupSignals.Load()
	pidfdGroupSignals.Store(false)
	t.Cleanup(func() { pidfdGroupSignals.Store(was) })

	d := bootedDaemon(t, func(c *Config) { c.KillGrace = 300 * time.Millisecond })
	// The leader execs its sleep, so once it is reaped the member is the
	// group's only process: any other child of the leader would be
	// orphaned to this pid 1, which does not reap, and its zombie would
	// prove the group by itself.
	// A Go thread started between the write and the fork takes the pid meant
	// for the member; then try again from a higher 9-prefix.
	for i, last := range []int{97, 997, 9997} {
		id := "x" + strconv.Itoa(i)
		pidFile := filepath.Join(t.TempDir(), "pid")
		d.mustStart(shell(id, "echo "+strconv.Itoa(last)+" >/proc/sys/kernel/ns_last_pid; "+
			"(trap '' TERM; exec sh -c 'echo $$ >"+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"; exec sleep 1000') </dev/null >/dev/null 2>&1 & exec sleep 60"))
		waitFile(t, pidFile)
		raw, _ := os.ReadFile(pidFile)
		pid := strings.TrimSpace(string(raw))
		if !strings.HasPrefix(pid, "9") {
			d.srv.killAll()
			d.waitExited(id)
			continue
		}
		resp, _ := d.client.ExecKillWithResponse(context.Background(), id, auth(testToken))
		if resp.StatusCode() != 200 || !resp.JSON200.Killed {
			t.Fatalf("kill: %d %s", resp.StatusCode(), resp.Body)
		}
		d.waitExited(id)
		waitEscalations(t, d)
		// SIGKILL is delivered, not awaited, by kill(2): give the member a
		// bounded while to die.
		for deadline := time.Now().Add(10 * time.Second); procAlive(pid); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the TERM-ignoring member, pid %s, outlived kill_grace and the escalation: no SIGKILL reached it", pid)
			}
		}
		return
	}
	t.Fatal("no member got a pid starting with 9")
}
