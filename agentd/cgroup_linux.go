package agentd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
)

// Per-exec cgroups (AGENTD_EXEC_CGROUP). The child is cloned straight into
// its exec's cgroup (CLONE_INTO_CGROUP), so nothing it forks can start
// outside it, and the cgroup's counters then cover every process of the
// exec, also those that outlive the leader or that nobody waits for, which
// wait4's rusage cannot see. Without the setting no cgroup is made: the exec
// fast path pays nothing, usage comes from the rusage wait4 returns anyway,
// and a start asking for limits is refused rather than run unlimited.

// cgroupRoot is the delegated cgroup v2 directory execs get their cgroups
// under, and the controllers it hands to them.
type cgroupRoot struct {
	dir         string
	controllers map[string]bool // enabled in dir's cgroup.subtree_control
	why         string          // why the root is unusable; "" when usable
	// v1mem is agentd's own cgroup v1 memory directory on a hybrid host
	// (AGENTD_EXEC_CGROUP_V1_MEMORY), used when dir lacks the memory
	// controller; "" when unset or unusable (v1why says why).
	v1mem, v1why string
	seq          atomic.Uint64

	mu      sync.Mutex
	pending []string // exec cgroups still populated when their exec ended
}

// openCgroupRoot checks dir is a writable cgroup v2 directory and enables
// what it can of memory, cpu and pids for its children. It never fails the
// daemon: an unusable root is reported by why, and every start with limits
// is refused naming it.
func openCgroupRoot(dir, v1mem string) *cgroupRoot {
	c := &cgroupRoot{dir: dir, controllers: map[string]bool{}}
	c.v1mem, c.v1why = openV1Memory(v1mem)
	if dir == "" {
		c.why = protocol.EnvExecCgroup + " is unset, so no exec gets a cgroup of its own"
		return c
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		c.why = fmt.Sprintf("%s=%q: %v", protocol.EnvExecCgroup, dir, err)
		return c
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		c.why = fmt.Sprintf("%s=%q is not on a cgroup v2 filesystem", protocol.EnvExecCgroup, dir)
		return c
	}
	if unix.Access(dir, unix.W_OK) != nil {
		c.why = fmt.Sprintf("%s=%q is not writable by agentd (not delegated)", protocol.EnvExecCgroup, dir)
		return c
	}
	avail, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	for _, ctl := range []string{"memory", "cpu", "pids"} {
		if !hasWord(string(avail), ctl) {
			continue
		}
		// Fails when dir itself holds processes (the no-internal-process
		// rule); the controller is then reported missing, not assumed.
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+ctl), 0)
	}
	enabled, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	for _, ctl := range strings.Fields(string(enabled)) {
		c.controllers[ctl] = true
	}
	return c
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// limitsError is a start whose limits this guest cannot apply.
type limitsError struct{ detail string }

func (e *limitsError) Error() string { return e.detail }

// execCgroup is one exec's cgroup, open for CLONE_INTO_CGROUP until the spawn.
type execCgroup struct {
	dir string
	fd  int
	mem bool // memory controller on: memory.peak and memory.events are read
	// v1dir is the exec's cgroup v1 memory directory on a hybrid host;
	// v1parent is agentd's own, where the forking thread returns.
	v1dir, v1parent string
}

