package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/taxonomy"
)

func startEmbedded(t testing.TB) *embedded.Emulator {
	t.Helper()
	emu, err := embedded.Start(context.Background(), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	return emu
}

// runMicrovmCalls counts the RunMicrovm requests the emulator received.
func runMicrovmCalls(emu *embedded.Emulator) int {
	n := 0
	for _, r := range emu.Server.Requests() {
		if r.Method == "POST" && strings.HasSuffix(strings.TrimSuffix(r.Path, "/"), "/microvms") {
			n++
		}
	}
	return n
}

// Catches: a bound not checked (a fleet of 0 or of MaxFleetCount+1, a
// concurrency of 0 after defaulting or above MaxFleetParallel, a shared
// agent token or ledger record let through), or a refused fleet that still
// launched something.
func TestFleetAndPoolBoundsAreRefusedBeforeAnyLaunch(t *testing.T) {
	emu := startEmbedded(t)
	ctx := context.Background()
	task := sandbox.Command([]string{"true"}, client.RunOptions{})
	for _, o := range []sandbox.FleetOptions{
		{Count: 0, Launch: emu.Launch},
		{Count: taxonomy.MaxFleetCount + 1, Launch: emu.Launch},
		{Count: 2, Parallel: -1, Launch: emu.Launch},
		{Count: 2, Parallel: taxonomy.MaxFleetParallel + 1, Launch: emu.Launch},
		{Count: 2},
		{Count: 2, Launch: emu.Launch, Options: sandbox.Options{AgentToken: "shared"}},
	} {
		if _, err := sandbox.RunMany(ctx, o, task); client.KindOf(err) != taxonomy.KindInvalidArg {
			t.Fatalf("%+v: want ERR_INVALID_ARG, got %v", o, err)
		}
	}
	if _, err := sandbox.RunMany(ctx, sandbox.FleetOptions{Count: 1, Launch: emu.Launch}, nil); client.KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("a nil task: %v", err)
	}
	for _, o := range []sandbox.PoolOptions{
		{Size: 0, Launch: emu.Launch},
		{Size: taxonomy.MaxPoolSize + 1, Launch: emu.Launch},
		{Size: 1, Refill: taxonomy.MaxFleetParallel + 1, Launch: emu.Launch},
	} {
		if _, err := sandbox.NewPool(ctx, o); client.KindOf(err) != taxonomy.KindInvalidArg {
			t.Fatalf("%+v: want ERR_INVALID_ARG, got %v", o, err)
		}
	}
	if n := runMicrovmCalls(emu); n != 0 {
		t.Fatalf("refused fleets and pools sent %d RunMicrovm", n)
	}
}

