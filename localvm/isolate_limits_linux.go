//go:build linux

package localvm

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/taxonomy"
)

// A guest's limits come from its size class: memory is the peak the guest
// reports (finding memory-selects-baseline), CPU its peak vCPUs, processes
// the declared LocalGuestMaxPids. They are set through cgroups, in a cgroup
// the emulator makes for the guest under its own:
//
//   - cgroup v2 (the unified hierarchy alone), where the emulator's own
//     cgroup is writable and delegates the memory, pids and cpu controllers
//     to its children (a systemd user slice with Delegate=yes, or root);
//   - cgroup v1 controllers, on a hybrid host, as root.
//
// Whatever cannot be set is reported (Guest.Limits), never skipped in
// silence.

// guestLimits is one guest's cgroups.
type guestLimits struct {
	dirs    []string // the cgroups made for the guest, removed at stop
	applied []string // "memory 8192 MiB", ...
	missing []string // what could not be limited, and why
}

func (l *guestLimits) report() LimitsReport {
	if l == nil {
		return LimitsReport{}
	}
	return LimitsReport{Applied: l.applied, Missing: l.missing}
}

// remove deletes the guest's cgroups once the guest's processes are gone;
// a cgroup whose last process is still being reaped is retried briefly.
func (l *guestLimits) remove() {
	if l == nil {
		return
	}
	for _, d := range l.dirs {
		for i := 0; i < 100; i++ {
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// limitValues are the numbers a guest is limited to.
type limitValues struct {
	memoryBytes int64
	pids        int
	cpuQuotaUS  int64 // per cpuPeriodUS
}

const cpuPeriodUS = 100_000

func limitsFor(spec GuestSpec) limitValues {
	row := sizeRowFor(spec.MemoryMiB)
	return limitValues{
		memoryBytes: int64(row.PeakMiB) << 20,
		pids:        taxonomy.LocalGuestMaxPids,
		cpuQuotaUS:  int64(row.PeakVCPU * cpuPeriodUS),
	}
}

// sizeRowFor is the size class a launch's minimumMemoryInMiB selects; 0
// means the default class.
func sizeRowFor(baselineMiB int) taxonomy.SizeRow {
	if baselineMiB == 0 {
		baselineMiB = taxonomy.DefaultBaselineMiB
	}
	for _, r := range taxonomy.SizeClasses {
		if r.BaselineMiB >= baselineMiB {
			return r
		}
	}
	return taxonomy.SizeClasses[len(taxonomy.SizeClasses)-1]
}

// applyLimits makes the guest's cgroups and moves pid (the guest's init,
// which has started nothing yet) into them.
func applyLimits(spec GuestSpec, pid int) *guestLimits {
	v := limitsFor(spec)
	l := &guestLimits{}
	// The emulator's pid leads the name: a group whose emulator died
	// without removing it (SIGKILL) is found and removed by the next
	// emulator on the host (sweepStaleCgroups).
	name := cgroupPrefix + strconv.Itoa(os.Getpid()) + "-" + sanitizeCgroupName(spec.MicrovmID) + "-" + strconv.Itoa(pid)
	paths, err := ownCgroups()
	if err != nil {
		l.missing = append(l.missing, "memory, pids and cpu: reading /proc/self/cgroup: "+err.Error())
		return l
	}
	sweepOnce.Do(func() { sweepStaleCgroups(paths) })
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		unified := paths[""]
		l.applyV2(filepath.Join("/sys/fs/cgroup", unified), name, v, pid)
		return l
	}
	for _, c := range []struct{ ctrl, what string }{{"memory", "memory"}, {"pids", "pids"}, {"cpu", "cpu"}} {
		rel, ok := paths[c.ctrl]
		if !ok {
			l.missing = append(l.missing, c.what+": the host has no "+c.ctrl+" controller")
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup", c.ctrl, rel, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			l.missing = append(l.missing, c.what+": cannot make a cgroup v1 "+c.ctrl+" group (root is needed on a cgroup v1 host): "+err.Error())
			continue
		}
		l.dirs = append(l.dirs, dir)
		var files [][2]string
		switch c.ctrl {
		case "memory":
			files = [][2]string{{"memory.limit_in_bytes", strconv.FormatInt(v.memoryBytes, 10)}}
		case "pids":
			files = [][2]string{{"pids.max", strconv.Itoa(v.pids)}}
		case "cpu":
			files = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cpuPeriodUS)}, {"cpu.cfs_quota_us", strconv.FormatInt(v.cpuQuotaUS, 10)}}
		}
		if err := writeCgroupFiles(dir, files, pid); err != nil {
			l.missing = append(l.missing, c.what+": "+err.Error())
			continue
		}
		l.applied = append(l.applied, describeLimit(c.ctrl, v))
	}
	// On a hybrid host the unified hierarchy holds no controllers, but a
	// guest that mounts cgroup2 sees it from its cgroup namespace's root:
	// a group of its own there keeps the host's tree out of its view.
	if unified, ok := paths[""]; ok {
		dir := filepath.Join("/sys/fs/cgroup/unified", unified, name)
		if pid != 0 && os.Mkdir(dir, 0o755) == nil {
			l.dirs = append(l.dirs, dir)
			_ = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		}
	}
	return l
}

