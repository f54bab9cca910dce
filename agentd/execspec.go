package agentd

import (
	"fmt"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// spec is a validated start request, ready to spawn.
type spec struct {
	path    string
	argv    []string
	env     []string
	dir     string
	cred    *syscall.Credential
	stdin   bool
	timeout time.Duration     // 0: none
	tty     *protocol.TTYSize // nil: pipes (pty_linux.go)
	limits  *protocol.ExecLimits
}

// startError carries the status and slug of a refused start.
type startError struct {
	slug   string // its status is the slug's own (taxonomy.SlugStatus)
	detail string
}

func (e *startError) Error() string { return e.detail }

func malformed(format string, args ...any) *startError {
	return &startError{taxonomy.SlugMalformedRequest, fmt.Sprintf(format, args...)}
}

// buildSpec validates a start request before anything is spawned.
func buildSpec(req *protocol.StartRequest, launchEnv map[string]string) (*spec, *startError) {
	if req.ExecID == "" {
		return nil, malformed("exec_id must not be empty")
	}
	if req.Command == nil {
		return nil, malformed("command is required: an argv array, or with shell true one script")
	}
	sp := &spec{stdin: req.Stdin, limits: req.Limits}
	if l := req.Limits; l != nil {
		switch {
		case l.MemoryBytes != nil && *l.MemoryBytes < 1<<20:
			return nil, malformed("limits.memory_bytes must be at least 1048576 (1 MiB)")
		case l.CPUMillicores != nil && (*l.CPUMillicores < 1 || *l.CPUMillicores > 1<<20):
			return nil, malformed("limits.cpu_millicores must be between 1 and 1048576")
		case l.Pids != nil && (*l.Pids < 1 || *l.Pids > 4194304):
			return nil, malformed("limits.pids must be between 1 and 4194304")
		}
	}
	if req.Tty != nil {
		if req.Tty.Rows == 0 || req.Tty.Cols == 0 {
			return nil, malformed("tty rows and cols must both be at least 1")
		}
		sp.tty, sp.stdin = req.Tty, true
	}
	if t := req.TimeoutSec; t != nil {
		// Checked here, not in the waiter: a bad value found after the spawn
		// would leave a running child nobody reaps.
		if math.IsNaN(*t) || math.IsInf(*t, 0) || *t <= 0 {
			return nil, malformed("timeout_sec must be a finite positive number of seconds")
		}
		// A budget below what the timer honours converted to a zero
		// Duration, which means none: 1e-10 ran the child unbounded.
		if *t < protocol.DefaultMinTimeoutSecs {
			return nil, malformed("timeout_sec must be at least %v seconds (limits.min_timeout_secs); %g is below the daemon's timer resolution", protocol.DefaultMinTimeoutSecs, *t)
		}
		sp.timeout = protocol.SecondsDuration(*t)
	}
	// Launch env first, request env over it, and nothing else: the daemon's own
	// environment (and so the agent token) never reaches a child.
	merged := make(map[string]string, len(launchEnv)+len(req.Env))
	for k, v := range launchEnv {
		merged[k] = v
	}
	for k, v := range req.Env {
		if !validEnvKey(k) {
			return nil, malformed("env has a key that is empty or contains '=' or NUL")
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, malformed("env value for %q contains NUL", k)
		}
		merged[k] = v
	}
	sp.env = make([]string, 0, len(merged))
	for k, v := range merged {
		sp.env = append(sp.env, k+"="+v)
	}
	if req.Shell {
		// One argument to sh -c, never a constructed wrapper: a wrapper turns an
		// empty or comment-terminated script into a syntax error and lets an
		// unbalanced brace escape it.
		sp.path = "/bin/sh"
		sp.argv = []string{"sh", "-c", strings.Join(req.Command, "\n")}
	} else {
		if len(req.Command) == 0 {
			return nil, malformed("command must not be empty when shell is false")
		}
		sp.argv = req.Command
		sp.path = req.Command[0]
	}
	for _, a := range sp.argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, malformed("command contains NUL")
		}
	}
	if req.Cwd != nil {
		// Only when given: an omitted cwd inherits the daemon's, which is the
		// image WORKDIR because the daemon is the container CMD.
		if bad := badPath(*req.Cwd); bad != "" {
			// The caller's mistake, not a failed spawn.
			return nil, malformed("cwd: %s", bad)
		}
		sp.dir = *req.Cwd
	}
	if req.User != nil || req.Group != nil {
		uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
		var groups []uint32
		if req.User != nil {
			uid = *req.User
			// The user's own primary and supplementary groups, never the
			// daemon's: user 65534 alone once ran with gid 0.
			gid, groups = userGroups(uid)
		}
		if req.Group != nil {
			gid = *req.Group
		}
		// setgroups needs privilege; an unprivileged daemon can only keep its
		// own groups, and asking would fail every demoting spawn. As root an
		// empty list clears root's supplementary groups.
		sp.cred = &syscall.Credential{Uid: uid, Gid: gid, Groups: groups, NoSetGroups: os.Getuid() != 0}
	}
	return sp, nil
}

// userGroups is what the guest's passwd and group databases give uid: its
// primary gid and its groups as initgroups(3) lists them (the primary one
// included). A uid with no passwd entry gets
// gid = uid and no supplementary groups, as setpriv would give it, rather
// than keep the daemon's root group.
func userGroups(uid uint32) (gid uint32, groups []uint32) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return uid, nil
	}
	g, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return uid, nil
	}
	ids, err := u.GroupIds()
	if err != nil {
		return uint32(g), nil
	}
	for _, id := range ids {
		if n, err := strconv.ParseUint(id, 10, 32); err == nil {
			groups = append(groups, uint32(n))
		}
	}
	return uint32(g), groups
}

// lookPath resolves argv[0] the way a shell would: a name with a slash is used
// as given (relative to cwd), otherwise it is searched in the child's PATH, or
// the daemon's when the child has none.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true
		}
	}
	if !found {
		path = os.Getenv("PATH")
		if path == "" {
			path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		check := p
		if !filepath.IsAbs(p) && dir != "" {
			check = filepath.Join(dir, p)
		}
		if st, err := os.Stat(check); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in PATH", name)
}
