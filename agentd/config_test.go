package agentd

import (
	"log/slog"
	"testing"
)

// Catches: EnvFilter strings read as a single slog level name (so
// "agentd=debug,warn" or "INFO" fall back to info or fail), another crate's
// directive applied to agentd, a bare level overriding agentd's own
// directive, trace and off lost, and an unreadable value being an error
// that changes the level.
func TestParseLogFilter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want slog.Level
		bad  bool
	}{
		{"", slog.LevelInfo, false},
		{"info", slog.LevelInfo, false},
		{"INFO", slog.LevelInfo, false},
		{"warn", slog.LevelWarn, false},
		{"error", slog.LevelError, false},
		{"debug", slog.LevelDebug, false},
		{"trace", LevelTrace, false},
		{"off", LevelOff, false},
		{"4", slog.LevelDebug, false},
		{"agentd=debug,warn", slog.LevelDebug, false},
		{"warn,agentd=error", slog.LevelError, false},
		{"agentd::exec=trace,agentd=info", LevelTrace, false},
		{"agentd[request{path}]=debug", slog.LevelDebug, false},
		{"tower_http=debug", slog.LevelInfo, false},
		{"tower_http=debug,error", slog.LevelError, false},
		{"agentd", LevelTrace, false},
		{"agentdx=debug", slog.LevelInfo, false},
		{"agentd=loud", slog.LevelInfo, true},
		{"agentd=loud,warn", slog.LevelWarn, true},
		// The most verbose of several bare levels wins, in either order,
		// and a directive that is only a span filter is a bare level.
		// Catches: `l < bare` or `level < bare` negated (the first or last
		// bare level wins instead), and the span cut's `i >= 0` made `i > 0`
		// (a leading "[" stays in the target, so "[span]=debug" names no
		// target and is dropped).
		{"warn,debug", slog.LevelDebug, false},
		{"debug,warn", slog.LevelDebug, false},
		{"[span]=debug", slog.LevelDebug, false},
		{"[a]=warn,[b]=debug,[c]=error", slog.LevelDebug, false},
	} {
		got, err := parseLogFilter(tc.in)
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("parseLogFilter(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

// Catches: a bare host taking port 0 instead of AGENTD_PORT's, an IPv6 host
// mangled, and a value with spaces accepted as a host name.
func TestParseListen(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port int
		bad  bool
	}{
		{"127.0.0.1:9000", "127.0.0.1", 9000, false},
		{"127.0.0.1", "127.0.0.1", -1, false},
		{"localhost", "localhost", -1, false},
		{"[::1]:80", "::1", 80, false},
		{"::1", "::1", -1, false},
		{"[::1]", "::1", -1, false},
		{":9001", "", 9001, false},
		{"0.0.0.0:9000", "0.0.0.0", 9000, false},
		{"127.0.0.1:99999", "", 0, true},
		{"not a host!", "", 0, true},
		{"host:port", "", 0, true},
	} {
		host, port, err := parseListen(tc.in)
		if (err != nil) != tc.bad || !tc.bad && (host != tc.host || port != tc.port) {
			t.Errorf("parseListen(%q) = %q, %d, %v", tc.in, host, port, err)
		}
	}
}
