package build

import (
	"context"

	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
)

// WaitBuilt waits for version of image to build, as Build does after its
// create: for a caller that makes the create call itself (a checkpoint
// baked into an image).
func WaitBuilt(ctx context.Context, api *lambdamicrovms.Client, image, version string, o cplane.WaitOptions) error {
	return waitBuilt(ctx, api, image, version, o)
}
