package agentd

import (
	"fmt"
	"log/slog"
	"strings"
)

// LevelTrace and LevelOff are the two EnvFilter levels slog lacks: trace sits
// below debug, and off above every level anything logs at.
const (
	LevelTrace = slog.LevelDebug - 4
	LevelOff   = slog.LevelError + 100
)

// parseLogFilter maps AGENTD_LOG, written for the reference as a tracing
// EnvFilter (comma-separated directives, each a level, a target, or
// target=level, a target optionally carrying [span{field}] filters), onto one
// slog level for this daemon. Every line agentd logs has the target "agentd",
// so: the most verbose directive whose target is agentd or one of its modules
// wins; failing that, the most verbose bare level; failing that (only other
// crates named, or nothing at all), info. An unreadable directive is skipped
// and reported, never fatal: a log setting is no reason to strand a VM.
func parseLogFilter(raw string) (slog.Level, error) {
	var (
		ours, bare       slog.Level
		haveOurs, isBare bool
		bad              []string
	)
	for _, d := range strings.Split(raw, ",") {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		target, lvl, hasLevel := strings.Cut(d, "=")
		if i := strings.IndexByte(target, '['); i >= 0 {
			target = target[:i] // span and field filters narrow; the target stays
		}
		target = strings.TrimSpace(target)
		var level slog.Level
		if !hasLevel {
			// A lone word is a level when it names one, else a target enabled
			// at every level (EnvFilter reads "agentd" as agentd=trace).
			if l, ok := filterLevel(target); ok {
				if !isBare || l < bare {
					bare = l
				}
				isBare = true
				continue
			}
			level = LevelTrace
		} else {
			l, ok := filterLevel(strings.TrimSpace(lvl))
			if !ok {
				bad = append(bad, d)
				continue
			}
			level = l
		}
		if target == "" {
			if !isBare || level < bare {
				bare = level
			}
			isBare = true
			continue
		}
		if target == "agentd" || strings.HasPrefix(target, "agentd::") {
			if !haveOurs || level < ours {
				ours = level
			}
			haveOurs = true
		}
	}
	var err error
	if len(bad) > 0 {
		err = fmt.Errorf("directive %q has no level this daemon knows (off, error, warn, info, debug, trace, 0-5) and was skipped", strings.Join(bad, ","))
	}
	switch {
	case haveOurs:
		return ours, err
	case isBare:
		return bare, err
	}
	return slog.LevelInfo, err
}

// filterLevel reads one EnvFilter level name or number, in any case.
func filterLevel(s string) (slog.Level, bool) {
	switch strings.ToLower(s) {
	case "off", "0":
		return LevelOff, true
	case "error", "1":
		return slog.LevelError, true
	case "warn", "warning", "2":
		return slog.LevelWarn, true
	case "info", "3":
		return slog.LevelInfo, true
	case "debug", "4":
		return slog.LevelDebug, true
	case "trace", "5":
		return LevelTrace, true
	}
	return 0, false
}
