package sandbox

import (
	"context"
	"time"

	"github.com/aws/smithy-go/middleware"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
)

// The sandbox's MicroVM calls and waits go through client/lambdamicrovms
// (the generated SDK) with their errors classified by cplane.SDKError.

func (s *Sandbox) api() *lambdamicrovms.Client { return s.cp }

func (s *Sandbox) getMicrovm(ctx context.Context) (*lambdamicrovms.GetMicrovmOutput, error) {
	out, err := s.api().GetMicrovm(ctx, &lambdamicrovms.GetMicrovmInput{MicrovmIdentifier: &s.id})
	return out, cplane.SDKError("GetMicrovm", err)
}

func (s *Sandbox) suspendVM(ctx context.Context) error {
	_, err := s.api().SuspendMicrovm(ctx, &lambdamicrovms.SuspendMicrovmInput{MicrovmIdentifier: &s.id})
	return cplane.SDKError("SuspendMicrovm", err)
}

func (s *Sandbox) resumeVM(ctx context.Context) error {
	_, err := s.api().ResumeMicrovm(ctx, &lambdamicrovms.ResumeMicrovmInput{MicrovmIdentifier: &s.id})
	return cplane.SDKError("ResumeMicrovm", err)
}

func (s *Sandbox) terminateCall(ctx context.Context) error {
	_, err := s.api().TerminateMicrovm(ctx, &lambdamicrovms.TerminateMicrovmInput{MicrovmIdentifier: &s.id})
	return cplane.SDKError("TerminateMicrovm", err)
}

func (s *Sandbox) deleteImage(ctx context.Context) error {
	id := s.ref.String()
	_, err := s.api().DeleteMicrovmImage(ctx, &lambdamicrovms.DeleteMicrovmImageInput{ImageIdentifier: &id})
	return cplane.SDKError("DeleteMicrovmImage", err)
}

// waitPlan turns the sandbox's WaitOptions into a waiter's delays and budget:
// Interval is the minimum delay (the SDK's default when unset), the maximum
// delay is at least 10 s, and the budget is the context's deadline or Timeout
// (10 minutes when unset). Progress is called after every poll.
type waitPlan struct {
	minDelay, maxDelay, budget time.Duration
	apiOptions                 []func(*middleware.Stack) error
}

func planWait(ctx context.Context, o cplane.WaitOptions) waitPlan {
	p := waitPlan{minDelay: o.Interval, maxDelay: max(o.Interval, 10*time.Second), budget: o.Timeout}
	if p.minDelay <= 0 {
		p.minDelay = time.Second
	}
	if p.budget <= 0 {
		p.budget = 10 * time.Minute
	}
	if dl, ok := ctx.Deadline(); ok {
		p.budget = max(time.Until(dl), time.Millisecond)
	}
	if o.Progress != nil {
		start, polls := time.Now(), 0
		p.apiOptions = append(p.apiOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("WaitProgress",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					out, md, err := next.HandleInitialize(ctx, in)
					if g, ok := out.Result.(*lambdamicrovms.GetMicrovmOutput); ok && err == nil {
						polls++
						o.Progress(cplane.Progress{Poll: polls, State: string(g.State), Elapsed: time.Since(start)})
					}
					return out, md, err
				}), middleware.After)
		})
	}
	return p
}

// waitFor runs the MicroVM waiter for target (RUNNING, SUSPENDED or
// TERMINATED) with the sandbox's WaitOptions.
func (s *Sandbox) waitFor(ctx context.Context, target types.MicrovmState) (*lambdamicrovms.GetMicrovmOutput, error) {
	return WaitMicrovm(ctx, s.api(), s.id, target, s.opts.Wait)
}

// WaitMicrovm waits for the MicroVM id to reach target (RUNNING, SUSPENDED
// or TERMINATED) with client/lambdamicrovms's waiter: the first poll at
// once, then delays from o.Interval (1 s when unset) backing off to at most
// max(Interval, 10 s), within the context's deadline or o.Timeout (10
// minutes when unset). o.Progress sees every poll. A MicroVM that dies
// while RUNNING is awaited fails as LaunchDied; SUSPENDED and SUSPENDING are
// waited through, since a resumed VM reads SUSPENDED for a few polls.
func WaitMicrovm(ctx context.Context, api *lambdamicrovms.Client, id string, target types.MicrovmState, o cplane.WaitOptions) (*lambdamicrovms.GetMicrovmOutput, error) {
	p := planWait(ctx, o)
	in := &lambdamicrovms.GetMicrovmInput{MicrovmIdentifier: &id}
	var (
		out *lambdamicrovms.GetMicrovmOutput
		err error
		op  string
	)
	switch target {
	case types.MicrovmStateRunning:
		op = "WaitRunning"
		out, err = lambdamicrovms.NewMicrovmRunningWaiter(api, func(o *lambdamicrovms.MicrovmRunningWaiterOptions) {
			o.MinDelay, o.MaxDelay, o.APIOptions = p.minDelay, p.maxDelay, p.apiOptions
		}).WaitForOutput(ctx, in, p.budget)
	case types.MicrovmStateSuspended:
		op = "WaitSuspended"
		out, err = lambdamicrovms.NewMicrovmSuspendedWaiter(api, func(o *lambdamicrovms.MicrovmSuspendedWaiterOptions) {
			o.MinDelay, o.MaxDelay, o.APIOptions = p.minDelay, p.maxDelay, p.apiOptions
		}).WaitForOutput(ctx, in, p.budget)
	default:
		op = "WaitTerminated"
		out, err = lambdamicrovms.NewMicrovmTerminatedWaiter(api, func(o *lambdamicrovms.MicrovmTerminatedWaiterOptions) {
			o.MinDelay, o.MaxDelay, o.APIOptions = p.minDelay, p.maxDelay, p.apiOptions
		}).WaitForOutput(ctx, in, p.budget)
	}
	return out, cplane.SDKError(op+" "+id, err)
}
