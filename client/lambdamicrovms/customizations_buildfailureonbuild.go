package lambdamicrovms

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. A failed image carries no reason, and neither does its
// version; each build's stateReason does (finding build-failure-on-build).
// The image build waiter (customizations_clienttokenpermanent.go) reads them
// into a BuildFailedError.

// BuildFailedError is an image version whose build failed, with every build
// of that version and its reason.
type BuildFailedError struct {
	// Image is the image identifier waited on; Name is the image's name, which
	// names its build log group.
	Image, Name string
	Version     string
	State       types.MicrovmImageState
	Builds      []types.MicrovmImageBuildSummary
}

func (e *BuildFailedError) Error() string {
	var reasons []string
	for _, b := range e.Builds {
		r := "no reason given"
		if b.StateReason != nil {
			r = *b.StateReason
		}
		reasons = append(reasons, fmt.Sprintf("build %s (Graviton %s) %s: %s", aws.ToString(b.BuildId), aws.ToString(b.ChipsetGeneration), b.BuildState, r))
	}
	if len(reasons) == 0 {
		reasons = []string{"no builds listed"}
	}
	return fmt.Sprintf("image %s version %s failed: %s (the reason is read from the builds; the image and version carry none, and the build log group %s%s holds the rest; docs/PLATFORM.md: %s)",
		e.Image, e.Version, strings.Join(reasons, "; "), taxonomy.BuildLogGroupPrefix, e.Name, taxonomy.FindingBuildFailureOnBuild.Title())
}

// versionBuilds lists every build of an image version.
func versionBuilds(ctx context.Context, client ListMicrovmImageBuildsAPIClient, image, version string, optFns ...func(*Options)) ([]types.MicrovmImageBuildSummary, error) {
	p := NewListMicrovmImageBuildsPaginator(client, &ListMicrovmImageBuildsInput{ImageIdentifier: &image, ImageVersion: &version})
	var out []types.MicrovmImageBuildSummary
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, optFns...)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
	}
	return out, nil
}
