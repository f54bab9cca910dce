package agentd

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// pidfdGroupSignals is whether pidfd_send_signal takes
// PIDFD_SIGNAL_PROCESS_GROUP (Linux 6.9+); it turns false on the first EINVAL.
// A var so tests can exercise the fallback the platform's 6.1 kernel uses.
var pidfdGroupSignals atomic.Bool

func init() { pidfdGroupSignals.Store(true) }

// signalGroup sends sig (0 probes) to the exec's process group if the group can
// still be this exec's, and reports whether it reached a live member.
//
// A process group persists while any member lives, and its number is pinned
// as long as it does; once it is empty the number can name another exec's
// new group. Through the leader's pidfd (Linux 6.9+) the kernel resolves the
// group from the leader's struct pid, which a reused number never matches, so
// that is exact. Without it the group is signalled by number while the leader
// is unreaped (its zombie pins the number); after the reap, only while
// ownGroupLocked proves some member of the group started no later than the
// reap. Whether a pipe is still held proves nothing either way: a member may
// hold none (it redirected to /dev/null), and a holder may have left the group.
func (e *execEntry) signalGroup(sig unix.Signal) (bool, error) {
	e.sigMu.Lock()
	defer e.sigMu.Unlock()
	if e.groupGone {
		return false, nil
	}
	if e.pidfd != nil && pidfdGroupSignals.Load() {
		err := unix.PidfdSendSignal(int(e.pidfd.Fd()), sig, nil, unix.PIDFD_SIGNAL_PROCESS_GROUP)
		switch err {
		case nil:
			return true, nil
		case unix.ESRCH:
			e.markGoneLocked()
			return false, nil
		case unix.EINVAL:
			pidfdGroupSignals.Store(false)
		default:
			return false, err
		}
	}
	if e.reaped && !e.ownGroupLocked() {
		// No member older than the reap: the group is empty, or the number
		// names a newer group. Either way it is never ours again, since no
		// original member is left to rejoin it.
		e.markGoneLocked()
		return false, nil
	}
	err := unix.Kill(-e.pgid, sig)
	if err == unix.ESRCH {
		if e.reaped {
			e.markGoneLocked()
		}
		return false, nil
	}
	return err == nil, err
}

// ownGroupLocked reports, after the leader's reap, whether pgid still names
// this exec's group: kill(-pgid, 0) finds it, and some process in it started
// no later than the reap. A group's number cannot be reused while any member
// lives, so a member that was already running at the reap has been holding
// the number since before the group could have emptied. Start times are clock
// ticks (USER_HZ, 10 ms), so a process started in the same tick just after the
// reap also counts; a recycled group inside 10 ms would need the pid counter
// to wrap all the way round in that time, which it cannot.
func (e *execEntry) ownGroupLocked() bool {
	if err := unix.Kill(-e.pgid, 0); err == unix.ESRCH {
		return false
	}
	return groupHasMemberStartedBy(e.pgid, e.reapTicks)
}

// userHZ is the unit of /proc/<pid>/stat's starttime: sysconf(_SC_CLK_TCK),
// which the Linux ABI fixes at 100 on every architecture Go supports.
const userHZ = 100

// bootTicks is now as /proc/<pid>/stat's starttime counts it: CLOCK_BOOTTIME
// (which includes suspend, as starttime does since Linux 5.3) in USER_HZ
// ticks, rounded down as the kernel rounds starttime.
func bootTicks() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		// Cannot happen on Linux; zero makes no member count as older, which
		// refuses the signal rather than risk another exec's group.
		return 0
	}
	return uint64(ts.Sec)*userHZ + uint64(ts.Nsec)/(1e9/userHZ)
}

// groupHasMemberStartedBy scans /proc for a process in group pgid whose start
// time (stat field 22) is at most ticks. Zombies count: they pin the number.
func groupHasMemberStartedBy(pgid int, ticks uint64) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false
	}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		pg, start, ok := procGroupAndStart(name)
		if ok && pg == pgid && start <= ticks {
			return true
		}
	}
	return false
}

// procGroupAndStart reads pgrp (field 5) and starttime (field 22) of
// /proc/<pid>/stat. The fields are counted after the last ')', since comm may
// hold spaces and parentheses.
func procGroupAndStart(pid string) (pgrp int, start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0, 0, false
	}
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	return pgrp, start, err1 == nil && err2 == nil
}

func (e *execEntry) markGoneLocked() {
	e.groupGone = true
	if e.pidfd != nil {
		e.pidfd.Close()
		e.pidfd = nil
	}
}

// escalate sends SIGTERM to the exec's process group and, if any member is
// still alive after kill_grace, SIGKILL. Before each signal it re-checks that
// the group can still be this exec's (signalGroup). It returns whether SIGTERM
// reached a live group; the escalation runs on its own so the caller is
// answered now.
func (r *registry) escalate(e *execEntry) bool {
	sent, err := e.signalGroup(unix.SIGTERM)
	if err != nil {
		r.log.Warn("killpg failed", "exec_id", e.id, "pgid", e.pgid, "err", err.Error())
	}
	if !sent {
		return false
	}
	r.escalations.Add(1)
	go func() {
		defer r.escalations.Done()
		grace := time.NewTimer(r.cfg.KillGrace)
		defer grace.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-grace.C:
				if alive, _ := e.signalGroup(0); alive {
					r.log.Warn("process group survived SIGTERM; sending SIGKILL", "exec_id", e.id, "pgid", e.pgid)
					_, _ = e.signalGroup(unix.SIGKILL)
				}
				return
			case <-tick.C:
				if alive, _ := e.signalGroup(0); !alive {
					return // the whole group is gone, or no longer provably ours
				}
			}
		}
	}()
	return true
}
