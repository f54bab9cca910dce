package sandbox

import (
	"context"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
)

// Usage is what this sandbox's MicroVM consumed, read from the platform
// rather than timed by the caller: the time RUNNING is GetMicrovm's
// startedAt to its terminatedAt (or now, for a VM still up), less the time
// this sandbox held it suspended; the size class is the one its image
// version was built with (GetMicrovmImageVersion's resources, or the
// platform's default class when the image names none).
func (s *Sandbox) Usage(ctx context.Context) (cost.Usage, client.SizeClass, error) {
	var u cost.Usage
	g, err := s.getMicrovm(ctx)
	if err != nil {
		return u, client.SizeClass{}, err
	}
	size, err := s.sizeClass(ctx, g)
	if err != nil {
		return u, client.SizeClass{}, err
	}
	s.mu.Lock()
	frozen, cycles, unresumed := s.frozen, s.cycles, !s.suspendedAt.IsZero()
	if unresumed {
		// Held suspended until now, or until the platform says it ended: a
		// VM terminated while suspended stops billing storage then, however
		// long after that the report is asked for.
		end := s.now()
		if g.TerminatedAt != nil && g.TerminatedAt.Before(end) {
			end = *g.TerminatedAt
		}
		if d := end.Sub(s.suspendedAt); d > 0 {
			frozen += d
		}
	}
	s.mu.Unlock()
	u.Launched = true
	u.Cycles = cycles
	u.Unresumed = unresumed
	if g.StartedAt != nil {
		end := time.Now()
		if g.TerminatedAt != nil {
			end = *g.TerminatedAt
		}
		if ran := end.Sub(*g.StartedAt) - frozen; ran > 0 {
			if u.Running, err = cost.MeasuredDuration(ran); err != nil {
				return u, size, err
			}
		}
	}
	if frozen > 0 || unresumed {
		// A VM that ended suspended held a snapshot, however short the
		// platform's millisecond timestamps make the hold look.
		if u.Suspended, err = cost.MeasuredDuration(frozen); err != nil {
			return u, size, err
		}
	}
	return u, size, nil
}

// Cost prices Usage with rates (cost.Pinned(region) is the dated table this
// library ships) into the line items AWS bills. Every amount is an estimate.
func (s *Sandbox) Cost(ctx context.Context, rates cost.RateTable) (cost.Report, error) {
	u, size, err := s.Usage(ctx)
	if err != nil {
		return cost.Report{}, err
	}
	return cost.RunReport("sandbox "+s.id, size, u, rates, time.Now())
}

func (s *Sandbox) sizeClass(ctx context.Context, g *lambdamicrovms.GetMicrovmOutput) (client.SizeClass, error) {
	if g.ImageArn == nil || *g.ImageArn == "" {
		return client.DefaultSizeClass(), nil
	}
	in := &lambdamicrovms.GetMicrovmImageVersionInput{ImageIdentifier: g.ImageArn, ImageVersion: g.ImageVersion}
	v, err := s.api().GetMicrovmImageVersion(ctx, in)
	if err != nil {
		return client.SizeClass{}, cplane.SDKError("GetMicrovmImageVersion", err)
	}
	for _, r := range v.Resources {
		if r.MinimumMemoryInMiB != nil {
			return client.SizeClassFromBaseline(int(*r.MinimumMemoryInMiB))
		}
	}
	return client.DefaultSizeClass(), nil
}
