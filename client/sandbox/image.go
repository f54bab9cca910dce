package sandbox

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// ImageOf is the image ARN and version the platform reports s was launched
// from (GetMicrovm's imageArn and imageVersion), so a caller that saves the
// VM's files (client/checkpoint) names exactly what they were taken on,
// even when the launch named no version. A function rather than a method:
// it is the checkpoint's plumbing, not a capability of its own, and the
// engine's surface (checkpoint ops) comes with the checkpoint itself.
func ImageOf(ctx context.Context, s *Sandbox) (arn, version string, err error) {
	g, err := s.getMicrovm(ctx)
	if err != nil {
		return "", "", err
	}
	return aws.ToString(g.ImageArn), aws.ToString(g.ImageVersion), nil
}
