package sandbox

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/emulator"
)

// idleUnit is one "second" of the idle policy in these tests: the emulator
// runs the platform's 60-second minimum window in 1.2 real seconds
// (emulator.Options.IdleUnit), while every API keeps the platform's
// minimums. A "3-minute command" is 180 units.
const idleUnit = 20 * time.Millisecond

// idleSandbox launches a sandbox of a WallClock emulator whose idle policy
// is the platform's minimum, maxIdleDurationSeconds 60.
func idleSandbox(t *testing.T, autoResume bool, o Options) (*fixture, *Sandbox) {
	t.Helper()
	f := newFixture(t, emulator.Options{VMs: emulator.AgentdLauncher(agentdHost, nil), WallClock: true, IdleUnit: idleUnit})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o.Image = f.emu.AddImage(fmt.Sprintf("idle-%d", time.Now().UnixNano()))
	o.Wait = fast
	o.Idle = &cplane.IdlePolicy{MaxIdle: 60 * time.Second, SuspendedFor: 600 * time.Second, AutoResume: autoResume}
	sb, err := Launch(ctx, f.cp, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })
	if sb.MaxIdle() != 60*time.Second {
		t.Fatalf("MaxIdle %s, want the 60 s GetMicrovm reported", sb.MaxIdle())
	}
	return f, sb
}

// watchStates samples GetMicrovm until stop is closed and returns every
// state seen that was not RUNNING.
func watchStates(t *testing.T, f *fixture, id string, stop <-chan struct{}) func() []string {
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(idleUnit):
			}
			st, err := Open(f.cp, id).Status(context.Background())
			if err == nil && st.State != Running {
				mu.Lock()
				seen = append(seen, string(st.State)+" "+st.StateReason)
				mu.Unlock()
			}
		}
	}()
	return func() []string { <-done; mu.Lock(); defer mu.Unlock(); return seen }
}

// awaitState polls until the MicroVM reports want, bounded.
func awaitState(t *testing.T, f *fixture, id string, want Lifecycle) Status {
	t.Helper()
	var st Status
	for i := 0; i < 1000; i++ { // bounded: ten idle windows and more
		var err error
		if st, err = Open(f.cp, id).Status(context.Background()); err == nil && st.State == want {
			return st
		}
		time.Sleep(idleUnit)
	}
	t.Fatalf("MicroVM %s is %s (%s), never %s", id, st.State, st.StateReason, want)
	return st
}

// Catches: a library that sends no keep-awake traffic while Run waits (the
// VM is idle-suspended mid-command and, without auto-resume, the run never
// completes), one that counts on the open stream (which the idle policy
// does not count), and one that keeps pinging after the work ended, so an
// idle sandbox never suspends and bills on.
func TestRunLongerThanIdleWindowIsKeptAwake(t *testing.T) {
	f, sb := idleSandbox(t, false, Options{KeepAwakeEvery: 10 * idleUnit})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop := make(chan struct{})
	seen := watchStates(t, f, sb.ID(), stop)
	// 180 units: three idle windows.
	res, err := sb.Run(ctx, []string{"/bin/sh", "-c", fmt.Sprintf("sleep %.1f; echo done", (180 * idleUnit).Seconds())}, client.RunOptions{})
	close(stop)
	if err != nil || res.ExitStatus != 0 || res.Stdout != "done\n" {
		t.Fatalf("run longer than the idle window: %+v %v", res, err)
	}
	if s := seen(); len(s) != 0 {
		t.Fatalf("the sandbox left RUNNING while Run waited: %v", s)
	}
	if n := sb.Session().KeepAwakePings(); n < 3 {
		t.Fatalf("%d keep-awake pings during three idle windows", n)
	}
	// Nothing in flight: the pings stop and the idle policy suspends it.
	st := awaitState(t, f, sb.ID(), Suspended)
	if !strings.Contains(st.StateReason, "maxIdleDurationSeconds") {
		t.Fatalf("idle suspend reason %q", st.StateReason)
	}
}

