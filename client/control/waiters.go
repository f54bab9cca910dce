package control

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Progress is one observation a waiter reports.
type Progress struct {
	Poll    int
	State   string
	Elapsed time.Duration
	// Builds is set while an image builds: each build's state.
	Builds []cp.MicrovmImageBuildSummary
}

// WaitOptions bound and observe a wait. Every wait ends: at the context's
// deadline, or at Timeout when the context has none.
type WaitOptions struct {
	// Interval between polls (default 10s).
	Interval time.Duration
	// Timeout applies when ctx has no deadline (default 30 minutes for an
	// image, 10 minutes for a MicroVM).
	Timeout time.Duration
	// Grace is how long an image may sit in CREATING with every build
	// PENDING before it is called wedged (default 10 minutes).
	Grace time.Duration
	// Progress, if set, is called after every poll.
	Progress func(Progress)
}

func (o WaitOptions) withDefaults(timeout time.Duration) WaitOptions {
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = timeout
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Minute
	}
	return o
}

// poll calls step every Interval until it reports done, ctx ends, or the
// Timeout passes. step errors end the wait unchanged.
func (c *Client) poll(ctx context.Context, o WaitOptions, what string, step func(ctx context.Context, n int, elapsed time.Duration) (done bool, state string, err error)) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	// Elapsed time is read from the monotonic clock, not from Options.Now,
	// which may be pinned for reproducible signatures.
	start := time.Now()
	last := "unobserved"
	for n := 1; ; n++ {
		done, state, err := step(ctx, n, time.Since(start))
		if err != nil {
			if client.KindOf(err) == taxonomy.KindTimeout || client.KindOf(err) == taxonomy.KindInterrupted {
				return c.waitEnded(ctx, what, last, n)
			}
			return err
		}
		last = state
		if done {
			return nil
		}
		t := time.NewTimer(o.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return c.waitEnded(ctx, what, last, n)
		case <-t.C:
		}
	}
}

func (c *Client) waitEnded(ctx context.Context, what, last string, polls int) error {
	kind := taxonomy.KindTimeout
	if ctx.Err() == context.Canceled {
		kind = taxonomy.KindInterrupted
	}
	return client.Errorf(kind, "", "waiting for %s: stopped after %d polls, last state %s: %w", what, polls, last, ctx.Err())
}

// BuildFailure is the evidence behind a failed image: the version and every
// build's reason, read from the builds because neither the image nor the
// version carries one.
type BuildFailure struct {
	Image   string
	Version string
	Builds  []cp.MicrovmImageBuildSummary
}

func (f *BuildFailure) Error() string {
	var reasons []string
	for _, b := range f.Builds {
		r := "no reason given"
		if b.StateReason != nil {
			r = *b.StateReason
		}
		reasons = append(reasons, fmt.Sprintf("build %s (Graviton %s) %s: %s", b.BuildId, b.ChipsetGeneration, b.BuildState, r))
	}
	if len(reasons) == 0 {
		reasons = []string{"no builds listed"}
	}
	return fmt.Sprintf("image %s version %s failed: %s", f.Image, f.Version, strings.Join(reasons, "; "))
}

