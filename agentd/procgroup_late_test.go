package agentd

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// With a pidfd for the leader, a kill reaches the exec's group even when its
// only member was started after the leader's reap: the kernel resolves the
// group from the leader's struct pid, so no start-time proof is needed (the
// by-number fallback cannot prove such a group is still the exec's, and
// leaves it alone). A forks B once x's leader is reaped, then exits, so B is
// the group's only member. Catches: the pidfd path skipped while a pidfd is
// held (`e.pidfd == nil &&` in signalGroup), which sends every kill by
// number and reports this group gone.
func TestPidfdKillReachesAMemberStartedAfterTheReap(t *testing.T) {
	if !pidfdGroupSignals.Load() {
		t.Skip("this kernel's pidfd_send_signal cannot signal a group")
	}
	d := bootedDaemon(t, func(c *Config) { c.KillGrace = 30 * time.Second })
	dir := t.TempDir()
	gate, pidFile := filepath.Join(dir, "go"), filepath.Join(dir, "pid")
	b := `echo \$\$ >` + pidFile + `.tmp; mv ` + pidFile + `.tmp ` + pidFile + `; exec sleep 1000`
	a := `while [ ! -e ` + gate + ` ]; do sleep 0.01; done; sh -c '` + b + `' &`
	d.mustStart(shell("x", `sh -c "`+a+`" </dev/null >/dev/null 2>&1 &`))
	d.waitExited("x")
	e := d.srv.execs.get("x")
	if e.pidfd == nil {
		// Catches: the pidfd from clone dropped (`pidfd >= 0` negated in
		// spawn, or the SetNonblock check negated, which closes it).
		if fd, err := unix.PidfdOpen(os.Getpid(), 0); err == nil {
			unix.Close(fd)
			t.Fatal("this kernel has pidfds, but the exec kept none")
		}
		t.Skip("the spawn got no pidfd")
	}
	time.Sleep(30 * time.Millisecond) // a later clock tick than the reap
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, pidFile)
	raw, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file %q", raw)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	// Wait until B is the group's only member: A has exited and been reaped
	// (its zombie would still pin the number, and the by-number fallback
	// rightly counts it as a member older than the reap).
	for deadline := time.Now().Add(10 * time.Second); ; {
		if members := groupMembers(e.pgid); len(members) == 1 && members[0] == strconv.Itoa(pid) {
			break
		} else if time.Now().After(deadline) {
			// Only an init that never reaps orphans leaves A behind.
			t.Skipf("group %d is still %v, want only %d", e.pgid, members, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := d.client.ExecKillWithResponse(context.Background(), "x", auth(testToken))
	if err != nil || resp.StatusCode() != 200 || !resp.JSON200.Killed {
		t.Fatalf("kill of a group whose only member started after the reap: %v %d %s", err, resp.StatusCode(), resp.Body)
	}
	for deadline := time.Now().Add(10 * time.Second); procAlive(strconv.Itoa(pid)); {
		if time.Now().After(deadline) {
			t.Fatal("the member started after the reap was not signalled")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// groupMembers lists the processes in group pgid, zombies included.
func groupMembers(pgid int) []string {
	names, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, n := range names {
		pid := filepath.Base(n)
		if pg, _, ok := procGroupAndStart(pid); ok && pg == pgid {
			out = append(out, pid)
		}
	}
	return out
}
