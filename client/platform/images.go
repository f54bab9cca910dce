package platform

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
)

// DeleteImage deletes an image by its name or colon-form ARN.
func (p *Platform) DeleteImage(ctx context.Context, identifier string) error {
	if _, err := cplane.ParseImageRef(identifier); err != nil {
		return err
	}
	_, err := p.cp.DeleteMicrovmImage(ctx, &lambdamicrovms.DeleteMicrovmImageInput{ImageIdentifier: aws.String(identifier)})
	return cplane.SDKError("DeleteMicrovmImage", err)
}

// FindImage is the ARN of the image named exactly name, "" when there is
// none, looked up through every page of the account's listing.
func (p *Platform) FindImage(ctx context.Context, name string) (string, error) {
	found, err := lambdamicrovms.FindMicrovmImage(ctx, p.cp, name)
	if err != nil {
		return "", cplane.SDKError("ListMicrovmImages", err)
	}
	if found == nil {
		return "", nil
	}
	return aws.ToString(found.ImageArn), nil
}

// ManagedImages lists every managed base image's ARN.
func (p *Platform) ManagedImages(ctx context.Context) ([]string, error) {
	var out []string
	pg := lambdamicrovms.NewListManagedMicrovmImagesPaginator(p.cp, &lambdamicrovms.ListManagedMicrovmImagesInput{})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, cplane.SDKError("ListManagedMicrovmImages", err)
		}
		for _, it := range page.Items {
			out = append(out, aws.ToString(it.ImageArn))
		}
	}
	return out, nil
}

// ManagedImageVersions lists a managed base's versions, spelled as bare
// integers ("1"), unlike a custom image's ("1.0").
func (p *Platform) ManagedImageVersions(ctx context.Context, baseARN string) ([]string, error) {
	var out []string
	pg := lambdamicrovms.NewListManagedMicrovmImageVersionsPaginator(p.cp, &lambdamicrovms.ListManagedMicrovmImageVersionsInput{ImageIdentifier: aws.String(baseARN)})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, cplane.SDKError("ListManagedMicrovmImageVersions", err)
		}
		for _, v := range page.Items {
			out = append(out, aws.ToString(v.ImageVersion))
		}
	}
	return out, nil
}
