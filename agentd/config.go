package agentd

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// Config is the daemon's running configuration. Every limit comes from
// protocol.Limits (api/openapi.yaml x-limits): its environment variable and its
// default are declared there, never here.
type Config struct {
	// Addr is the listen address. Empty means all interfaces on Port: the
	// platform's endpoint proxy terminates outside the VM and forwards inward,
	// so loopback alone would be unreachable.
	Addr string
	Port int

	MaxBodyBytes       int64
	MaxStartBodyBytes  int64
	MaxDrainBytes      int64
	MaxOutputBytes     int64
	MaxStdinWriteBytes int64
	MaxTarBytes        int64
	MaxTarMembers      int64
	StreamReplayBytes  int64
	DiskReserveBytes   int64
	MaxExecIDBytes     int64
	MaxOpenBodies      int64

	ExecTTL           time.Duration
	KillGrace         time.Duration
	OutputLinger      time.Duration
	SSEKeepalive      time.Duration
	StdinWriteTimeout time.Duration
	OpenBodyTimeout   time.Duration

	// StreamStallTimeout (stream_stall_secs) is how long the output pump
	// waits for an attached stream that has fallen a whole replay window
	// behind and takes nothing before leaving it to a gap. It trades a reader
	// that keeps up losing nothing against a dead connection holding a
	// child's pipe: a reader that goes away is detached at once, so only a
	// silent, half-dead peer ever costs the whole window.
	StreamStallTimeout time.Duration

	// Identity says whether and where identity repair runs, at startup and
	// again on the first successful run hook (AGENTD_IDENTITY_REPAIR=0
	// disables both).
	Identity IdentityConfig
}

// limitSetters wires each wire limit name to its Config field. A limit added to
// api/openapi.yaml with an env var but no entry here fails TestEveryLimitIsWired.
var limitSetters = map[string]func(*Config, float64){
	"disk_reserve_bytes":       func(c *Config, v float64) { c.DiskReserveBytes = int64(v) },
	"exec_ttl_secs":            func(c *Config, v float64) { c.ExecTTL = seconds(v) },
	"kill_grace_secs":          func(c *Config, v float64) { c.KillGrace = seconds(v) },
	"max_body_bytes":           func(c *Config, v float64) { c.MaxBodyBytes = int64(v) },
	"max_drain_bytes":          func(c *Config, v float64) { c.MaxDrainBytes = int64(v) },
	"max_exec_id_bytes":        func(c *Config, v float64) { c.MaxExecIDBytes = int64(v) },
	"max_open_bodies":          func(c *Config, v float64) { c.MaxOpenBodies = int64(v) },
	"open_body_timeout_secs":   func(c *Config, v float64) { c.OpenBodyTimeout = seconds(v) },
	"stream_stall_secs":        func(c *Config, v float64) { c.StreamStallTimeout = seconds(v) },
	"max_output_bytes":         func(c *Config, v float64) { c.MaxOutputBytes = int64(v) },
	"max_start_body_bytes":     func(c *Config, v float64) { c.MaxStartBodyBytes = int64(v) },
	"max_stdin_write_bytes":    func(c *Config, v float64) { c.MaxStdinWriteBytes = int64(v) },
	"max_tar_bytes":            func(c *Config, v float64) { c.MaxTarBytes = int64(v) },
	"max_tar_members":          func(c *Config, v float64) { c.MaxTarMembers = int64(v) },
	"output_linger_secs":       func(c *Config, v float64) { c.OutputLinger = seconds(v) },
	"port":                     func(c *Config, v float64) { c.Port = int(v) },
	"sse_keepalive_secs":       func(c *Config, v float64) { c.SSEKeepalive = seconds(v) },
	"stdin_write_timeout_secs": func(c *Config, v float64) { c.StdinWriteTimeout = seconds(v) },
	"stream_replay_bytes":      func(c *Config, v float64) { c.StreamReplayBytes = int64(v) },
}

