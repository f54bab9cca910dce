package agentd

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// Config is the daemon's running configuration. Every limit comes from
// protocol.Limits (api/openapi.yaml x-limits): its environment variable and its
// default are declared there, never here.
type Config struct {
	// Addr is the full listen address, overriding Host and Port when set.
	Addr string
	// Host is the listen host (AGENTD_LISTEN). Empty means every interface,
	// the default: the platform's endpoint proxy terminates outside the VM and
	// forwards inward.
	Host string

	// LogLevel is AGENTD_LOG mapped onto slog.
	LogLevel slog.Level

	// LimitSet holds every limit of api/openapi.yaml x-limits, typed and
	// named by the generator (the port among them). Notably StreamStall
	// (stream_stall_secs) is how long the output pump waits for an attached
	// stream that has fallen a whole replay window behind and takes nothing
	// before leaving it to a gap: it trades a reader that keeps up losing
	// nothing against a dead connection holding a child's pipe.
	protocol.LimitSet

	// Identity says whether and where identity repair runs, at startup and
	// again on the first successful run hook (only with
	// AGENTD_REPAIR_IDENTITY true; see LoadConfig).
	Identity IdentityConfig

	// ExecCgroup is AGENTD_EXEC_CGROUP: the delegated cgroup v2 directory
	// each exec gets its own cgroup under (cgroup_linux.go); empty for none.
	ExecCgroup string
	// ExecCgroupV1Memory is AGENTD_EXEC_CGROUP_V1_MEMORY: agentd's own
	// cgroup v1 memory directory, for a hybrid host; empty for none.
	ExecCgroupV1Memory string
}

// DefaultConfig is every limit at its declared default, listening on every
// interface, identity repair off (only an image that declares itself a
// MicroVM guest turns it on; see LoadConfig).
func DefaultConfig() Config {
	c := Config{LimitSet: protocol.DefaultLimitSet()}
	c.Identity = DefaultIdentityConfig()
	c.Identity.Why = protocol.EnvRepairIdentity + " is unset, so this is not known to be a MicroVM guest"
	c.LogLevel = slog.LevelInfo
	return c
}

// LoadConfig reads overrides from the environment through lookup (os.LookupEnv
// in the binary): the limits of api/openapi.yaml x-limits and the settings of
// x-settings, which between them cover every name the reference daemon reads
// (protocol.ReferenceEnv). An unparseable value keeps the default and is
// reported as a warning rather than a failure: a daemon that refuses to start
// strands the VM with no way in, which is worse than running with a default.
// The one exception leans the other way: an unreadable AGENTD_LISTEN binds
// loopback, never every interface.
func LoadConfig(lookup func(string) (string, bool)) (Config, []string) {
	c := DefaultConfig()
	var warnings []string
	for _, l := range protocol.Limits {
		if l.Env == "" {
			continue // client-side thresholds, not daemon settings
		}
		raw, ok := lookup(l.Env)
		if !ok || strings.TrimSpace(raw) == "" {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			warnings = append(warnings, fmt.Sprintf("%s is not a non-negative number; keeping the default %v", l.Env, l.Default))
			continue
		}
		c.SetLimit(l.Name, v)
	}
	warnings = append(warnings, loadIdentitySetting(&c, lookup)...)
	if raw, ok := lookup(protocol.EnvIdentityRoot); ok && strings.TrimSpace(raw) != "" {
		c.Identity = c.Identity.under(strings.TrimSpace(raw))
	}
	if raw, ok := lookup(protocol.EnvListen); ok && strings.TrimSpace(raw) != "" {
		host, port, err := parseListen(strings.TrimSpace(raw))
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s=%q is not a host or host:port (%v); listening on 127.0.0.1 rather than every interface", protocol.EnvListen, raw, err))
			host, port = "127.0.0.1", -1
		}
		c.Host = host
		if port >= 0 {
			c.Port = port
		}
	}
	if raw, ok := lookup(protocol.EnvLog); ok {
		level, err := parseLogFilter(raw)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s=%q: %v; logging at info", protocol.EnvLog, raw, err))
		}
		c.LogLevel = level
	}
	if raw, ok := lookup(protocol.EnvExecCgroup); ok {
		c.ExecCgroup = strings.TrimSpace(raw)
	}
	if raw, ok := lookup(protocol.EnvExecCgroupV1Memory); ok {
		c.ExecCgroupV1Memory = strings.TrimSpace(raw)
	}
	if raw, ok := lookup(protocol.EnvStreamChannelCapacity); ok {
		warnings = append(warnings, fmt.Sprintf("%s=%q has no effect here: a stream reads the replay window (AGENTD_STREAM_BUFFER_BYTES) directly, so there is no channel to size", protocol.EnvStreamChannelCapacity, raw))
	}
	return c, warnings
}

