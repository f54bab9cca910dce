package main_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: `exec --stream` treating a nil exit code as success (testing
// `ExitCode != nil && *ExitCode != 0` instead of `ExitCode == nil || ...`).
// A child killed by a signal has no exit code; the stream must still end as
// ERR_EXEC_FAILED (exit 13, with the record in a status-ok envelope as the
// reference CLI writes it), never as process exit 0. Both output paths
// are covered: --json (NDJSON, then the envelope as the last line) and raw.
func TestStreamedExecKilledBySignalIsAFailure(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	const script = "echo before; kill -KILL $$"

	inv := cli(t, env, "", "--json", "exec", "--stream", script)
	lines := strings.Split(strings.TrimRight(inv.stdout, "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("want events then an envelope, got %d %q %s", inv.code, inv.stdout, inv.stderr)
	}
	var exitLine map[string]any
	for _, l := range lines[:len(lines)-1] {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("event line is not JSON: %q", l)
		}
		if v["event"] == cliapi.EventExit {
			exitLine = v
		}
	}
	if exitLine == nil || exitLine["signal"] != float64(9) || exitLine["exitCode"] != nil {
		t.Fatalf("want an exit event with signal 9 and a null exitCode, got %v", exitLine)
	}
	var last any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("last line is not the envelope: %q", lines[len(lines)-1])
	}
	m := checkEnvelope(t, last, inv.code)
	if inv.code != int(taxonomy.KindExecFailed.Exit()) || m["status"] != cliapi.StatusOK || m["type"] != cliapi.TypeExecStream {
		t.Fatalf("a signalled child reported as exit %d, envelope %v", inv.code, m)
	}
	if d := m["data"].(map[string]any); d["exitCode"] != nil {
		t.Fatalf("exitCode should be null for a signalled child: %v", d)
	}

	raw := cli(t, env, "", "exec", "--stream", script)
	if raw.code != int(taxonomy.KindExecFailed.Exit()) || raw.stdout != "before\n" {
		t.Fatalf("raw stream of a signalled child: exit %d stdout %q stderr %q", raw.code, raw.stdout, raw.stderr)
	}
}
