package lambdamicrovms

import (
	"context"

	"github.com/microvms/microvms/client/lambdamicrovms/types"
)

// Hand-written lookups that own two measured listing traps.

// FindMicrovmImage returns the image named exactly name, or nil when there is
// none. nameFilter is a substring filter the service applies after paging
// (finding max-results-before-name-filter): a page may be empty while a later
// one matches, and "web" also matches "web-2". So every page is read, and the
// name compared here.
func FindMicrovmImage(ctx context.Context, client ListMicrovmImagesAPIClient, name string, optFns ...func(*Options)) (*types.MicrovmImageSummary, error) {
	p := NewListMicrovmImagesPaginator(client, &ListMicrovmImagesInput{NameFilter: &name})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, optFns...)
		if err != nil {
			return nil, err
		}
		for i := range page.Items {
			if it := page.Items[i]; it.Name != nil && *it.Name == name {
				return &it, nil
			}
		}
	}
	return nil, nil
}

// FailedBuilds lists the FAILED builds of an image version. Neither a failed
// image nor its version carries a reason; each build's stateReason does
// (finding build-failure-on-build). The build log group
// /aws/lambda-microvms/<image-name> holds the rest.
func FailedBuilds(ctx context.Context, client ListMicrovmImageBuildsAPIClient, imageIdentifier, imageVersion string, optFns ...func(*Options)) ([]types.MicrovmImageBuildSummary, error) {
	p := NewListMicrovmImageBuildsPaginator(client, &ListMicrovmImageBuildsInput{ImageIdentifier: &imageIdentifier, ImageVersion: &imageVersion})
	var out []types.MicrovmImageBuildSummary
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, optFns...)
		if err != nil {
			return nil, err
		}
		for _, b := range page.Items {
			if b.BuildState == types.BuildStateFailed {
				out = append(out, b)
			}
		}
	}
	return out, nil
}
