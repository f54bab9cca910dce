package main_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/cliapi"
)

// TestWatchWithOneBound: either bound alone is enough. With only --count
// the watch has no time limit and reports once that many changes arrived;
// with only --for it has no count limit and reports what the window saw.
// Catches, in WatchCmd.run, `c.For > 0` made `>= 0` or negated (with only
// --count the window is a zero timeout that ends at once, with no events),
// and the loop's `c.Count <= 0` made `< 0` (with only --for the loop never
// runs and the window reports no change).
func TestWatchWithOneBound(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	for _, bound := range [][]string{{"--count", "1"}, {"--for", "4s"}} {
		dir := t.TempDir()
		args := append(append([]string{"--json", "watch"}, bound...), dir)
		s := startCLI(t, 40*time.Second, env, nil, args...)
		// The watch's start is not visible from here: keep making files
		// until the command has exited (a zombie's state is Z in /proc).
		for i := 0; i < 1200; i++ {
			if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			time.Sleep(25 * time.Millisecond)
			st, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat")
			if err != nil || strings.Contains(string(st), ") Z ") {
				break
			}
		}
		inv := s.wait(t)
		m := envelope(t, inv)
		if inv.code != 0 || m["type"] != cliapi.TypeWatch {
			t.Fatalf("watch %v: exit %d %s %s", bound, inv.code, inv.stdout, inv.stderr)
		}
		events := m["data"].(map[string]any)["events"].([]any)
		if len(events) == 0 || (bound[0] == "--count" && len(events) != 1) {
			t.Fatalf("watch %v reported %d events, want 1 for --count 1, at least 1 for --for: %v", bound, len(events), events)
		}
	}
}
