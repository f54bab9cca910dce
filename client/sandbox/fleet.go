package sandbox

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Launcher launches one sandbox from o: Launch on a control-plane client
// (LaunchOn), or an embedded emulator's Launch (emu.Launch), which fills in
// its image and fast polls. Fleets and pools launch through one.
type Launcher func(ctx context.Context, o Options) (*Sandbox, error)

// LaunchOn is the Launcher of Launch on c.
func LaunchOn(c *lambdamicrovms.Client) Launcher {
	return func(ctx context.Context, o Options) (*Sandbox, error) { return Launch(ctx, c, o) }
}

// Task is what a fleet does with each of its sandboxes: i is the sandbox's
// index in 0..Count-1. The sandbox is torn down after Task returns, so Task
// must not keep it.
type Task func(ctx context.Context, i int, sb *Sandbox) (client.Result, error)

// Command is the Task that runs command in each sandbox. A non-zero exit is
// the outcome's Err (Result.Err classifies it), so a fleet's failures are
// found in one place. Stdout and Stderr writers in o, when set, are written
// from every sandbox's goroutine at once; the captured Result is per sandbox.
func Command(command []string, o client.RunOptions) Task {
	return func(ctx context.Context, _ int, sb *Sandbox) (client.Result, error) {
		res, err := sb.Run(ctx, command, o)
		if err != nil {
			return res, err
		}
		return res, res.Err()
	}
}

// FleetOptions describe RunMany: Count sandboxes launched from Options
// through Launch, at most Parallel at a time.
type FleetOptions struct {
	// Count is how many sandboxes, 1..taxonomy.MaxFleetCount.
	Count int
	// Parallel bounds the sandboxes alive at once (each launched, tasked and
	// torn down before its slot is reused), 1..taxonomy.MaxFleetParallel;
	// zero is taxonomy.DefaultFleetParallel, or Count when smaller.
	Parallel int
	// Launch launches each sandbox (LaunchOn(c), or emu.Launch).
	Launch Launcher
	// Options is every sandbox's launch. Each gets an agent token of its
	// own, so AgentToken and Ledger (one record per run) must be unset:
	// PerSandbox sets per-sandbox values.
	Options Options
	// PerSandbox, if set, adjusts sandbox i's copy of Options before its
	// launch (a ledger record of its own, an environment); an error is that
	// sandbox's outcome and nothing is launched for it.
	PerSandbox func(i int, o *Options) error
	// Teardown is what each sandbox's teardown deletes besides the VM. A
	// fleet shares one image, so DeleteImage here would delete it under the
	// sandboxes still running; delete it after RunMany returns instead.
	Teardown TeardownOptions
	// MaxBackoff caps one delay between launches the control plane
	// throttled (default 20 s, cplane's default for the SDK retryer).
	MaxBackoff time.Duration
}

// Outcome is one sandbox of a fleet: what its task returned and what its
// teardown did. A sandbox that never launched has an empty MicrovmID and
// its launch's error in Err.
type Outcome struct {
	Index     int
	MicrovmID string
	// Sandbox is the torn-down sandbox (nil when RunMicrovm never
	// answered); its Cost still answers, from the platform's record.
	Sandbox  *Sandbox
	Result   client.Result
	Err      error
	Teardown TeardownReport
	// Attempts is how many launches it took (more than one only when the
	// control plane throttled).
	Attempts int
}

// FleetReport is every sandbox's outcome, in index order.
type FleetReport struct {
	Outcomes []Outcome
}

// Failed is the outcomes with an error, in index order.
func (r FleetReport) Failed() []Outcome {
	var out []Outcome
	for _, o := range r.Outcomes {
		if o.Err != nil {
			out = append(out, o)
		}
	}
	return out
}

// Leaked is every resource any teardown of the fleet could not delete.
func (r FleetReport) Leaked() []Leak {
	var out []Leak
	for _, o := range r.Outcomes {
		out = append(out, o.Teardown.Leaked...)
	}
	return out
}

// Cost is the fleet's one cost report: every launched sandbox priced from
// what the platform reports (Sandbox.Cost) and summed line by line
// (cost.Sum). A sandbox that never launched costs nothing and adds no line.
func (r FleetReport) Cost(ctx context.Context, rates cost.RateTable, label string) (cost.Report, error) {
	reports, err := r.Costs(ctx, rates)
	if err != nil {
		return cost.Report{}, err
	}
	return cost.Sum(label, reports...)
}

// Costs is each launched sandbox's own report, in index order, for a
// caller that sums them with something else (the image a fleet built).
// Ask before deleting the image: a sandbox's size class is read from its
// image version.
func (r FleetReport) Costs(ctx context.Context, rates cost.RateTable) ([]cost.Report, error) {
	var sbs []*Sandbox
	for _, o := range r.Outcomes {
		if o.Sandbox != nil {
			sbs = append(sbs, o.Sandbox)
		}
	}
	return costsOf(ctx, sbs, rates)
}

func costsOf(ctx context.Context, sbs []*Sandbox, rates cost.RateTable) ([]cost.Report, error) {
	reports := make([]cost.Report, 0, len(sbs))
	for _, sb := range sbs {
		rep, err := sb.Cost(ctx, rates)
		if err != nil {
			return nil, err
		}
		reports = append(reports, rep)
	}
	return reports, nil
}

