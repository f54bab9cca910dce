package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client/ledger"
)

// TestCostByCommandThreeOverlappingCommands: a ledger run that was RUNNING
// 0-100 s and 200-260 s and ran three overlapping commands is split by
// `microvm cost ID --by-command`: the three shares and the idle remainder
// equal the total to the last decimal place, under --json and in the human
// table. Catches: the split computed over wall time instead of the recorded
// running stretches, or a share rounded up so the parts exceed the total.
func TestCostByCommandThreeOverlappingCommands(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := l.Begin("us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	err = rec.Update(func(r *ledger.Run) {
		r.MicrovmID, r.BaselineMiB, r.Closed = "mvm-bycmd", 2048, true
		r.Running = []ledger.Span{{Start: at(0), End: at(100)}, {Start: at(200), End: at(260)}}
		r.Commands = []ledger.Command{
			{ExecID: "a", Command: "make build", Start: at(5), End: at(40)},
			{ExecID: "b", Command: "make test", Start: at(20), End: at(60)},
			{ExecID: "c", Command: "make bench", Start: at(30), End: at(210)},
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"MICROVM_STATE_DIR=" + dir}
	inv := cli(t, env, "", "--json", "cost", "mvm-bycmd", "--by-command")
	bc, _ := data(envelope(t, inv))["byCommand"].(map[string]any)
	cmds, _ := bc["commands"].([]any)
	if inv.code != 0 || len(cmds) != 3 {
		t.Fatalf("exit %d byCommand %v\n%s", inv.code, bc, inv.stderr)
	}
	sum := decimal.RequireFromString(bc["idleUsd"].(string))
	wantSecs := []string{"23.333333333", "18.333333333", "63.333333333"}
	for i, c := range cmds {
		m := c.(map[string]any)
		sum = sum.Add(decimal.RequireFromString(m["usd"].(string)))
		if m["seconds"] != wantSecs[i] {
			t.Errorf("%s: %v running seconds, want %s", m["execId"], m["seconds"], wantSecs[i])
		}
	}
	total := decimal.RequireFromString(bc["totalUsd"].(string))
	if !sum.Equal(total) || bc["idleSeconds"] != "55" {
		t.Fatalf("shares + idle = %s, total %s, idle %v s", sum, total, bc["idleSeconds"])
	}
	inv = cli(t, env, "", "cost", "mvm-bycmd", "--by-command")
	if inv.code != 0 || !strings.Contains(inv.stdout, "(idle)") || !strings.Contains(inv.stdout, "make bench") || !strings.Contains(inv.stdout, total.String()) {
		t.Fatalf("human: %d\n%s\n%s", inv.code, inv.stdout, inv.stderr)
	}
	t.Logf("total %s: idle %s\n%s", total, bc["idleUsd"], inv.stdout)
}

// checkRunByCommand: the ledger of a `run --exec "uname -s"` kept the
// command's usage, and cost --by-command splits the run's running cost
// over it, the parts adding up exactly.
func checkRunByCommand(t *testing.T, env []string, microvmID string) {
	t.Helper()
	// The ledger kept the command's usage: cost --by-command splits the
	// run's running cost over it, and the parts add up exactly.
	inv := cli(t, env, "", "--json", "cost", microvmID, "--by-command")
	bc, _ := data(envelope(t, inv))["byCommand"].(map[string]any)
	cmds, _ := bc["commands"].([]any)
	if inv.code != 0 || len(cmds) != 1 {
		t.Fatalf("cost --by-command: %d %v\n%s", inv.code, bc, inv.stderr)
	}
	cmd0 := cmds[0].(map[string]any)
	if cmd0["command"] != "uname -s" || cmd0["usage"] == nil || cmd0["usage"].(map[string]any)["stdoutBytes"] != float64(6) {
		t.Fatalf("the recorded command %v", cmd0)
	}
	sum := decimal.RequireFromString(bc["idleUsd"].(string)).Add(decimal.RequireFromString(cmd0["usd"].(string)))
	if !sum.Equal(decimal.RequireFromString(bc["totalUsd"].(string))) || !decimal.RequireFromString(cmd0["usd"].(string)).IsPositive() {
		t.Fatalf("share %s + idle %s != total %s", cmd0["usd"], bc["idleUsd"], bc["totalUsd"])
	}
}