// parseFlag reads a boolean the way the reference does: the spellings a
// Dockerfile or a template actually produces, in any case.
// The spellings are api/openapi.yaml's x-setting-booleans.
func parseFlag(raw string) (value, ok bool) {
	v := strings.ToLower(strings.TrimSpace(raw))
	switch {
	case slices.Contains(protocol.SettingTrue, v):
		return true, true
	case slices.Contains(protocol.SettingFalse, v):
		return false, true
	}
	return false, false
}

// loadIdentitySetting decides whether identity repair runs. Nothing a process
// can observe tells a MicroVM guest from a development machine (which may be
// a Firecracker VM itself, running as root), so repair runs only when the
// image says so: AGENTD_REPAIR_IDENTITY true, which the generated Dockerfile
// stanza sets. False means off, as in the reference; unset means off too,
// where the reference would repair. The older spelling AGENTD_IDENTITY_REPAIR
// is read as well, and when the two disagree, off wins: a deployment that
// believes it opted out but did not is worse than one that never opted in.
func loadIdentitySetting(c *Config, lookup func(string) (string, bool)) []string {
	var warnings []string
	var on, off []string
	for _, env := range append([]string{protocol.EnvRepairIdentity}, identityAliases()...) {
		raw, ok := lookup(env)
		if !ok {
			continue
		}
		v, good := parseFlag(raw)
		switch {
		case !good:
			warnings = append(warnings, fmt.Sprintf("%s=%q is not a boolean (1/true/yes/on, 0/false/no/off); read as unset", env, raw))
			c.Identity.Why = fmt.Sprintf("%s=%s is not a boolean, so this is not known to be a MicroVM guest", env, strings.TrimSpace(raw))
		case v:
			on = append(on, env+"="+strings.TrimSpace(raw))
		default:
			off = append(off, env+"="+strings.TrimSpace(raw))
		}
	}
	switch {
	case len(off) > 0:
		c.Identity.Enabled = false
		c.Identity.Why = strings.Join(off, ", ") + " switches it off"
		if len(on) > 0 {
			warnings = append(warnings, fmt.Sprintf("%s and %s disagree; identity repair stays off", strings.Join(on, ", "), strings.Join(off, ", ")))
		}
	case len(on) > 0:
		c.Identity.Enabled = true
		c.Identity.Why = strings.Join(on, ", ") + " marks this machine as a MicroVM guest"
	}
	return warnings
}

func identityAliases() []string {
	for _, s := range protocol.Settings {
		if s.Env == protocol.EnvRepairIdentity {
			return s.Aliases
		}
	}
	return nil
}

// parseListen reads AGENTD_LISTEN: host:port, [v6]:port, or a bare host (port
// then -1, meaning AGENTD_PORT's).
func parseListen(raw string) (host string, port int, err error) {
	if h, p, err := net.SplitHostPort(raw); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return "", 0, fmt.Errorf("port %q is not a TCP port", p)
		}
		if err := checkHost(h); err != nil {
			return "", 0, err
		}
		return h, int(n), nil
	}
	h := strings.TrimSuffix(strings.TrimPrefix(raw, "["), "]")
	if err := checkHost(h); err != nil {
		return "", 0, err
	}
	return h, -1, nil
}

func checkHost(h string) error {
	if h == "" {
		return nil // ":9000" is every interface, said explicitly
	}
	if net.ParseIP(h) != nil {
		return nil
	}
	for _, r := range h {
		if !(r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("host %q is neither an IP address nor a host name", h)
		}
	}
	return nil
}

// listenAddr is where Serve's caller should bind.
func (c Config) listenAddr() string {
	if c.Addr != "" {
		return c.Addr
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
}

// ListenAddr is the address the binary binds: AGENTD_LISTEN's host (every
// interface by default) on the port.
func (c Config) ListenAddr() string { return c.listenAddr() }

// normalized clamps values that would make the engine misbehave rather than
// merely be strict: a zero replay window or keepalive would spin.
func (c Config) normalized() Config {
	if c.StreamReplayBytes < 1 {
		c.StreamReplayBytes = 1
	}
	if c.SSEKeepalive <= 0 {
		c.SSEKeepalive = time.Duration(protocol.DefaultSSEKeepaliveSecs) * time.Second
	}
	if c.StreamStall <= 0 {
		c.StreamStall = time.Duration(protocol.DefaultStreamStallSecs) * time.Second
	}
	if c.OpenBodyTimeout <= 0 {
		c.OpenBodyTimeout = time.Duration(protocol.DefaultOpenBodyTimeoutSecs) * time.Second
	}
	if c.MaxOpenBodies < 1 {
		c.MaxOpenBodies = 1
	}
	if c.MaxDrainBytes < 0 {
		c.MaxDrainBytes = 0
	}
	return c
}