// checkFleet refuses, before anything is launched, a count or bound out of
// range and a template that would share one token or one ledger record.
func checkFleet(what string, count, maxCount, parallel int, launch Launcher, o Options) (int, error) {
	if count < 1 || count > maxCount {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "%s of %d sandboxes is outside 1..%d", what, count, maxCount)
	}
	if parallel == 0 {
		parallel = min(count, taxonomy.DefaultFleetParallel)
	}
	if parallel < 1 || parallel > taxonomy.MaxFleetParallel {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "%s: a concurrency bound of %d is outside 1..%d", what, parallel, taxonomy.MaxFleetParallel)
	}
	if launch == nil {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "%s needs a Launcher (sandbox.LaunchOn(client), or an embedded emulator's Launch)", what)
	}
	if o.AgentToken != "" {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "%s: Options.AgentToken would give every sandbox the same token; leave it empty (each gets its own) or set one per sandbox in PerSandbox", what)
	}
	if o.Ledger != nil {
		return 0, client.Errorf(taxonomy.KindInvalidArg, "", "%s: Options.Ledger is one run's record; give each sandbox its own in PerSandbox", what)
	}
	return parallel, nil
}

// RunMany launches o.Count sandboxes, at most o.Parallel alive at once, runs
// task in each, and tears every one down: after its task, after a failed
// launch that still created a VM, when ctx is cancelled (sandboxes not yet
// launched are never launched, and their outcomes say so), and when a task
// panics, in which case RunMany re-panics with the first panic's value in
// the caller's goroutine once every teardown has finished (the value is an
// error naming the first panic's value and the task's stack). One failing
// launch or task does not stop the others. A launch the control plane
// throttled is tried again (taxonomy.FleetLaunchAttempts in all), after the
// delay aws-sdk-go-v2's retryer would wait.
//
// A refused FleetOptions is the error, and nothing is launched.
func RunMany(ctx context.Context, o FleetOptions, task Task) (FleetReport, error) {
	parallel, err := checkFleet("a fleet", o.Count, taxonomy.MaxFleetCount, o.Parallel, o.Launch, o.Options)
	if err != nil {
		return FleetReport{}, err
	}
	if task == nil {
		return FleetReport{}, client.Errorf(taxonomy.KindInvalidArg, "", "a fleet needs a Task (sandbox.Command, or a function)")
	}
	rep := FleetReport{Outcomes: make([]Outcome, o.Count)}
	backoff := newLaunchBackoff(o.MaxBackoff)
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var panicOnce sync.Once
	var panicked any
	for i := range o.Count {
		rep.Outcomes[i].Index = i
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			rep.Outcomes[i].Err = client.Errorf(taxonomy.KindInterrupted, "", "sandbox %d of the fleet was never launched: %v", i, ctx.Err())
			continue
		}
		wg.Add(1)
		go func(out *Outcome) {
			defer wg.Done()
			defer func() { <-slots }()
			defer func() {
				// Teardown runs whatever happened, with a context the
				// caller's cancellation cannot stop.
				if out.Sandbox != nil {
					out.Teardown = out.Sandbox.Terminate(context.WithoutCancel(ctx), o.Teardown)
				}
			}()
			defer func() {
				if v := recover(); v != nil {
					panicOnce.Do(func() { panicked = fleetPanic{value: v, stack: debug.Stack()} })
					out.Err = client.Errorf(taxonomy.KindUnexpected, "", "sandbox %d: the task panicked: %v", out.Index, v)
				}
			}()
			so := o.Options
			if o.PerSandbox != nil {
				if err := o.PerSandbox(out.Index, &so); err != nil {
					out.Err = err
					return
				}
			}
			sb, attempts, err := launchBackingOff(ctx, o.Launch, so, backoff)
			out.Sandbox, out.Attempts = sb, attempts
			if sb != nil {
				out.MicrovmID = sb.ID()
			}
			if err != nil {
				out.Err = err
				return
			}
			out.Result, out.Err = task(ctx, out.Index, sb)
		}(&rep.Outcomes[i])
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
	return rep, nil
}

// fleetPanic carries a task's panic, with the stack it was raised on, to
// the goroutine that called RunMany.
type fleetPanic struct {
	value any
	stack []byte
}

func (p fleetPanic) String() string {
	return fmt.Sprintf("%v\n\ngoroutine of the fleet's task:\n%s", p.value, p.stack)
}

// Unwrap is the panic's value when it was an error.
func (p fleetPanic) Unwrap() error { err, _ := p.value.(error); return err }

func (p fleetPanic) Error() string { return p.String() }

// newLaunchBackoff is the delay aws-sdk-go-v2's standard retryer uses
// between attempts (exponential with full jitter, capped), which is also
// what cplane configures its client with.
func newLaunchBackoff(maxBackoff time.Duration) *retry.ExponentialJitterBackoff {
	if maxBackoff <= 0 {
		maxBackoff = 20 * time.Second
	}
	return retry.NewExponentialJitterBackoff(maxBackoff)
}

// throttled reports whether err is the control plane refusing for rate:
// the SDK's own throttle codes (ThrottlingException, TooManyRequests...).
// Only a throttled RunMicrovm is launched again, because a throttled call
// created nothing; a 5xx or an unanswered one might have, under a
// clientToken a new call would not reuse.
func throttled(err error) bool {
	return retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary
}

// launchBackingOff launches one sandbox, launching again after a backoff
// while RunMicrovm is throttled, up to taxonomy.FleetLaunchAttempts.
func launchBackingOff(ctx context.Context, launch Launcher, o Options, backoff *retry.ExponentialJitterBackoff) (*Sandbox, int, error) {
	for attempt := 1; ; attempt++ {
		sb, err := launch(ctx, o)
		if err == nil || sb != nil || attempt >= taxonomy.FleetLaunchAttempts || !throttled(err) {
			return sb, attempt, err
		}
		delay, derr := backoff.BackoffDelay(attempt, err)
		if derr != nil {
			return nil, attempt, err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, attempt, client.Errorf(taxonomy.KindInterrupted, "", "stopped waiting to launch again after throttling (%v): %v", ctx.Err(), err).WithCause(err)
		}
	}
}
