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

// What each source cannot see, said on every usage it measured; short,
// since they ride on every exited poll, ack and exit event.
const (
	missRusageCPU  = "cpu: only the leader and descendants waited for by their parents; not orphans or processes alive at the leader's exit"
	missRusageMem  = "peak_memory_bytes: ru_maxrss, the largest single process, not the processes together"
	missRusagePids = "peak_processes: not reported by wait4"
	missCgroupMem  = "peak_memory_bytes: ru_maxrss (the memory controller is not delegated), the largest single process waited for"
	missCgroupPids = "peak_processes: the pids controller is not delegated, or the kernel has no pids.peak"
	missNoWait     = "cpu, peak_memory_bytes: the leader could not be waited for"
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
	if own == nil || peak > own.bytes {
		// The cached mark is passed: the peak is the command's, or agentd
		// grew since the mark was read. Reading /proc/self/status costs tens
		// of microseconds on the exit's path, so it is read again at most
		// once a second; in between the note is said (a bound is never
		// wrong), and the mark is read again at the next chance.
		if own != nil && time.Since(own.read) < time.Second {
			return own.note
		}
		b := readOwnHWM()
		own = &hwm{b, "peak_memory_bytes: at most this, as a vfork'd child inherits agentd's high-water mark (" + strconv.FormatUint(b>>10, 10) + " KiB)", time.Now()}
		ownHWM.Store(own)
	}
	if peak <= own.bytes {
		return own.note
	}
	return ""
}

// hwm is agentd's VmHWM in bytes and the note naming it.
type hwm struct {
	bytes uint64
	note  string
	read  time.Time
}

var ownHWM atomic.Pointer[hwm]

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