// Catches: a detached command that keeps the VM awake after its launcher
// stopped waiting (nothing can: the platform counts only inbound requests),
// and a KeepAwake (what `microvm keepalive` runs) that does not hold it.
func TestDetachedCommandIdlesOutUnlessKeptAwake(t *testing.T) {
	f, sb := idleSandbox(t, false, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	long := []string{"/bin/sh", "-c", fmt.Sprintf("sleep %.1f", (180 * idleUnit).Seconds())}

	// Held awake by KeepAwake for two idle windows and more.
	if _, err := sb.Session().Start(ctx, long, client.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithTimeout(ctx, 150*idleUnit)
	stop := make(chan struct{})
	seen := watchStates(t, f, sb.ID(), stop)
	pings, err := sb.KeepAwake(kctx, 10*idleUnit)
	if err != nil {
		t.Fatalf("KeepAwake: %v", err)
	}
	if pings < 2 {
		t.Fatalf("KeepAwake held the VM for 150 units at one ping per 10 and says it sent %d", pings)
	}
	kcancel()
	close(stop)
	if s := seen(); len(s) != 0 {
		t.Fatalf("the sandbox left RUNNING while KeepAwake held it: %v", s)
	}
	// Nobody holds it now: the command is still running, and the VM is
	// suspended with it.
	st := awaitState(t, f, sb.ID(), Suspended)
	if !strings.Contains(st.StateReason, "maxIdleDurationSeconds (60)") {
		t.Fatalf("idle suspend reason %q", st.StateReason)
	}
	// KeepAwake now says why it cannot help.
	if _, err := sb.KeepAwake(ctx, 10*idleUnit); err == nil || !strings.Contains(err.Error(), "SUSPENDED") {
		t.Fatalf("KeepAwake of a suspended VM without auto-resume: %v", err)
	}
}

// Catches: an idle suspend or an auto-resume that loses or repeats bytes of
// a stream open across both, and an open stream counted as traffic (the
// VM would never suspend).
func TestStreamAcrossIdleSuspendAndAutoResumeLosesNoByte(t *testing.T) {
	f, sb := idleSandbox(t, true, Options{NoKeepAwake: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 40
	script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do i=$((i+1)); echo line-$i; sleep %.2f; done", n, (5 * idleUnit).Seconds())
	type out struct {
		res client.Result
		err error
	}
	got := make(chan out, 1)
	go func() {
		res, err := sb.Run(ctx, []string{"/bin/sh", "-c", script}, client.RunOptions{})
		got <- out{res, err}
	}()
	st := awaitState(t, f, sb.ID(), Suspended)
	if !strings.Contains(st.StateReason, "maxIdleDurationSeconds") {
		t.Fatalf("idle suspend reason %q", st.StateReason)
	}
	// One inbound request auto-resumes it and is answered.
	if _, err := sb.Session().Health(ctx); err != nil {
		t.Fatalf("the request that should auto-resume: %v", err)
	}
	// The stream may be suspended again before it ends; each time, wake it.
	var r out
	for i := 0; ; i++ {
		select {
		case r = <-got:
		case <-time.After(20 * idleUnit):
			if i == 200 {
				t.Fatal("the run never finished")
			}
			_, _ = sb.Session().Health(ctx)
			continue
		}
		break
	}
	if r.err != nil || r.res.ExitStatus != 0 {
		t.Fatalf("run: %+v %v", r.res, r.err)
	}
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if r.res.Stdout != want.String() {
		t.Fatalf("output across the suspend:\n%q\nwant\n%q", r.res.Stdout, want.String())
	}
}

// Catches: a Run whose timeout outlasts the VM's maximum duration without a
// word (the platform ends the VM first), and a warning for one that fits.
func TestRunWarnsOfATimeoutPastTheMaximumDuration(t *testing.T) {
	f := newFixture(t, emulator.Options{VMs: emulator.AgentdLauncher(agentdHost, nil), WallClock: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var warned []string
	sb, err := Launch(ctx, f.cp, Options{Image: f.emu.AddImage("maxdur"), Wait: fast, MaxDuration: 600 * time.Second,
		Warn: func(m string) { mu.Lock(); warned = append(warned, m); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })
	if left := time.Until(sb.Deadline()); left <= 0 || left > 600*time.Second {
		t.Fatalf("Deadline %s is %s away, want within the 600 s maximum duration", sb.Deadline(), left)
	}
	if _, err := sb.Run(ctx, []string{"true"}, client.RunOptions{ClientTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(warned) != 0 {
		t.Fatalf("a timeout inside the maximum duration warned: %v", warned)
	}
	mu.Unlock()
	if _, err := sb.Run(ctx, []string{"true"}, client.RunOptions{ClientTimeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warned) != 1 || !strings.Contains(warned[0], "max-duration") || !strings.Contains(warned[0], "1h0m0s") {
		t.Fatalf("warnings %v, want one naming the timeout and finding max-duration", warned)
	}
}