// prepare makes the cgroup of one exec and writes its limits; nil, nil when
// the exec gets none (no root configured and no limits asked for).
func (c *cgroupRoot) prepare(lim *protocol.ExecLimits) (*execCgroup, error) {
	asked := lim != nil && (lim.MemoryBytes != nil || lim.CPUMillicores != nil || lim.Pids != nil)
	if c.why != "" {
		if asked {
			return nil, &limitsError{"limits cannot be applied: " + c.why + " (a delegated cgroup v2 subtree is needed); nothing was started"}
		}
		return nil, nil
	}
	if asked {
		for _, need := range []struct {
			set bool
			ctl string
		}{{lim.MemoryBytes != nil, "memory"}, {lim.CPUMillicores != nil, "cpu"}, {lim.Pids != nil, "pids"}} {
			if need.set && need.ctl == "memory" && !c.controllers["memory"] && c.v1mem != "" {
				continue // the v1 memory hierarchy applies it
			}
			if need.set && !c.controllers[need.ctl] {
				if need.ctl == "memory" && c.v1why != "" {
					return nil, &limitsError{fmt.Sprintf("limits cannot be applied: the memory controller is not delegated to %s=%q, and %s", protocol.EnvExecCgroup, c.dir, c.v1why)}
				}
				return nil, &limitsError{fmt.Sprintf("limits cannot be applied: the %s controller is not delegated to %s=%q (its cgroup.subtree_control lacks it); nothing was started", need.ctl, protocol.EnvExecCgroup, c.dir)}
			}
		}
	}
	c.sweep()
	dir := filepath.Join(c.dir, "exec-"+strconv.FormatUint(c.seq.Add(1), 10)+"-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		if asked {
			return nil, &limitsError{"limits cannot be applied: " + err.Error()}
		}
		return nil, nil // usage falls back to rusage
	}
	g := &execCgroup{dir: dir, fd: -1, mem: c.controllers["memory"]}
	write := func(file, v string) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(v), 0)
	}
	var err error
	if lim != nil {
		if lim.MemoryBytes != nil && g.mem { // else the v1 memory cgroup below
			err = errors.Join(err, write("memory.max", strconv.FormatUint(*lim.MemoryBytes, 10)))
			// Over the limit the exec is killed, not swapped; and all of it,
			// so no half of a process tree is left running.
			if _, serr := os.Stat(filepath.Join(dir, "memory.swap.max")); serr == nil {
				err = errors.Join(err, write("memory.swap.max", "0"))
			}
			err = errors.Join(err, write("memory.oom.group", "1"))
		}
		if lim.CPUMillicores != nil {
			const period = 100_000 // us
			err = errors.Join(err, write("cpu.max", strconv.FormatUint(uint64(*lim.CPUMillicores)*period/1000, 10)+" "+strconv.Itoa(period)))
		}
		if lim.Pids != nil {
			err = errors.Join(err, write("pids.max", strconv.FormatUint(uint64(*lim.Pids), 10)))
		}
	}
	if err == nil && !g.mem && c.v1mem != "" {
		err = g.makeV1Memory(c.v1mem, filepath.Base(dir), lim)
	}
	if err == nil {
		g.fd, err = unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		g.removeV1()
		_ = os.Remove(dir)
		if asked {
			return nil, &limitsError{"limits cannot be applied: " + err.Error()}
		}
		return nil, nil
	}
	return g, nil
}

// attach makes the fork clone the child into g. Safe on a nil g.
func (g *execCgroup) attach(attr *syscall.SysProcAttr) {
	if g == nil {
		return
	}
	attr.UseCgroupFD = true
	attr.CgroupFD = g.fd
}

// closeFd drops the directory descriptor once the fork is done.
func (g *execCgroup) closeFd() {
	if g != nil && g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
}

// cgroupUsage is what an exec's cgroup counted.
type cgroupUsage struct {
	userUS, systemUS uint64
	peakMem          uint64
	haveMem          bool
	peakPids         uint64
	havePids         bool
	oomKilled        bool
}

// read collects the cgroup's counters; false when cpu.stat, which every
// cgroup v2 has, cannot be read (usage then falls back to rusage).
func (g *execCgroup) read() (cgroupUsage, bool) {
	var u cgroupUsage
	b, err := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return u, false
	}
	user, ok1 := statField(b, "user_usec")
	sys, ok2 := statField(b, "system_usec")
	if !ok1 || !ok2 {
		return u, false
	}
	u.userUS, u.systemUS = user, sys
	if b, err := os.ReadFile(filepath.Join(g.dir, "memory.peak")); err == nil {
		u.peakMem, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		u.haveMem = err == nil
	}
	if b, err := os.ReadFile(filepath.Join(g.dir, "pids.peak")); err == nil {
		u.peakPids, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		u.havePids = err == nil
	}
	if b, err := os.ReadFile(filepath.Join(g.dir, "memory.events")); err == nil {
		n, _ := statField(b, "oom_kill")
		u.oomKilled = n > 0
	}
	if g.v1dir != "" {
		if b, err := os.ReadFile(filepath.Join(g.v1dir, "memory.max_usage_in_bytes")); err == nil {
			u.peakMem, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			u.haveMem = err == nil
		}
		if b, err := os.ReadFile(filepath.Join(g.v1dir, "memory.oom_control")); err == nil {
			n, _ := statField(b, "oom_kill")
			u.oomKilled = n > 0
		}
	}
	return u, true
}

