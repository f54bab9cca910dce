package main_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// stateOf is the state the emulator holds for MicroVM id, "" when it is
// TERMINATED.
func stateOf(emu *emulator.Server, id string) string {
	for _, l := range emu.LiveMicrovms() {
		if v, st, _ := strings.Cut(l, " "); v == id {
			return st
		}
	}
	return ""
}

// Catches: an exec --detach that does not say nothing keeps the VM awake,
// a keepalive that does not hold it (its pings not reaching the endpoint,
// or too rare), one that holds it after it stopped, and a keepalive of a
// suspended VM that reports success.
func TestKeepaliveHoldsADetachedCommandAwake(t *testing.T) {
	env, _ := lifecycleEnv(t)
	// 60 idle seconds of the platform's minimum last 6 real seconds here
	// (emulator.Options.IdleUnit, a test-only scale): each CLI start fits
	// well inside one window on a busy machine.
	const unit = 100 * time.Millisecond
	emu, url := testEmulator(t, emulator.Options{IdleUnit: unit})
	emu.AddImage("idle")
	at := []string{"--control-endpoint", url}
	d := data(envelope(t, cli(t, env, "", append([]string{"--json", "run", "--keep", "--image", "idle", "--max-idle-sec", "60"}, at...)...)))
	id := d["microvmId"].(string)

	// ls names the idle window and the end of the maximum duration (the
	// run's default, 3600 s).
	ls := data(envelope(t, cli(t, env, "", append([]string{"--json", "ls"}, at...)...)))
	vms := ls["microvms"].([]any)
	if len(vms) != 1 {
		t.Fatalf("ls: %v", ls)
	}
	m := vms[0].(map[string]any)
	ends, _ := time.Parse(time.RFC3339, fmt.Sprint(m["endsAt"]))
	if m["maxIdleSeconds"] != float64(60) || time.Until(ends) <= 0 || time.Until(ends) > time.Hour {
		t.Fatalf("ls: maxIdleSeconds %v endsAt %v, want 60 and within the hour", m["maxIdleSeconds"], m["endsAt"])
	}

	det := cli(t, env, "", append([]string{"--json", "exec", "--microvm-id", id, "--detach", "sleep 30"}, at...)...)
	if det.code != 0 {
		t.Fatalf("exec --detach: %d %s", det.code, det.stderr)
	}
	for _, want := range []string{"nothing keeps MicroVM " + id + " awake", "1m0s (its maxIdleDurationSeconds)", "microvm keepalive " + id} {
		if !strings.Contains(det.stderr, want) {
			t.Fatalf("exec --detach's warning lacks %q:\n%s", want, det.stderr)
		}
	}

	// Held for more than two idle windows, sampled all along.
	stop := make(chan struct{})
	var mu sync.Mutex
	var left []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(unit):
			}
			if st := stateOf(emu, id); st != "RUNNING" {
				mu.Lock()
				left = append(left, st)
				mu.Unlock()
			}
		}
	}()
	ka := data(envelope(t, cli(t, env, "", append([]string{"--json", "keepalive", id, "--every", "1s", "--for", "14s"}, at...)...)))
	close(stop)
	wg.Wait()
	if len(left) != 0 {
		t.Fatalf("the MicroVM left RUNNING while keepalive held it: %v", left)
	}
	if ka["pings"].(float64) < 10 {
		t.Fatalf("keepalive: %v", ka)
	}
	// Nobody holds it now: the idle policy suspends it, command and all.
	for i := 0; stateOf(emu, id) != "SUSPENDED"; i++ {
		if i == 400 { // bounded: four idle windows
			t.Fatalf("MicroVM %s is %q, never idle-suspended", id, stateOf(emu, id))
		}
		time.Sleep(unit / 2)
	}
	wantFailure(t, cli(t, env, "", append([]string{"--json", "keepalive", id, "--every", "1s", "--for", "5s"}, at...)...), taxonomy.KindInvalidArg, taxonomy.FindingIdlePolicy)
}

// Catches: run --keep --keepalive that does not hold the VM (it idles out
// while the command waits), one whose Ctrl-C is reported as an interrupted
// run (the expected end of a hold), and --keepalive accepted without
// --keep.
func TestRunKeepKeepaliveHoldsUntilInterrupt(t *testing.T) {
	env, _ := lifecycleEnv(t)
	const unit = 100 * time.Millisecond // 60 idle seconds last 6 real ones
	emu, url := testEmulator(t, emulator.Options{IdleUnit: unit})
	emu.AddImage("held")
	wantFailure(t, cli(t, env, "", "--json", "run", "--keepalive", "--image", "held", "--control-endpoint", url), taxonomy.KindInvalidArg, taxonomy.FindingIdlePolicy)

	s := startCLI(t, 2*time.Minute, env, nil, "--json", "run", "--keep", "--keepalive", "--keepalive-every", "1s", "--image", "held", "--max-idle-sec", "60", "--control-endpoint", url)
	var id string
	for i := 0; id == ""; i++ {
		if i == 2000 { // bounded: twenty seconds
			t.Fatalf("no MicroVM launched: %s", s.errb.String())
		}
		if live := emu.LiveMicrovms(); len(live) == 1 && strings.HasSuffix(live[0], " RUNNING") && strings.Contains(s.errb.String(), "holding MicroVM") {
			id, _, _ = strings.Cut(live[0], " ")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Two idle windows, sampled.
	for i := 0; i < 120; i++ {
		if st := stateOf(emu, id); st != "RUNNING" {
			t.Fatalf("held MicroVM %s is %s after %s", id, st, time.Duration(i)*unit)
		}
		time.Sleep(unit)
	}
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	inv := s.wait(t)
	d := data(envelope(t, inv))
	if inv.code != 0 || d["kept"] != true || d["microvmId"] != id {
		t.Fatalf("exit %d %v\n%s", inv.code, d, inv.stderr)
	}
}
