package agentd

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// What rusage cannot see, said on every usage it measured.
const (
	missRusageCPU  = "user_cpu_secs, system_cpu_secs: wait4 counts the leader and the descendants their parents waited for; orphans, daemons and processes still running when the leader exited are not counted"
	missRusageMem  = "peak_memory_bytes: wait4's ru_maxrss is the largest single resident set among the processes it counts, not the exec's processes together"
	missRusagePids = "peak_processes: wait4 reports no process count"
	missCgroupMem  = "peak_memory_bytes: the memory controller is not delegated to the exec's cgroup, so this is wait4's ru_maxrss (the largest single resident set among the leader and the descendants waited for)"
	missCgroupPids = "peak_processes: the pids controller is not delegated to the exec's cgroup (or the kernel has no pids.peak)"
	missNoWait     = "user_cpu_secs, system_cpu_secs, peak_memory_bytes: the leader could not be waited for, so wait4 reported nothing"
)

// measureUsage is what the exec used, from its cgroup when it has one
// (every process of it) and from the leader's rusage otherwise. Stdout and
// stderr bytes are filled in by the output log's finish.
func measureUsage(e *execEntry, ru *syscall.Rusage, reaped bool) (*protocol.ExecUsage, bool) {
	u := &protocol.ExecUsage{
		Source:   protocol.Rusage,
		WallSecs: time.Since(e.started).Seconds(),
		Missing:  []string{},
	}
	if e.cg != nil {
		if c, ok := e.cg.read(); ok {
			u.Source = protocol.Cgroup
			u.UserCPUSecs = float64(c.userUS) / 1e6
			u.SystemCPUSecs = float64(c.systemUS) / 1e6
			if c.haveMem {
				u.PeakMemoryBytes = c.peakMem
			} else {
				u.PeakMemoryBytes = maxRSSBytes(ru)
				u.Missing = append(u.Missing, missCgroupMem)
				if m := inheritedPeakNote(u.PeakMemoryBytes); m != "" {
					u.Missing = append(u.Missing, m)
				}
			}
			if c.havePids {
				n := c.peakPids
				u.PeakProcesses = &n
			} else {
				u.Missing = append(u.Missing, missCgroupPids)
			}
			return u, c.oomKilled
		}
	}
	if !reaped {
		u.Missing = append(u.Missing, missNoWait, missRusagePids)
		return u, false
	}
	u.UserCPUSecs = timevalSecs(ru.Utime)
	u.SystemCPUSecs = timevalSecs(ru.Stime)
	u.PeakMemoryBytes = maxRSSBytes(ru)
	u.Missing = append(u.Missing, missRusageCPU, missRusageMem, missRusagePids)
	if m := inheritedPeakNote(u.PeakMemoryBytes); m != "" {
		u.Missing = append(u.Missing, m)
	}
	return u, false
}

// inheritedPeakNote says when ru_maxrss may be agentd's, not the command's.
// The child is forked with CLONE_VM|CLONE_VFORK, and exec records the old
// (shared) mm's high-water mark, agentd's VmHWM, in the child's maxrss: a
// command smaller than agentd reports agentd's peak. A maxrss above
// agentd's VmHWM now (which only grows) is the command's; one at or below
// it is only a bound.
func inheritedPeakNote(peak uint64) string {
	own := ownHWM.Load()
	if peak > own {
		// Read again only when the cached mark is passed: it is stale only
		// if agentd grew since.
		own = readOwnHWM()
		ownHWM.Store(own)
	}
	if peak <= own {
		return "peak_memory_bytes: at most this; the command's own peak is not known, since a child forked by vfork inherits agentd's high-water mark (" + strconv.FormatUint(own>>10, 10) + " KiB)"
	}
	return ""
}

// ownHWM caches agentd's VmHWM in bytes.
var ownHWM atomic.Uint64

// readOwnHWM is VmHWM of /proc/self/status in bytes, 0 when unreadable.
func readOwnHWM() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return n << 10
			}
		}
	}
	return 0
}

func timevalSecs(t syscall.Timeval) float64 {
	return float64(t.Sec) + float64(t.Usec)/1e6
}

// maxRSSBytes is ru_maxrss, which Linux reports in KiB.
func maxRSSBytes(ru *syscall.Rusage) uint64 {
	if ru.Maxrss < 0 {
		return 0
	}
	return uint64(ru.Maxrss) * 1024
}
