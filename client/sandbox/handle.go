package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Handle is a MicroVM named by its id alone, as a process that did not
// launch it holds one (the CLI's suspend, resume, terminate, status): each
// call reads the MicroVM's state first and refuses, before anything is
// sent, what the state model refuses. Attach turns it into a Sandbox with
// the agent token its launch installed.
type Handle struct {
	cp *lambdamicrovms.Client
	id string
}

// Open is the handle of the MicroVM id on the control plane c. Nothing is
// sent until a call.
func Open(c *lambdamicrovms.Client, id string) *Handle { return &Handle{cp: c, id: id} }

// ID is the MicroVM's id.
func (h *Handle) ID() string { return h.id }

// Status is what the control plane says of one MicroVM.
type Status struct {
	ID          string
	State       Lifecycle
	Endpoint    string // a bare host, as GetMicrovm returns it; "" when it has none
	StateReason string
	ImageARN    string
	StartedAt   time.Time // zero when not reported
	// SuspendedWindow is idlePolicy.suspendedDurationSeconds, 0 when not
	// reported.
	SuspendedWindow time.Duration
	// MaxIdle is idlePolicy.maxIdleDurationSeconds: RUNNING without an
	// inbound request that long, the VM is suspended. 0 when not reported.
	MaxIdle time.Duration
	// Deadline is startedAt plus maximumDurationInSeconds, when the
	// platform terminates the VM whatever it is doing; zero when unknown.
	Deadline time.Time
}

// Dead reports a MicroVM that is gone or going: TERMINATING or TERMINATED.
func (s Status) Dead() bool { return s.State == Terminating || s.State == Terminated }

func statusOf(g *lambdamicrovms.GetMicrovmOutput, id string) Status {
	s := Status{ID: id, State: Lifecycle(g.State), Endpoint: aws.ToString(g.Endpoint),
		StateReason: aws.ToString(g.StateReason), ImageARN: aws.ToString(g.ImageArn)}
	if g.StartedAt != nil {
		s.StartedAt = *g.StartedAt
	}
	if g.IdlePolicy != nil && g.IdlePolicy.SuspendedDurationSeconds != nil {
		s.SuspendedWindow = time.Duration(*g.IdlePolicy.SuspendedDurationSeconds) * time.Second
	}
	if g.IdlePolicy != nil && g.IdlePolicy.MaxIdleDurationSeconds != nil {
		s.MaxIdle = time.Duration(*g.IdlePolicy.MaxIdleDurationSeconds) * time.Second
	}
	if g.StartedAt != nil && g.MaximumDurationInSeconds != nil {
		s.Deadline = g.StartedAt.Add(time.Duration(*g.MaximumDurationInSeconds) * time.Second)
	}
	return s
}

// modelAt is the state model of a MicroVM seen in state st by a process
// that did not launch it: past PENDING, its token was installed once.
func modelAt(st Lifecycle) model {
	m := model{lifecycle: st, imageExists: true}
	if st != Pending {
		m.tokenInstalled, m.bootstrapCount = true, 1
	}
	m.wasTerminated = st == Terminating || st == Terminated
	return m
}

// Status reads the MicroVM's state. An id the control plane does not know
// is a Precondition error (cplane.SDKError), never a transient one.
func (h *Handle) Status(ctx context.Context) (Status, error) {
	g, err := h.cp.GetMicrovm(ctx, &lambdamicrovms.GetMicrovmInput{MicrovmIdentifier: aws.String(h.id)})
	if err != nil {
		return Status{ID: h.id}, cplane.SDKError("GetMicrovm", err)
	}
	return statusOf(g, h.id), nil
}

// refusal names the MicroVM in the model's refusal, keeping its kind and
// finding.
func (h *Handle) refusal(err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err
	}
	return client.Errorf(ce.Kind(), ce.Finding(), "MicroVM %s: %s", h.id, ce.Message())
}

// Suspend freezes a RUNNING MicroVM and waits (w) for SUSPENDED; any other
// state is refused unsent. The returned Status is the last one read, also
// on failure.
func (h *Handle) Suspend(ctx context.Context, w cplane.WaitOptions) (Status, error) {
	st, err := h.Status(ctx)
	if err != nil {
		return st, err
	}
	m := modelAt(st.State)
	if err := m.suspend(); err != nil {
		return st, h.refusal(err)
	}
	_, err = h.cp.SuspendMicrovm(ctx, &lambdamicrovms.SuspendMicrovmInput{MicrovmIdentifier: aws.String(h.id)})
	if err != nil {
		return st, cplane.SDKError("SuspendMicrovm", err)
	}
	return h.await(ctx, types.MicrovmStateSuspended, w, st)
}

