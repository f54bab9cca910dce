package sandbox

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Image is the image ARN and version the platform reports the MicroVM was
// launched from (GetMicrovm's imageArn and imageVersion), so a caller that
// saves the VM's files (client/checkpoint) can name exactly what they were
// taken on, even when the launch named no version.
func (s *Sandbox) Image(ctx context.Context) (arn, version string, err error) {
	g, err := s.getMicrovm(ctx)
	if err != nil {
		return "", "", err
	}
	return aws.ToString(g.ImageArn), aws.ToString(g.ImageVersion), nil
}