// WaitImage polls an image until its build of version (the imageVersion a
// create or update returned) succeeds. On failure the reasons come from the
// version's builds. An image still CREATING past Grace with every build
// PENDING is wedged, the signature of a replayed clientToken, and fails at
// once rather than after the whole timeout.
func (c *Client) WaitImage(ctx context.Context, ref ImageRef, version string, o WaitOptions) (*cp.GetMicrovmImageOutput, error) {
	if err := firstErr(ref.check(), CheckImageVersion(version)); err != nil {
		return nil, err
	}
	o = o.withDefaults(30 * time.Minute)
	var out *cp.GetMicrovmImageOutput
	err := c.poll(ctx, o, "image "+ref.id, func(ctx context.Context, n int, elapsed time.Duration) (bool, string, error) {
		im, err := c.GetImage(ctx, ref)
		if err != nil {
			return false, "", err
		}
		state := string(im.State)
		p := Progress{Poll: n, State: state, Elapsed: elapsed}
		defer func() {
			if o.Progress != nil {
				o.Progress(p)
			}
		}()
		switch {
		case slices.Contains(taxonomy.ImageReadyStates, state) && (im.LatestActiveImageVersion == nil || *im.LatestActiveImageVersion == version):
			out = im
			return true, state, nil
		case slices.Contains(taxonomy.ImageFailedStates, state):
			failed := version
			if im.LatestFailedImageVersion != nil {
				failed = *im.LatestFailedImageVersion
			}
			builds, err := c.builds(ctx, ref, failed)
			if err != nil {
				return false, state, err
			}
			p.Builds = builds
			bf := &BuildFailure{Image: ref.id, Version: failed, Builds: builds}
			return false, state, client.Errorf(taxonomy.KindPlatform, taxonomy.FindingBuildFailureOnBuild,
				"%v (the reason is read from the builds; the image and version carry none, and the build log group %s%s holds the rest)",
				bf, taxonomy.BuildLogGroupPrefix, im.Name).WithCause(bf)
		case elapsed >= o.Grace:
			builds, err := c.builds(ctx, ref, version)
			if err != nil {
				return false, state, err
			}
			p.Builds = builds
			if len(builds) > 0 && !slices.ContainsFunc(builds, func(b cp.MicrovmImageBuildSummary) bool { return b.BuildState != cp.BuildStatePENDING }) {
				return false, state, client.Errorf(taxonomy.KindBuildWedged, taxonomy.FindingClientTokenPermanent,
					"image %s has been %s for %s with all %d builds of version %s still PENDING: its builds were never scheduled, which is what a replayed clientToken does. It cannot be deleted until the service times it out (measured: hours); build under a new name",
					ref.id, state, elapsed.Round(time.Second), len(builds), version)
			}
		}
		return false, state, nil
	})
	return out, err
}

func (c *Client) builds(ctx context.Context, ref ImageRef, version string) ([]cp.MicrovmImageBuildSummary, error) {
	p, err := c.ListImageBuilds(ref, version, 0)
	if err != nil {
		return nil, err
	}
	return p.All(ctx)
}

// WaitRunning polls a MicroVM until RUNNING, after a launch or a resume. A
// dead state (TERMINATING, TERMINATED) first means the VM will never run
// (after a launch, almost always a failed run hook) and fails at once as
// LaunchDied with the stateReason, instead of polling on and reporting a
// connection error later. SUSPENDING and SUSPENDED are waited through: a
// resumed VM reads SUSPENDED for a few polls before RUNNING. That lag is
// assumed, not measured: docs/PLATFORM.md records suspend/resume as a freeze
// and thaw but not the states a resume passes through, and the service
// model names no resuming state.
func (c *Client) WaitRunning(ctx context.Context, id string, o WaitOptions) (*cp.GetMicrovmResponse, error) {
	return c.waitVM(ctx, id, cp.MicrovmStateRUNNING, taxonomy.MicrovmDeadStates, o)
}

// WaitSuspended polls until SUSPENDED; TERMINATING or TERMINATED fail it.
func (c *Client) WaitSuspended(ctx context.Context, id string, o WaitOptions) (*cp.GetMicrovmResponse, error) {
	return c.waitVM(ctx, id, cp.MicrovmStateSUSPENDED, taxonomy.MicrovmDeadStates, o)
}

// WaitTerminated polls until TERMINATED.
func (c *Client) WaitTerminated(ctx context.Context, id string, o WaitOptions) (*cp.GetMicrovmResponse, error) {
	return c.waitVM(ctx, id, cp.MicrovmStateTERMINATED, nil, o)
}

func (c *Client) waitVM(ctx context.Context, id string, target cp.MicrovmState, fatal []string, o WaitOptions) (*cp.GetMicrovmResponse, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	o = o.withDefaults(10 * time.Minute)
	var out *cp.GetMicrovmResponse
	err := c.poll(ctx, o, fmt.Sprintf("MicroVM %s to be %s", id, target), func(ctx context.Context, n int, elapsed time.Duration) (bool, string, error) {
		vm, err := c.GetMicrovm(ctx, id)
		if err != nil {
			return false, "", err
		}
		state := string(vm.State)
		if o.Progress != nil {
			o.Progress(Progress{Poll: n, State: state, Elapsed: elapsed})
		}
		if vm.State == target {
			out = vm
			return true, state, nil
		}
		if slices.Contains(fatal, state) {
			reason := "no stateReason given"
			if vm.StateReason != nil {
				reason = *vm.StateReason
			}
			out = vm
			kind := taxonomy.KindLaunchDied
			if target != cp.MicrovmStateRUNNING {
				kind = taxonomy.KindPlatform
			}
			return false, state, client.Errorf(kind, taxonomy.MicrovmStateFinding,
				"MicroVM %s reached %s while waiting for %s: %s", id, state, target, reason)
		}
		return false, state, nil
	})
	return out, err
}
