package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator"
)

// Fork is RunMany underneath: a throttled RunMicrovm is launched again
// after a backoff (more throttles than the SDK's own attempts), every copy
// still gets its files before its task, and every copy is torn down.
// Catches: a Fork that launches outside RunMany's backoff, runs the task in
// a sandbox the files never reached, or leaves copies running.
func TestForkBacksOffAndTearsDown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	src := e.launch(t)
	run(t, src, "mkdir -p /tmp/w && echo kept > /tmp/w/f")
	throttles := make([]emulator.Fault, 20)
	for i := range throttles {
		throttles[i] = emulator.FaultThrottle
	}
	e.emu.Server.Inject("RunMicrovm", throttles...)
	_, rep, err := Fork(ctx, src, e.store, 3, ForkOptions{
		Checkpoint: Options{Paths: []string{"/tmp/w"}},
		Fleet:      sandbox.FleetOptions{Parallel: 3, Launch: e.emu.Launch, MaxBackoff: 20 * time.Millisecond},
	}, func(ctx context.Context, i int, sb *sandbox.Sandbox) (client.Result, error) {
		b, err := sb.ReadFile(ctx, "/tmp/w/f")
		if err != nil || string(b) != "kept\n" {
			return client.Result{}, errors.New("a copy without its files")
		}
		return client.Result{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for _, o := range rep.Outcomes {
		if o.Err != nil {
			t.Fatalf("copy %d: %v", o.Index, o.Err)
		}
		attempts += o.Attempts
	}
	if attempts <= 3 {
		t.Fatalf("no launch was tried again (%d attempts for 3 copies)", attempts)
	}
	if live := e.emu.Server.LiveMicrovms(); len(live) != 1 {
		t.Fatalf("live after the fork: %v, want the source alone", live)
	}
}
