package agentd

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// execEntry is one exec, keyed by the caller-minted exec_id. The child is
// owned by its supervise goroutine; handlers only read the log, signal the
// group, or write stdin.
type execEntry struct {
	id   string
	pgid int // captured at spawn: the child's pid, which is its group's id
	log  *outputLog

	// For GET /v1/execs: the argv spawned and when.
	argv    []string
	started time.Time
	// tty: the child runs on a pseudo-terminal (pty_linux.go); stdin is
	// its master.
	tty bool

	// sigMu orders every signal to the group against the reap and the pipe
	// EOFs, so "is this group still ours" and the signal are one step. Once
	// the leader is reaped and no member is known to be left, the number pgid
	// may name another exec's new group, and nothing may be sent to it.
	sigMu     sync.Mutex
	pidfd     *os.File // the leader's pidfd, nil on kernels without one; closed once the group is gone
	reaped    bool     // the leader was waited for; its pid no longer pins the group
	reapTicks uint64   // boot-relative clock ticks at the reap, comparable to /proc/<pid>/stat starttime
	lingered  bool     // the linger deadline passed with a pipe still held
	groupGone bool     // the group is known empty: never signal pgid again
	// finished closes once the child is reaped and its pipes reached EOF or the
	// linger deadline passed. Until then the phase is running.
	finished chan struct{}

	stdinRequested bool
	stdinMu        sync.Mutex
	stdin          *os.File // nil when not requested, after eof, or once the child is gone

	// cg is the exec's own cgroup, nil when it has none (usage from rusage).
	cg *execCgroup

	// Guarded by registry.mu.
	acked   bool
	ackedAt time.Time
}

func (e *execEntry) isFinished() bool {
	select {
	case <-e.finished:
		return true
	default:
		return false
	}
}

// registry holds every exec until an ack plus the TTL lets it go.
type registry struct {
	reclaim reclaimer // collects released heads after large acks
	cfg     *Config
	log     *slog.Logger
	devNull *os.File

	mu       sync.Mutex
	execs    map[string]*execEntry
	starting map[string]*startOp

	// ptySlots holds one token per exec holding a pseudo-terminal
	// (limits.max_ptys), from before pty.Open until the exec has finished.
	ptySlots chan struct{}

	// cgroups is where each exec's own cgroup is made (AGENTD_EXEC_CGROUP);
	// when it is unusable, no exec gets one and a start with limits is refused.
	cgroups *cgroupRoot

	// escalations counts running SIGTERM-to-SIGKILL escalations. Only tests
	// wait on it (a test hook): nothing in the daemon needs them to have ended.
	escalations sync.WaitGroup
}

// capacityError is a start refused because a declared cap on a kernel object
// is full (429 at_capacity), not a failed spawn.
type capacityError struct{ detail string }

func (e *capacityError) Error() string { return e.detail }

// startOp lets a start that races an in-flight start of the same exec_id wait
// for that one's outcome instead of spawning a second child.
type startOp struct {
	done chan struct{}
	err  error
}

func newRegistry(cfg *Config, log *slog.Logger, devNull *os.File) *registry {
	return &registry{cfg: cfg, log: log, devNull: devNull,
		execs: map[string]*execEntry{}, starting: map[string]*startOp{},
		ptySlots: make(chan struct{}, max(cfg.MaxPtys, 0)),
		cgroups:  openCgroupRoot(cfg.ExecCgroup, cfg.ExecCgroupV1Memory)}
}

// markAcked records e as acked at now, once: false when an earlier ack (or
// the run route's release) already did.
func (r *registry) markAcked(e *execEntry, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.acked {
		return false
	}
	e.acked, e.ackedAt = true, now
	return true
}

// all is every registered exec, in no order.
func (r *registry) all() []*execEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*execEntry, 0, len(r.execs))
	for _, e := range r.execs {
		out = append(out, e)
	}
	return out
}

func (r *registry) get(id string) *execEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.execs[id]
}

func (r *registry) phase(e *execEntry) protocol.Phase {
	r.mu.Lock()
	acked := e.acked
	r.mu.Unlock()
	switch {
	case acked:
		return protocol.PhaseAcked
	case e.isFinished():
		return protocol.PhaseExited
	default:
		return protocol.PhaseRunning
	}
}

// activity is health's busy (some child still producing; an exited-but-unacked
// exec is not busy) and execs (entries in any phase).
func (r *registry) activity() (busy bool, count int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.execs {
		if !e.isFinished() {
			busy = true
		}
	}
	return busy, len(r.execs)
}

// collectLoop removes acked entries older than the TTL. Only acked entries are
// ever collected: an unacked one holds output the caller has not read.
func (r *registry) collectLoop(stop <-chan struct{}) {
	t := time.NewTicker(collectEvery(r.cfg.ExecTTL))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			r.collect(now)
		}
	}
}

// collectEvery is the collector's period for an exec TTL: a quarter of it,
// so an acked record outlives its TTL by at most a quarter, but never under
// 10 ms (a zero TTL would make time.NewTicker panic) nor over 30 s.
func collectEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 10*time.Millisecond), 30*time.Second)
}

func (r *registry) collect(now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id, e := range r.execs {
		if e.acked && now.Sub(e.ackedAt) >= r.cfg.ExecTTL {
			delete(r.execs, id)
			e.sigMu.Lock()
			e.markGoneLocked() // an uncollected id can no longer be killed
			e.sigMu.Unlock()
			n++
		}
	}
	if n > 0 {
		r.log.Debug("collected acked execs", "count", n)
	}
	return n
}

// start registers and spawns an exec, or returns the phase of the one already
// under this id. The id is claimed under the registry lock before spawning, so
// concurrent retries cannot both spawn.
func (r *registry) start(id string, sp *spec) (protocol.Phase, *startError) {
	r.mu.Lock()
	if e, ok := r.execs[id]; ok {
		r.mu.Unlock()
		r.log.Info("start retried; not spawning again", "exec_id", id)
		return r.phase(e), nil
	}
	if op, ok := r.starting[id]; ok {
		r.mu.Unlock()
		<-op.done
		if op.err != nil {
			return "", &startError{taxonomy.SlugSpawnFailed, op.err.Error()}
		}
		if e := r.get(id); e != nil {
			return r.phase(e), nil
		}
		return protocol.PhaseRunning, nil
	}
	op := &startOp{done: make(chan struct{})}
	r.starting[id] = op
	r.mu.Unlock()

	e, err := r.spawn(id, sp)

	r.mu.Lock()
	delete(r.starting, id)
	if err == nil {
		r.execs[id] = e
	}
	r.mu.Unlock()
	op.err = err
	close(op.done)
	if err != nil {
		var lim *limitsError
		if errors.As(err, &lim) {
			r.log.Warn("start refused: limits cannot be applied", "exec_id", id, "err", err.Error())
			return "", &startError{taxonomy.SlugLimitsUnavailable, err.Error()}
		}
		var full *capacityError
		if errors.As(err, &full) {
			r.log.Warn("start refused: at capacity", "exec_id", id, "err", err.Error())
			return "", &startError{taxonomy.SlugAtCapacity, err.Error()}
		}
		r.log.Warn("spawn failed", "exec_id", id, "err", err.Error())
		// 500, deliberately not 404: 404 means an unknown exec.
		return "", &startError{taxonomy.SlugSpawnFailed, err.Error()}
	}
	return protocol.PhaseRunning, nil
}
