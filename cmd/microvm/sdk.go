package main

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/client/sandbox"
)

// The lifecycle commands' control-plane calls, on client/lambdamicrovms, with
// their errors in the client.Error taxonomy (cplane.SDKError) so each exits
// its generated row.

func (p *plane) api() *lambdamicrovms.Client { return p.cp }

// handle is the MicroVM id on this control plane, for the by-id lifecycle
// client/sandbox owns.
func (p *plane) handle(id string) *sandbox.Handle { return sandbox.Open(p.cp, id) }

// deleteImage deletes an image by its name or colon-form ARN.
func (p *plane) deleteImage(ctx context.Context, identifier string) error {
	if _, err := cplane.ParseImageRef(identifier); err != nil {
		return err
	}
	_, err := p.api().DeleteMicrovmImage(ctx, &lambdamicrovms.DeleteMicrovmImageInput{ImageIdentifier: aws.String(identifier)})
	return cplane.SDKError("DeleteMicrovmImage", err)
}

// findImage is the image named exactly name, nil when there is none.
func (p *plane) findImage(ctx context.Context, name string) (*types.MicrovmImageSummary, error) {
	found, err := lambdamicrovms.FindMicrovmImage(ctx, p.api(), name)
	return found, cplane.SDKError("ListMicrovmImages", err)
}

// managedImages lists every managed base image.
func (p *plane) managedImages(ctx context.Context) ([]types.ManagedMicrovmImageSummary, error) {
	var out []types.ManagedMicrovmImageSummary
	pg := lambdamicrovms.NewListManagedMicrovmImagesPaginator(p.api(), &lambdamicrovms.ListManagedMicrovmImagesInput{})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, cplane.SDKError("ListManagedMicrovmImages", err)
		}
		out = append(out, page.Items...)
	}
	return out, nil
}

// managedImageVersions lists a managed base's versions, spelled as bare
// integers ("1"), unlike a custom image's ("1.0").
func (p *plane) managedImageVersions(ctx context.Context, baseARN string) ([]types.ManagedMicrovmImageVersion, error) {
	var out []types.ManagedMicrovmImageVersion
	pg := lambdamicrovms.NewListManagedMicrovmImageVersionsPaginator(p.api(), &lambdamicrovms.ListManagedMicrovmImageVersionsInput{ImageIdentifier: aws.String(baseARN)})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, cplane.SDKError("ListManagedMicrovmImageVersions", err)
		}
		out = append(out, page.Items...)
	}
	return out, nil
}

// list is every MicroVM the control plane lists.
func (p *plane) list(ctx context.Context) ([]sandbox.Status, error) { return sandbox.List(ctx, p.cp) }
