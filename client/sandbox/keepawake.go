package sandbox

// What a sandbox knows of the platform's clocks (the idle policy and the
// maximum duration, both as GetMicrovm reports them) and the session
// options that follow from them: a session that keeps a busy VM awake.

import (
	"context"
	"fmt"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/gen/taxonomy"
)

// observeClocksLocked takes the idle window and the end of the maximum
// duration from GetMicrovm; called with s.mu held.
func (s *Sandbox) observeClocksLocked(g *lambdamicrovms.GetMicrovmOutput) {
	if g == nil {
		return
	}
	if p := g.IdlePolicy; p != nil && p.MaxIdleDurationSeconds != nil && *p.MaxIdleDurationSeconds > 0 {
		s.maxIdle = time.Duration(*p.MaxIdleDurationSeconds) * time.Second
	}
	if g.StartedAt != nil && g.MaximumDurationInSeconds != nil && *g.MaximumDurationInSeconds > 0 {
		s.deadline = g.StartedAt.Add(time.Duration(*g.MaximumDurationInSeconds) * time.Second)
	}
}

// MaxIdle is the idle policy's maxIdleDurationSeconds as GetMicrovm
// reported it: how long the VM stays RUNNING without an inbound request.
// Zero when the VM has no idle policy.
func (s *Sandbox) MaxIdle() time.Duration { s.mu.Lock(); defer s.mu.Unlock(); return s.maxIdle }

// Deadline is when the platform terminates the VM whatever it is doing:
// its startedAt plus maximumDurationInSeconds (finding max-duration). Zero
// when GetMicrovm did not say.
func (s *Sandbox) Deadline() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.deadline }

// sessionOptions are the options of the sandbox's session: the agent port,
// streams that wait out a suspend (phase.go), keep-awake pings while work is in flight when the VM has an idle policy
// (unless o.NoKeepAwake), then the caller's own, which win.
func (s *Sandbox) sessionOptions(o Options) []client.Option {
	opts := []client.Option{client.WithAgentPort(o.Port), client.WithVMPhase(s.vmPhase)}
	s.mu.Lock()
	maxIdle := s.maxIdle
	s.mu.Unlock()
	if maxIdle > 0 && !o.NoKeepAwake {
		every := o.KeepAwakeEvery
		if every <= 0 {
			every = client.KeepAwakeInterval(maxIdle)
		}
		opts = append(opts, client.WithKeepAwake(every))
	}
	return append(opts, o.SessionOptions...)
}

// warnDeadline tells o.Warn when a command's timeout runs past the time
// the VM has left: the platform ends the VM at its maximum duration, so the
// command would be cut there, not at its timeout.
func (s *Sandbox) warnDeadline(command []string, o client.RunOptions) {
	if s.opts.Warn == nil {
		return
	}
	deadline := s.Deadline()
	if deadline.IsZero() {
		return
	}
	left := deadline.Sub(s.now())
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"client timeout", o.ClientTimeout}, {"daemon timeout", o.DaemonTimeout}} {
		if t.d > left {
			s.opts.Warn(fmt.Sprintf("the %s of %v (%s) is longer than the %s MicroVM %s has left before its maximumDurationInSeconds ends it (finding max-duration)",
				t.name, command, t.d, left.Truncate(time.Second), s.id))
			return
		}
	}
}

// KeepAwake holds the VM awake until ctx ends, whatever is in flight (see
// HoldAwake); it returns the pings sent, and a nil error when ctx ends.
func (s *Sandbox) KeepAwake(ctx context.Context, interval time.Duration) (int, error) {
	sess, err := s.runningSession()
	if err != nil {
		return 0, err
	}
	return HoldAwake(ctx, sess, Open(s.cp, s.id).Status, interval)
}

// HoldAwake sends GET /v1/health through sess's endpoint every interval
// until ctx ends, whatever is in flight. Zero interval is a quarter of the
// VM's maxIdleDurationSeconds (as status, a GetMicrovm, reports it), or of the
// platform's minimum when it has no idle policy. It is for work no call of
// this process waits on, such as a detached command, whose launcher cannot
// keep the VM awake once it has exited (`microvm keepalive` runs it in the
// foreground). It returns the pings sent, and nil when ctx ends; an error
// when a ping failed and the VM is no longer RUNNING, since then there is
// nothing left to hold awake (finding idle-policy).
func HoldAwake(ctx context.Context, sess *client.Session, status func(context.Context) (Status, error), interval time.Duration) (int, error) {
	if interval <= 0 {
		st, err := status(ctx)
		if err != nil {
			return 0, err
		}
		interval = client.KeepAwakeInterval(st.MaxIdle)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	pings := 0
	for {
		pctx, cancel := context.WithTimeout(ctx, interval)
		_, perr := sess.Health(pctx)
		cancel()
		if ctx.Err() != nil {
			return pings, nil
		}
		pings++
		if perr != nil {
			st, err := status(ctx)
			if err == nil && st.State != Running && st.State != Pending {
				reason := ""
				if st.StateReason != "" {
					reason = " (" + st.StateReason + ")"
				}
				return pings, refuse(taxonomy.FindingIdlePolicy, "MicroVM %s is %s%s; a keep-awake ping holds only a RUNNING MicroVM awake", st.ID, st.State, reason)
			}
		}
		select {
		case <-ctx.Done():
			return pings, nil
		case <-tick.C:
		}
	}
}