// Catches: one failed launch stopping the fleet or being dropped from the
// report; a concurrency bound not enforced (a semaphore released before
// teardown, or never taken); a sandbox left running.
func TestRunManyOneLaunchFailsTheRestCarryOnWithinTheBound(t *testing.T) {
	emu := startEmbedded(t)
	ctx := context.Background()
	image := emu.Server.AddImage(embedded.DefaultImage)
	var alive, peak atomic.Int32
	o := sandbox.FleetOptions{
		Count: 5, Parallel: 2, Launch: emu.Launch,
		Options: sandbox.Options{Image: image},
		PerSandbox: func(i int, o *sandbox.Options) error {
			if i == 1 {
				o.Image = strings.Replace(image, ":microvm-image:"+embedded.DefaultImage, ":microvm-image:nosuch", 1)
			}
			return nil
		},
	}
	rep, err := sandbox.RunMany(ctx, o, func(ctx context.Context, i int, sb *sandbox.Sandbox) (client.Result, error) {
		n := alive.Add(1)
		defer alive.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		// Alive on the platform too, not only in this process's count.
		if live := len(emu.Server.LiveMicrovms()); live > 2 {
			return client.Result{}, fmt.Errorf("%d MicroVMs live with a bound of 2", live)
		}
		return sb.Run(ctx, []string{"sh", "-c", "sleep 0.1; echo " + fmt.Sprint(i)}, client.RunOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	failed := rep.Failed()
	if len(failed) != 1 || failed[0].Index != 1 || failed[0].MicrovmID != "" {
		t.Fatalf("want only sandbox 1 failed, unlaunched: %+v", failed)
	}
	for _, out := range rep.Outcomes {
		if out.Index == 1 {
			continue
		}
		if out.Err != nil || out.Result.Stdout != fmt.Sprintf("%d\n", out.Index) || !out.Teardown.MicrovmTerminated {
			t.Fatalf("sandbox %d: %+v", out.Index, out)
		}
	}
	if peak.Load() > 2 {
		t.Fatalf("%d tasks ran at once with a bound of 2", peak.Load())
	}
	if live := emu.Server.LiveMicrovms(); len(live) != 0 {
		t.Fatalf("left running: %v", live)
	}
}

// Catches: a fleet that gives up on a launch the control plane throttled
// once the SDK retryer's attempts (and its retry quota) are spent, instead
// of backing off and launching again; or one that relaunches on a refusal
// that is not throttling.
func TestRunManyBacksOffWhenThrottled(t *testing.T) {
	emu := startEmbedded(t)
	ctx := context.Background()
	// More throttles than three calls' five SDK attempts each: without the
	// fleet's own backoff, at least one sandbox fails.
	throttles := make([]emulator.Fault, 20)
	for i := range throttles {
		throttles[i] = emulator.FaultThrottle
	}
	emu.Server.Inject("RunMicrovm", throttles...)
	rep, err := sandbox.RunMany(ctx, sandbox.FleetOptions{Count: 3, Parallel: 3, Launch: emu.Launch, MaxBackoff: 20 * time.Millisecond},
		sandbox.Command([]string{"true"}, client.RunOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for _, out := range rep.Outcomes {
		if out.Err != nil {
			t.Fatalf("sandbox %d failed despite the backoff: %v", out.Index, out.Err)
		}
		attempts += out.Attempts
	}
	if attempts <= 3 {
		t.Fatalf("no launch was tried again (%d attempts for 3 sandboxes)", attempts)
	}

	emu.Server.Inject("RunMicrovm", emulator.FaultValidation)
	rep, err = sandbox.RunMany(ctx, sandbox.FleetOptions{Count: 1, Launch: emu.Launch}, sandbox.Command([]string{"true"}, client.RunOptions{}))
	if err != nil || rep.Outcomes[0].Err == nil || rep.Outcomes[0].Attempts != 1 {
		t.Fatalf("a validation refusal must not be relaunched: %+v %v", rep.Outcomes, err)
	}
	if live := emu.Server.LiveMicrovms(); len(live) != 0 {
		t.Fatalf("left running: %v", live)
	}
}

// Catches: a task's panic crashing the process from a fleet goroutine (no
// recover), a panic swallowed (RunMany returning normally), or the other
// sandboxes left running because the panic skipped their teardown.
func TestRunManyPanicTearsEverythingDownThenRepanics(t *testing.T) {
	emu := startEmbedded(t)
	ctx := context.Background()
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_, _ = sandbox.RunMany(ctx, sandbox.FleetOptions{Count: 4, Parallel: 4, Launch: emu.Launch},
			func(ctx context.Context, i int, sb *sandbox.Sandbox) (client.Result, error) {
				if i == 2 {
					panic("task 2 exploded")
				}
				return sb.Run(ctx, []string{"sleep", "0.2"}, client.RunOptions{})
			})
	}()
	if recovered == nil || !strings.Contains(fmt.Sprint(recovered), "task 2 exploded") {
		t.Fatalf("want the task's panic re-raised, got %v", recovered)
	}
	if live := emu.Server.LiveMicrovms(); len(live) != 0 {
		t.Fatalf("left running after a panic: %v", live)
	}
	if n := runMicrovmCalls(emu); n != 4 {
		t.Fatalf("%d launches, want 4", n)
	}
}

// Catches: a cancelled fleet leaving sandboxes running (teardown on the
// cancelled context), launching the rest anyway, or reporting the ones it
// never launched as successes.
func TestRunManyCancelledMidFleetTearsDown(t *testing.T) {
	emu := startEmbedded(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started sync.Once
	rep, err := sandbox.RunMany(ctx, sandbox.FleetOptions{Count: 6, Parallel: 2, Launch: emu.Launch},
		func(ctx context.Context, i int, sb *sandbox.Sandbox) (client.Result, error) {
			started.Do(func() { time.AfterFunc(100*time.Millisecond, cancel) })
			return sb.Run(ctx, []string{"sleep", "60"}, client.RunOptions{})
		})
	if err != nil {
		t.Fatal(err)
	}
	never := 0
	for _, out := range rep.Outcomes {
		if out.Err == nil {
			t.Fatalf("sandbox %d reported success after the cancel: %+v", out.Index, out)
		}
		if out.MicrovmID == "" {
			never++
			if client.KindOf(out.Err) != taxonomy.KindInterrupted {
				t.Fatalf("an unlaunched sandbox's error: %v", out.Err)
			}
		} else if !out.Teardown.MicrovmTerminated {
			t.Fatalf("sandbox %d not torn down: %+v", out.Index, out.Teardown)
		}
	}
	if never == 0 {
		t.Fatal("every sandbox was launched although the fleet was cancelled after the first task started")
	}
	if live := emu.Server.LiveMicrovms(); len(live) != 0 {
		t.Fatalf("left running: %v", live)
	}
}

// Catches: Release putting a used sandbox back (the next tenant would see
// the first one's files), Close leaving waiting or handed-out members
// running, or a report that leaves a member out.
func TestPoolNeverReusesASandboxAndCloseTearsAllDown(t *testing.T) {
	emu := startEmbedded(t)
	ctx := context.Background()
	pool, err := sandbox.NewPool(ctx, sandbox.PoolOptions{Size: 2, Launch: emu.Launch})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)
	if err := pool.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for tenant := range 3 {
		sb, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[sb.ID()] {
			t.Fatalf("tenant %d got %s again", tenant, sb.ID())
		}
		seen[sb.ID()] = true
		if _, err := sb.ReadFile(ctx, "/tmp/tenant"); err == nil {
			t.Fatalf("tenant %d sees an earlier tenant's file", tenant)
		}
		if err := sb.WriteFile(ctx, "/tmp/tenant", []byte(fmt.Sprint(tenant)), 0o600); err != nil {
			t.Fatal(err)
		}
		if !pool.Release(ctx, sb).MicrovmTerminated {
			t.Fatal("release did not terminate")
		}
	}
	held, err := pool.Acquire(ctx) // handed out and never released
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	rep := pool.Close(ctx)
	launched := runMicrovmCalls(emu)
	if len(rep.Members) != launched || !rep.Clean() || rep.Served != 4 {
		t.Fatalf("report of %d members (served %d, clean %v) for %d launches", len(rep.Members), rep.Served, rep.Clean(), launched)
	}
	if held.Lifecycle() != sandbox.Terminated {
		t.Fatalf("an unreleased sandbox survived Close: %s", held.Lifecycle())
	}
	if live := emu.Server.LiveMicrovms(); len(live) != 0 {
		t.Fatalf("left running: %v", live)
	}
	if _, err := pool.Acquire(ctx); err == nil {
		t.Fatal("a closed pool handed out a sandbox")
	}
}

// Catches: Acquire handing out (or failing on) a member the platform
// terminated while it waited, instead of tearing it down and taking the
// next one.
func TestPoolAcquireSkipsAMemberThatDied(t *testing.T) {
	emu := startEmbedded(t)
	ctx := context.Background()
	pool, err := sandbox.NewPool(ctx, sandbox.PoolOptions{Size: 2, Launch: emu.Launch})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)
	if err := pool.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// The oldest member is the next one out; end it behind the pool's back.
	cpc, _ := emu.Client(ctx)
	live := emu.Server.LiveMicrovms()
	first, _, _ := strings.Cut(live[0], " ")
	if _, err := cpc.TerminateMicrovm(ctx, &lambdamicrovms.TerminateMicrovmInput{MicrovmIdentifier: aws.String(first)}); err != nil {
		t.Fatal(err)
	}
	sb, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID() == first {
		t.Fatal("acquired the dead member")
	}
	if res, err := sb.Run(ctx, []string{"true"}, client.RunOptions{}); err != nil || res.ExitStatus != 0 {
		t.Fatal(res, err)
	}
}

// Catches: an Acquire that waits forever when the pool cannot launch,
// rather than returning the launch's error.
func TestPoolAcquireReportsARefillThatFails(t *testing.T) {
	emu := startEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bad := strings.Replace(emu.Server.AddImage("real"), ":microvm-image:real", ":microvm-image:nosuch", 1)
	pool, err := sandbox.NewPool(ctx, sandbox.PoolOptions{Size: 1, Launch: emu.Launch, Options: sandbox.Options{Image: bad}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)
	if _, err := pool.Acquire(ctx); err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("want the launch's failure naming the image, got %v (ctx %v)", err, ctx.Err())
	}
}

// Catches: idle members priced by when the report is asked for (suspended
// time running on after termination), the suspend's snapshot write left
// out for members never handed out, or idle time priced as running.
func TestPoolCostPricesIdleMembersAsTheyAreBilled(t *testing.T) {
	emu := startEmbedded(t)
	ctx := context.Background()
	t0 := time.Now()
	pool, err := sandbox.NewPool(ctx, sandbox.PoolOptions{Size: 2, Launch: emu.Launch})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	filled := time.Since(t0)
	time.Sleep(300 * time.Millisecond) // idle
	pool.Close(ctx)
	rates := cost.Pinned(emu.Region())
	first, err := pool.Cost(ctx, rates)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	again, err := pool.Cost(ctx, rates)
	if err != nil {
		t.Fatal(err)
	}
	byPhase := func(r cost.Report) map[string]cost.Line {
		m := map[string]cost.Line{}
		for _, l := range r.Lines {
			m[string(l.Phase)+"/"+string(l.Billing)] = l
		}
		return m
	}
	a, b := byPhase(first), byPhase(again)
	susp, ok := a["suspended/snapshot-storage"]
	if !ok {
		t.Fatalf("no suspended storage line: %v", first)
	}
	if susp.Duration.Time() < 2*250*time.Millisecond {
		t.Fatalf("two members idle 300 ms each held %s suspended", susp.Duration.Time())
	}
	if b["suspended/snapshot-storage"].Duration.Time() != susp.Duration.Time() || b["running/vcpu"].Duration.Time() != a["running/vcpu"].Duration.Time() {
		t.Fatalf("the bill of a closed pool moved with the clock: %s then %s", susp.Duration, b["suspended/snapshot-storage"].Duration)
	}
	// Each member ran at most from NewPool to full (plus the platform's
	// millisecond rounding); the idle 300 ms after that is not running.
	if a["running/vcpu"].Duration.Time() > 2*filled+100*time.Millisecond {
		t.Fatalf("idle time billed as running: running %s, suspended %s", a["running/vcpu"].Duration, susp.Duration)
	}
	if w := a["suspend/snapshot-write"]; w.Quantity.String() != "4" {
		t.Fatalf("want one 2 GB snapshot write per member, got %v", w)
	}
	if _, ok := a["resume/snapshot-read"]; ok {
		t.Fatal("a resume billed for members never handed out")
	}
}

// Catches: Acquire starting the replacement at once whatever RefillAfter
// says (the tenant's first command then queues behind a local guest start),
// a delayed refill that never comes, and one that launches after Close.
func TestPoolRefillWaitsRefillAfterAndNotAfterClose(t *testing.T) {
	emu := startEmbedded(t)
	ctx := context.Background()
	launches := func() int { return runMicrovmCalls(emu) }
	// waitLaunches polls (bounded) for n launches; false if they never came.
	waitLaunches := func(n int) bool {
		for range 400 {
			if launches() >= n {
				return true
			}
			time.Sleep(25 * time.Millisecond)
		}
		return false
	}

	// A refill held for an hour: none starts while the tenant works.
	held, err := sandbox.NewPool(ctx, sandbox.PoolOptions{Size: 1, Launch: emu.Launch, RefillAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := held.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := held.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Run(ctx, []string{"true"}, client.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := launches(); n != 1 {
		t.Fatalf("%d launches with RefillAfter an hour: the replacement did not wait", n)
	}
	held.Close(ctx)

	// Closed with its refill still pending: that refill must never launch.
	pending, err := sandbox.NewPool(ctx, sandbox.PoolOptions{Size: 1, Launch: emu.Launch, RefillAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := pending.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pending.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	pending.Close(ctx)
	time.Sleep(1500 * time.Millisecond)
	if n := launches(); n != 2 {
		t.Fatalf("%d launches, want 2: the closed pool's pending refill launched", n)
	}

	// A short delay: the replacement comes.
	quick, err := sandbox.NewPool(ctx, sandbox.PoolOptions{Size: 1, Launch: emu.Launch, RefillAfter: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer quick.Close(ctx)
	if err := quick.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := quick.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if !waitLaunches(4) {
		t.Fatalf("%d launches: the delayed refill never started", launches())
	}
	if err := quick.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if n := launches(); n != 4 {
		t.Fatalf("%d launches, want 4", n)
	}
}
