package agentd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// metricsSampler reads the guest's CPU, memory, disk and load for GET
// /v1/metrics: three small /proc files and one statfs, with no process walk,
// so a poll every second costs microseconds. CPU use is a rate, so it is
// measured against the previous call's counters (against boot on the first).
type metricsSampler struct {
	procRoot string // "/proc"; a test may aim it elsewhere

	mu       sync.Mutex
	prev     cpuTimes
	prevAt   time.Time
	havePrev bool
}

// cpuTimes is the aggregate line of /proc/stat, in USER_HZ ticks.
type cpuTimes struct {
	busy, total uint64
}

// parseProcStat reads the aggregate "cpu " line of /proc/stat: busy is every
// column but idle (4th) and iowait (5th); guest time is already inside user.
func parseProcStat(b []byte) (cpuTimes, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 5 || string(fields[0]) != "cpu" {
			continue
		}
		var t cpuTimes
		// user nice system idle iowait irq softirq steal guest guest_nice
		for i, f := range fields[1:] {
			if i >= 8 {
				break // guest and guest_nice are counted in user and nice
			}
			v, err := strconv.ParseUint(string(f), 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat: cpu column %d is not a counter", i+1)
			}
			if t.total+v < t.total {
				return cpuTimes{}, errors.New("/proc/stat: the cpu counters overflow")
			}
			t.total += v
			if i != 3 && i != 4 {
				t.busy += v
			}
		}
		return t, nil
	}
	return cpuTimes{}, errors.New("/proc/stat has no aggregate cpu line")
}

// parseMeminfo reads MemTotal and MemAvailable (kB) from /proc/meminfo, in
// bytes.
func parseMeminfo(b []byte) (total, available uint64, err error) {
	var haveTotal, haveAvail bool
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		fields := bytes.Fields(line)
		if len(fields) < 2 {
			continue
		}
		var dst *uint64
		switch string(fields[0]) {
		case "MemTotal:":
			dst, haveTotal = &total, true
		case "MemAvailable:":
			dst, haveAvail = &available, true
		default:
			continue
		}
		// 1<<53 kB is 1<<63 bytes, past the int64 the API gives memory
		// counts (and 1<<54 kB would wrap to 0).
		v, perr := strconv.ParseUint(string(fields[1]), 10, 64)
		if perr != nil || v >= 1<<53 {
			return 0, 0, fmt.Errorf("/proc/meminfo: %s is not a kB count", fields[0])
		}
		*dst = v * 1024
	}
	if !haveTotal || !haveAvail {
		return 0, 0, errors.New("/proc/meminfo lacks MemTotal or MemAvailable")
	}
	return total, min(available, total), nil
}

// parseLoadavg reads the three averages at the start of /proc/loadavg.
func parseLoadavg(b []byte) (protocol.LoadAverage, error) {
	fields := bytes.Fields(b)
	if len(fields) < 3 {
		return protocol.LoadAverage{}, errors.New("/proc/loadavg is short")
	}
	var v [3]float64
	for i := range v {
		f, err := strconv.ParseFloat(string(fields[i]), 64)
		if err != nil || f < 0 || f != f || f > 1e9 {
			return protocol.LoadAverage{}, fmt.Errorf("/proc/loadavg: field %d is not a load", i+1)
		}
		v[i] = f
	}
	return protocol.LoadAverage{Load1: v[0], Load5: v[1], Load15: v[2]}, nil
}

func (m *metricsSampler) read(name string) ([]byte, error) {
	root := m.procRoot
	if root == "" {
		root = "/proc"
	}
	return os.ReadFile(root + "/" + name)
}

// sample takes one reading. The disk is the daemon's working directory's
// filesystem, the one health reports.
func (m *metricsSampler) sample(now time.Time) (protocol.Metrics, error) {
	var out protocol.Metrics
	out.SampledAt = now.UTC()
	raw, err := m.read("stat")
	if err != nil {
		return out, err
	}
	cur, err := parseProcStat(raw)
	if err != nil {
		return out, err
	}
	uptime := 0.0
	if u, err := m.read("uptime"); err == nil {
		if f := bytes.Fields(u); len(f) > 0 {
			uptime, _ = strconv.ParseFloat(string(f[0]), 64)
		}
	}
	m.mu.Lock()
	base, window := cpuTimes{}, uptime
	if m.havePrev && cur.total >= m.prev.total && cur.busy >= m.prev.busy {
		base, window = m.prev, now.Sub(m.prevAt).Seconds()
	}
	m.prev, m.prevAt, m.havePrev = cur, now, true
	m.mu.Unlock()
	pct := 0.0
	if d := cur.total - base.total; d > 0 {
		pct = float64(cur.busy-base.busy) * 100 / float64(d)
	}
	out.CPU = protocol.CPUMetrics{Count: int32(runtime.NumCPU()), UsedPercent: min(max(pct, 0), 100), WindowSecs: max(window, 0)}

	if raw, err = m.read("meminfo"); err != nil {
		return out, err
	}
	total, avail, err := parseMeminfo(raw)
	if err != nil {
		return out, err
	}
	out.Memory = protocol.MemoryMetrics{TotalBytes: total, AvailableBytes: avail, UsedBytes: total - avail}

	if raw, err = m.read("loadavg"); err != nil {
		return out, err
	}
	if out.Load, err = parseLoadavg(raw); err != nil {
		return out, err
	}

	wd, err := os.Getwd()
	if err != nil {
		wd = "/"
	}
	var st unix.Statfs_t
	if err := unix.Statfs(wd, &st); err != nil {
		return out, fmt.Errorf("statfs %s: %w", wd, err)
	}
	bs := uint64(st.Bsize)
	out.Disk = protocol.DiskMetrics{
		Path:           wd,
		TotalBytes:     st.Blocks * bs,
		AvailableBytes: st.Bavail * bs,
		UsedBytes:      (st.Blocks - min(st.Bfree, st.Blocks)) * bs,
	}
	return out, nil
}

// Metrics answers GET /v1/metrics.
func (s *Server) Metrics(w http.ResponseWriter, _ *http.Request) {
	m, err := s.metrics.sample(time.Now())
	if err != nil {
		s.log.Warn("metrics sample failed", "err", err)
		writeError(w, taxonomy.SlugMetricsUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, m)
}