// Resume thaws a SUSPENDED (or SUSPENDING) MicroVM and waits (w) for
// RUNNING; a RUNNING one is returned as it is. A dead one is WindowClosed:
// its suspended window passed or it was terminated, and nothing brings it
// back. Any other state is refused unsent.
func (h *Handle) Resume(ctx context.Context, w cplane.WaitOptions) (Status, error) {
	st, err := h.Status(ctx)
	if err != nil {
		return st, err
	}
	switch {
	case st.Dead():
		return st, h.windowClosed(st)
	case st.State == Running:
		return st, nil
	case st.State == Suspending:
		// The service takes a resume of a SUSPENDING MicroVM (the model's
		// idempotent marking); the model waits for SUSPENDED, this call
		// need not.
	default:
		m := modelAt(st.State)
		if err := m.resume(); err != nil {
			return st, h.refusal(err)
		}
	}
	_, err = h.cp.ResumeMicrovm(ctx, &lambdamicrovms.ResumeMicrovmInput{MicrovmIdentifier: aws.String(h.id)})
	if err != nil {
		if now, gerr := h.Status(ctx); gerr == nil && now.Dead() {
			return now, h.windowClosed(now)
		}
		return st, cplane.SDKError("ResumeMicrovm", err)
	}
	got, err := h.await(ctx, types.MicrovmStateRunning, w, st)
	if err != nil && client.KindOf(err) == taxonomy.KindLaunchDied {
		// Dead while RUNNING was awaited: the window closed under the wait.
		if now, gerr := h.Status(context.WithoutCancel(ctx)); gerr == nil && now.Dead() {
			return now, h.windowClosed(now)
		}
	}
	return got, err
}

// Terminate ends the MicroVM, without waiting; one already dead is not an
// error (its state is returned).
func (h *Handle) Terminate(ctx context.Context) (Status, error) {
	st := Status{ID: h.id, State: Terminating}
	_, err := h.cp.TerminateMicrovm(ctx, &lambdamicrovms.TerminateMicrovmInput{MicrovmIdentifier: aws.String(h.id)})
	if err != nil {
		now, gerr := h.Status(ctx)
		if gerr != nil || !now.Dead() {
			return st, cplane.SDKError("TerminateMicrovm", err)
		}
		st = now
	}
	return st, nil
}

// Await waits (w) for target: RUNNING, SUSPENDED or TERMINATED, as
// WaitMicrovm does.
func (h *Handle) Await(ctx context.Context, target Lifecycle, w cplane.WaitOptions) (Status, error) {
	return h.await(ctx, types.MicrovmState(target), w, Status{ID: h.id})
}

// Attach is the Sandbox of this MicroVM with the agent token its launch
// installed (see Attach).
func (h *Handle) Attach(ctx context.Context, agentToken string, o Options) (*Sandbox, error) {
	return Attach(ctx, h.cp, h.id, agentToken, o)
}

// await waits for target, returning last when the wait fails.
func (h *Handle) await(ctx context.Context, target types.MicrovmState, w cplane.WaitOptions, last Status) (Status, error) {
	g, err := WaitMicrovm(ctx, h.cp, h.id, target, w)
	if err != nil {
		return last, err
	}
	return statusOf(g, h.id), nil
}

// windowClosed is a MicroVM the platform already ended: past its suspended
// window there is nothing left to thaw (finding idle-policy).
func (h *Handle) windowClosed(st Status) error {
	window := "its suspended window"
	if st.SuspendedWindow > 0 {
		window = fmt.Sprintf("its suspended window (idlePolicy.suspendedDurationSeconds=%d)", int(st.SuspendedWindow/time.Second))
	}
	reason := "no stateReason given"
	if st.StateReason != "" {
		reason = st.StateReason
	}
	return client.Errorf(taxonomy.KindWindowClosed, taxonomy.FindingIdlePolicy,
		"MicroVM %s is %s, so there is nothing to resume: %s has passed or it was terminated (%s); launch a new one", h.id, st.State, window, reason)
}

// Unavailable explains why a MicroVM in this state takes no traffic, nil
// when it does (RUNNING) or soon will (PENDING): a SUSPENDED or SUSPENDING
// one is a Precondition naming the resume, a dead one a Precondition naming
// its end. An attached call that failed at the endpoint reads the state and
// reports this rather than "try again", which cannot help.
func (s Status) Unavailable() error {
	switch {
	case s.State == Suspended || s.State == Suspending:
		return client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingSuspendIsFreeze,
			"MicroVM %s is %s: a suspended MicroVM takes no traffic until it is resumed", s.ID, s.State)
	case s.Dead():
		reason := ""
		if s.StateReason != "" {
			reason = " (" + s.StateReason + ")"
		}
		return client.Errorf(taxonomy.KindPrecondition, taxonomy.MicrovmStateFinding,
			"MicroVM %s is %s%s: it will take no traffic again; launch a new one", s.ID, s.State, reason)
	}
	return nil
}

// List is every MicroVM the control plane lists, through every page.
func List(ctx context.Context, c *lambdamicrovms.Client) ([]Status, error) {
	var out []Status
	pg := lambdamicrovms.NewListMicrovmsPaginator(c, &lambdamicrovms.ListMicrovmsInput{})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, cplane.SDKError("ListMicrovms", err)
		}
		for _, it := range page.Items {
			s := Status{ID: aws.ToString(it.MicrovmId), State: Lifecycle(it.State), ImageARN: aws.ToString(it.ImageArn)}
			if it.StartedAt != nil {
				s.StartedAt = *it.StartedAt
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// Cost prices the MicroVM's life so far (its whole life, once terminated)
// with rates: the time since startedAt as RUNNING, at the size class its
// image version was built with. A handle does not know how long the MicroVM
// spent suspended, so that time is priced as running: an upper bound for one
// that was suspended, exact for one that never was.
func (h *Handle) Cost(ctx context.Context, rates cost.RateTable) (cost.Report, error) {
	s := &Sandbox{cp: h.cp, id: h.id, m: newModel()}
	u, size, err := s.Usage(ctx)
	if err != nil {
		return cost.Report{}, err
	}
	return cost.RunReport("microvm "+h.id+" so far", size, u, rates, time.Now())
}
