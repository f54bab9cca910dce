package main_test

import (
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
