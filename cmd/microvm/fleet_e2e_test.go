package main_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a fleet that runs fewer MicroVMs than --count, runs them in one
// guest (one hostname), prices each run separately instead of once, leaves
// a ledger record open, or writes anything but the runs' output on stdout.
func TestRunFleetLocal(t *testing.T) {
	env, stateDir := lifecycleEnv(t)
	inv := cli(t, env, "", "--json", "run", "--local", "--count", "6", "--parallel", "3", "--exec", "hostname")
	m := envelope(t, inv)
	d := data(m)
	if inv.code != 0 || m["type"] != cliapi.TypeRunFleet {
		t.Fatalf("exit %d %v\n%s", inv.code, m, inv.stderr)
	}
	runs := d["runs"].([]any)
	hosts := map[string]bool{}
	ids := map[string]bool{}
	for _, r := range runs {
		run := r.(map[string]any)
		if run["exitCode"] != float64(0) || run["code"] != "" {
			t.Fatalf("run %v", run)
		}
		hosts[run["stdout"].(string)] = true
		ids[run["microvmId"].(string)] = true
	}
	if len(runs) != 6 || len(hosts) != 6 || len(ids) != 6 {
		t.Fatalf("%d runs, %d hostnames, %d MicroVMs: %v", len(runs), len(hosts), len(ids), runs)
	}
	c, ok := d["cost"].(map[string]any)
	if !ok || !strings.HasPrefix(c["label"].(string), "fleet of 6") || len(d["leaked"].([]any)) != 0 {
		t.Fatalf("want one cost report for the fleet and nothing leaked: %v", d)
	}
	if strings.Count(inv.stderr, "total:") != 0 {
		t.Fatalf("--json printed a cost report on stderr too:\n%s", inv.stderr)
	}
	runsInLedger, _, err := ledger.List(stateDir)
	if err != nil || len(runsInLedger) != 7 { // the image's record and one per MicroVM
		t.Fatalf("%v: %d records", err, len(runsInLedger))
	}
	for _, r := range runsInLedger {
		if !r.Closed {
			t.Fatalf("record %+v is open", r)
		}
	}

	human := cli(t, env, "", "run", "--local", "--count", "2", "--exec", "echo one-line")
	if human.code != 0 || human.stdout != "one-line\none-line\n" || strings.Count(human.stderr, "total:") != 1 {
		t.Fatalf("human: exit %d stdout %q\n%s", human.code, human.stdout, human.stderr)
	}
}

// Catches: bounds not checked before anything is built, --keep accepted
// for a fleet, and a fleet whose commands all exit non-zero exiting 0 or
// with a success envelope (a single run's non-zero exit is a failure).
func TestRunFleetRefusalsAndExit(t *testing.T) {
	env, stateDir := lifecycleEnv(t)
	for _, args := range [][]string{
		{"--count", "-1"},
		{"--count", "257"},
		{"--count", "2", "--parallel", "33"},
		{"--count", "2", "--parallel", "-2"},
		{"--count", "2", "--keep", "--control-endpoint", "http://127.0.0.1:1"},
	} {
		inv := cli(t, env, "", append([]string{"--json", "run", "--local"}, args...)...)
		wantFailure(t, inv, taxonomy.KindInvalidArg, "")
	}
	if runs, _, _ := ledger.List(stateDir); len(runs) != 0 {
		t.Fatalf("a refused fleet made %d ledger records", len(runs))
	}
	inv := cli(t, env, "", "--json", "run", "--local", "--count", "2", "--exec", "echo out; exit 3")
	d := data(wantFailure(t, inv, taxonomy.KindExecFailed, ""))
	for _, r := range d["runs"].([]any) {
		run := r.(map[string]any)
		if run["exitCode"] != float64(3) || run["code"] != taxonomy.KindExecFailed.Code() || run["stdout"] != "out\n" {
			t.Fatalf("run %v", run)
		}
	}
}

// guestProcesses lists the host's processes whose command line holds
// marker and that are not the CLI itself (its --exec argument holds the
// marker too): the fleet's commands, running in their guests.
func guestProcesses(marker string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) && !bytes.Contains(b, []byte("--exec\x00")) {
			found = append(found, filepath.Base(dir)+" "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// Catches: a fleet interrupted by Ctrl-C (SIGINT) that skips its teardown
// or leaves ledger records open, and a CLI killed outright (SIGKILL) whose
// guests outlive it.
func TestRunFleetKilledMidFleetLeavesNothing(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			env, stateDir := lifecycleEnv(t)
			var b [6]byte
			_, _ = rand.Read(b[:])
			marker := "fleet-marker-" + hex.EncodeToString(b[:])
			s := startCLI(t, 2*time.Minute, env, nil, "--json", "run", "--local", "--count", "4", "--parallel", "2", "--exec", "sleep 300 # "+marker)
			for i := 0; len(guestProcesses(marker)) < 2; i++ { // both guests of the first wave run the command
				if i > 3000 {
					t.Fatalf("the fleet never started its commands:\n%s", s.errb.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := s.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = s.cmd.Wait()
			s.waited = true
			var left []string
			for range 1000 { // bounded: ten seconds for the guests to die
				if left = guestProcesses(marker); len(left) == 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(left) != 0 {
				t.Fatalf("after %s, guest processes are left: %v", sig, left)
			}
			if sig != syscall.SIGINT {
				return
			}
			inv := invocation{stdout: s.out.String(), code: s.cmd.ProcessState.ExitCode()}
			d := data(wantFailure(t, inv, taxonomy.KindInterrupted, taxonomy.FindingBuildLogGroupSurvives))
			if len(d["leaked"].([]any)) != 0 || len(d["runs"].([]any)) != 4 {
				t.Fatalf("%v", d)
			}
			records, _, err := ledger.List(stateDir)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range records {
				if !r.Closed {
					t.Fatalf("record %+v is open after the interrupt", r)
				}
			}
		})
	}
}