// limitGetters is the inverse, so /v1/schema can publish the running values.
var limitGetters = map[string]func(*Config) float64{
	"disk_reserve_bytes":       func(c *Config) float64 { return float64(c.DiskReserveBytes) },
	"exec_ttl_secs":            func(c *Config) float64 { return c.ExecTTL.Seconds() },
	"kill_grace_secs":          func(c *Config) float64 { return c.KillGrace.Seconds() },
	"max_body_bytes":           func(c *Config) float64 { return float64(c.MaxBodyBytes) },
	"max_drain_bytes":          func(c *Config) float64 { return float64(c.MaxDrainBytes) },
	"max_exec_id_bytes":        func(c *Config) float64 { return float64(c.MaxExecIDBytes) },
	"max_open_bodies":          func(c *Config) float64 { return float64(c.MaxOpenBodies) },
	"open_body_timeout_secs":   func(c *Config) float64 { return c.OpenBodyTimeout.Seconds() },
	"stream_stall_secs":        func(c *Config) float64 { return c.StreamStallTimeout.Seconds() },
	"max_output_bytes":         func(c *Config) float64 { return float64(c.MaxOutputBytes) },
	"max_start_body_bytes":     func(c *Config) float64 { return float64(c.MaxStartBodyBytes) },
	"max_stdin_write_bytes":    func(c *Config) float64 { return float64(c.MaxStdinWriteBytes) },
	"max_tar_bytes":            func(c *Config) float64 { return float64(c.MaxTarBytes) },
	"max_tar_members":          func(c *Config) float64 { return float64(c.MaxTarMembers) },
	"output_linger_secs":       func(c *Config) float64 { return c.OutputLinger.Seconds() },
	"port":                     func(c *Config) float64 { return float64(c.Port) },
	"sse_keepalive_secs":       func(c *Config) float64 { return c.SSEKeepalive.Seconds() },
	"stdin_write_timeout_secs": func(c *Config) float64 { return c.StdinWriteTimeout.Seconds() },
	"stream_replay_bytes":      func(c *Config) float64 { return float64(c.StreamReplayBytes) },
}

func seconds(v float64) time.Duration {
	if v*float64(time.Second) >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(v * float64(time.Second))
}

// DefaultConfig is every limit at its declared default, identity repair on.
func DefaultConfig() Config {
	var c Config
	for _, l := range protocol.Limits {
		if set, ok := limitSetters[l.Name]; ok {
			set(&c, l.Default)
		}
	}
	c.Identity = DefaultIdentityConfig()
	return c
}

// IdentityRepairEnv turns startup identity repair off when set to 0/false/no/off.
const IdentityRepairEnv = "AGENTD_IDENTITY_REPAIR"

// LoadConfig reads overrides from the environment through lookup (os.LookupEnv
// in the binary). An unparseable value keeps the default and is reported as a
// warning rather than a failure: a daemon that refuses to start strands the VM
// with no way in, which is worse than running with a default.
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
		limitSetters[l.Name](&c, v)
	}
	if raw, ok := lookup(IdentityRepairEnv); ok {
		switch strings.ToLower(strings.TrimSpace(raw)) {
		case "0", "false", "no", "off":
			c.Identity.Disabled = true
		case "1", "true", "yes", "on", "":
		default:
			warnings = append(warnings, IdentityRepairEnv+" is not a boolean; identity repair stays on")
		}
	}
	return c, warnings
}

// listenAddr is where Serve's caller should bind.
func (c Config) listenAddr() string {
	if c.Addr != "" {
		return c.Addr
	}
	return ":" + strconv.Itoa(c.Port)
}

// ListenAddr is the address the binary binds: all interfaces on the port.
func (c Config) ListenAddr() string { return c.listenAddr() }

// normalized clamps values that would make the engine misbehave rather than
// merely be strict: a zero replay window or keepalive would spin.
func (c Config) normalized() Config {
	if c.StreamReplayBytes < 1 {
		c.StreamReplayBytes = 1
	}
	if c.SSEKeepalive <= 0 {
		c.SSEKeepalive = time.Duration(protocol.DefaultSseKeepaliveSecs) * time.Second
	}
	if c.StreamStallTimeout <= 0 {
		c.StreamStallTimeout = time.Duration(protocol.DefaultStreamStallSecs) * time.Second
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
