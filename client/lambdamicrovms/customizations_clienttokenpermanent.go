package lambdamicrovms

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. The service remembers a clientToken forever: a token that
// recurs after its image was deleted replays the old create as a no-op, and
// the new image sits in CREATING with every build PENDING for hours, unable
// to be deleted (finding client-token-permanent). This client mints every
// token from crypto/rand, so it never replays one; an image built by another
// client can still be wedged. ImageBuildRetryable makes the
// MicrovmImageAvailable waiter fail on such an image after a grace period
// instead of polling out its whole budget, and read a failed build's reason
// (customizations_buildfailureonbuild.go).

// DefaultWedgeGrace is how long an image may sit in CREATING with every
// build PENDING before ImageBuildRetryable calls it wedged.
const DefaultWedgeGrace = 10 * time.Minute

// WedgedBuildError is an image whose builds were never scheduled.
type WedgedBuildError struct {
	Image, Version string
	State          types.MicrovmImageState
	// Elapsed is how long the waiter had watched it; Builds how many builds
	// were all PENDING.
	Elapsed time.Duration
	Builds  int
}

func (e *WedgedBuildError) Error() string {
	return fmt.Sprintf("image %s has been %s for %s with all %d builds of version %s still PENDING: its builds were never scheduled, which is what a replayed clientToken does. It cannot be deleted until the service times it out (measured: hours); build under a new name (docs/PLATFORM.md: %s)",
		e.Image, e.State, e.Elapsed.Round(time.Second), e.Builds, e.Version, taxonomy.FindingClientTokenPermanent.Title())
}

// ImageBuildRetryable is a MicrovmImageAvailableWaiterOptions.Retryable for
// the build of version (the imageVersion a create or update returned):
//
//   - ready (CREATED, UPDATED) ends the wait only once the image's latest
//     active version is version, so an update's wait is not ended by the
//     version before it;
//   - failed (CREATE_FAILED, UPDATE_FAILED) fails with a *BuildFailedError
//     carrying every build of the failed version and its reason;
//   - still CREATING or UPDATING past grace (DefaultWedgeGrace when zero)
//     with every build PENDING fails with a *WedgedBuildError;
//   - anything else is decided by the model's acceptors.
//
// client lists the builds. The grace is measured from the first poll.
func ImageBuildRetryable(client ListMicrovmImageBuildsAPIClient, version string, grace time.Duration) func(context.Context, *GetMicrovmImageInput, *GetMicrovmImageOutput, error) (bool, error) {
	if grace <= 0 {
		grace = DefaultWedgeGrace
	}
	var start time.Time
	return func(ctx context.Context, in *GetMicrovmImageInput, out *GetMicrovmImageOutput, err error) (bool, error) {
		if start.IsZero() {
			start = time.Now()
		}
		if err != nil || out == nil {
			return microvmImageAvailableStateRetryable(ctx, in, out, err)
		}
		image, state := aws.ToString(in.ImageIdentifier), out.State
		switch {
		case slices.Contains(taxonomy.ImageReadyStates, string(state)):
			if out.LatestActiveImageVersion != nil && *out.LatestActiveImageVersion != version {
				return true, nil
			}
			return false, nil
		case slices.Contains(taxonomy.ImageFailedStates, string(state)):
			failed := version
			if out.LatestFailedImageVersion != nil {
				failed = *out.LatestFailedImageVersion
			}
			builds, err := versionBuilds(ctx, client, image, failed)
			if err != nil {
				return false, err
			}
			return false, &BuildFailedError{Image: image, Name: aws.ToString(out.Name), Version: failed, State: state, Builds: builds}
		}
		if retry, err := microvmImageAvailableStateRetryable(ctx, in, out, nil); !retry {
			return retry, err
		}
		if elapsed := time.Since(start); elapsed >= grace {
			builds, err := versionBuilds(ctx, client, image, version)
			if err != nil {
				return false, err
			}
			if len(builds) > 0 && !slices.ContainsFunc(builds, func(b types.MicrovmImageBuildSummary) bool { return b.BuildState != types.BuildStatePending }) {
				return false, &WedgedBuildError{Image: image, Version: version, State: state, Elapsed: elapsed, Builds: len(builds)}
			}
		}
		return true, nil
	}
}