func (l *guestLimits) applyV2(parent, name string, v limitValues, pid int) {
	b, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		l.missing = append(l.missing, "memory, pids and cpu: the emulator's cgroup ("+parent+") is not readable: "+err.Error())
		return
	}
	enabled := strings.Fields(string(b))
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		l.missing = append(l.missing, "memory, pids and cpu: the emulator's cgroup ("+parent+") is not delegated to it (run under a systemd user slice with Delegate=yes, or as root): "+err.Error())
		return
	}
	l.dirs = append(l.dirs, dir)
	var files [][2]string
	var ctrls []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !slices.Contains(enabled, c) {
			l.missing = append(l.missing, c+": the "+c+" controller is not enabled in "+parent+"/cgroup.subtree_control")
			continue
		}
		ctrls = append(ctrls, c)
		switch c {
		case "memory":
			files = append(files, [2]string{"memory.max", strconv.FormatInt(v.memoryBytes, 10)}, [2]string{"memory.swap.max", "0"})
		case "pids":
			files = append(files, [2]string{"pids.max", strconv.Itoa(v.pids)})
		case "cpu":
			files = append(files, [2]string{"cpu.max", strconv.FormatInt(v.cpuQuotaUS, 10) + " " + strconv.Itoa(cpuPeriodUS)})
		}
	}
	if err := writeCgroupFiles(dir, files, pid); err != nil {
		l.missing = append(l.missing, "memory, pids and cpu: "+err.Error())
		return
	}
	for _, c := range ctrls {
		l.applied = append(l.applied, describeLimit(c, v))
	}
}

func describeLimit(ctrl string, v limitValues) string {
	switch ctrl {
	case "memory":
		return fmt.Sprintf("memory %d MiB", v.memoryBytes>>20)
	case "pids":
		return fmt.Sprintf("pids %d", v.pids)
	default:
		return fmt.Sprintf("cpu %g vCPU", float64(v.cpuQuotaUS)/cpuPeriodUS)
	}
}

// ProbeLimits says which limits a guest launched now would get, by making
// (and removing) an empty cgroup for each as a launch would: what microvm
// doctor reports before any launch.
func ProbeLimits() LimitsReport {
	l := applyLimits(GuestSpec{MicrovmID: "probe"}, 0)
	l.remove()
	return l.report()
}

// writeCgroupFiles sets each limit, then moves pid in (pid 0: a probe,
// nothing moved): the limits hold from the guest's first instruction.
func writeCgroupFiles(dir string, files [][2]string, pid int) error {
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0); err != nil {
			if f[0] == "memory.swap.max" && errors.Is(err, os.ErrNotExist) {
				continue // no swap accounting on this kernel: nothing to limit
			}
			return fmt.Errorf("setting %s: %w", f[0], err)
		}
	}
	if pid == 0 {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("moving the guest into %s: %w", dir, err)
	}
	return nil
}

// ownCgroups maps each controller of this process's cgroups to its path:
// "" is the unified (v2) hierarchy, "name=systemd" style entries are
// skipped.
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if !strings.HasPrefix(c, "name=") {
				out[c] = parts[2]
			}
		}
	}
	return out, sc.Err()
}

// cgroupPrefix starts the name of every cgroup the emulator makes.
const cgroupPrefix = "microvms-"

var sweepOnce sync.Once

// sweepStaleCgroups removes the empty guest cgroups, beside this process's
// own, of emulators that are no longer running. A group still holding a
// process is left alone (rmdir refuses it anyway).
func sweepStaleCgroups(paths map[string]string) {
	var parents []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		parents = append(parents, filepath.Join("/sys/fs/cgroup", paths[""]))
	} else {
		for ctrl, rel := range paths {
			if ctrl == "" {
				ctrl = "unified"
			}
			parents = append(parents, filepath.Join("/sys/fs/cgroup", ctrl, rel))
		}
	}
	for _, parent := range parents {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
			if !ok || !e.IsDir() {
				continue
			}
			owner, _, _ := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(owner)
			if err != nil || pid == os.Getpid() {
				continue
			}
			if err := unix.Kill(pid, 0); err == nil || errors.Is(err, unix.EPERM) {
				continue // its emulator still runs
			}
			_ = os.Remove(filepath.Join(parent, e.Name()))
		}
	}
}

func sanitizeCgroupName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}