// statField reads "key value" lines (cpu.stat, memory.events).
func statField(b []byte, key string) (uint64, bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// release removes g once its exec has ended. A cgroup still holding a
// process (a descendant that closed its pipes and lives on) cannot be
// removed yet; it is kept and retried at later starts.
func (c *cgroupRoot) release(g *execCgroup) {
	if g == nil {
		return
	}
	g.closeFd()
	g.removeV1()
	if os.Remove(g.dir) == nil {
		return
	}
	c.mu.Lock()
	c.pending = append(c.pending, g.dir)
	c.mu.Unlock()
}

// sweep retries removing cgroups that were still populated.
func (c *cgroupRoot) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.pending[:0]
	for _, d := range c.pending {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			kept = append(kept, d)
		}
	}
	c.pending = kept
}

// openV1Memory checks dir is agentd's own cgroup v1 memory directory: the
// forking thread is moved into an exec's memory cgroup and back into dir,
// so dir must be where agentd already is.
func openV1Memory(dir string) (string, string) {
	if dir == "" {
		return "", protocol.EnvExecCgroupV1Memory + " is unset"
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil || fs.Type != unix.CGROUP_SUPER_MAGIC {
		return "", fmt.Sprintf("%s=%q is not a cgroup v1 directory", protocol.EnvExecCgroupV1Memory, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.limit_in_bytes")); err != nil {
		return "", fmt.Sprintf("%s=%q is not in the memory hierarchy", protocol.EnvExecCgroupV1Memory, dir)
	}
	b, _ := os.ReadFile("/proc/self/cgroup")
	own := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && hasWord(strings.ReplaceAll(f[1], ",", " "), "memory") {
			own = f[2]
		}
	}
	if own == "" || !strings.HasSuffix(filepath.Clean(dir), filepath.Clean(own)) {
		return "", fmt.Sprintf("%s=%q is not the memory cgroup agentd runs in (%q)", protocol.EnvExecCgroupV1Memory, dir, own)
	}
	if unix.Access(filepath.Join(dir, "tasks"), unix.W_OK) != nil {
		return "", fmt.Sprintf("%s=%q is not writable by agentd", protocol.EnvExecCgroupV1Memory, dir)
	}
	return dir, ""
}

// makeV1Memory makes the exec's v1 memory cgroup and writes its limit.
func (g *execCgroup) makeV1Memory(parent, name string, lim *protocol.ExecLimits) error {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	g.v1dir, g.v1parent = dir, parent
	if lim == nil || lim.MemoryBytes == nil {
		return nil
	}
	v := strconv.FormatUint(*lim.MemoryBytes, 10)
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(v), 0); err != nil {
		return err
	}
	// With swap accounting, memory plus swap gets the same bound, so the
	// exec is killed rather than swapped out.
	if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
		return os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte(v), 0)
	}
	return nil
}

func (g *execCgroup) removeV1() {
	if g != nil && g.v1dir != "" {
		_ = os.Remove(g.v1dir)
	}
}

// forkIntoV1 runs fork on a thread moved into the exec's v1 memory cgroup,
// so the child starts there (cgroup v1 has no CLONE_INTO_CGROUP), and moves
// the thread back into agentd's own cgroup after. Nil g or no v1 cgroup: fork
// runs as is.
func (g *execCgroup) forkIntoV1(fork func() error) error {
	if g == nil || g.v1dir == "" {
		return fork()
	}
	runtime.LockOSThread()
	tid := []byte(strconv.Itoa(unix.Gettid()))
	if err := os.WriteFile(filepath.Join(g.v1dir, "tasks"), tid, 0); err != nil {
		runtime.UnlockOSThread()
		return &limitsError{"limits cannot be applied: moving the forking thread into " + g.v1dir + ": " + err.Error()}
	}
	err := fork()
	if os.WriteFile(filepath.Join(g.v1parent, "tasks"), tid, 0) == nil {
		runtime.UnlockOSThread()
	}
	// Otherwise the thread stays locked, so it exits with its goroutine
	// rather than run other goroutines inside the exec's cgroup.
	return err
}

// spawnOrLimitsError keeps a limits refusal from the fork (the thread could
// not enter the exec's cgroup) a limits refusal, not a failed spawn.
func spawnOrLimitsError(sp *spec, err error) error {
	var le *limitsError
	if errors.As(err, &le) {
		return err
	}
	return spawnError(sp, err)
}
