package lambdamicrovms

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: the tagging trap not wired to one of the three tagging
// operations, a MicroVM named by ARN or by bare id let through (the service
// answers a pattern error that lists other resource types), and an image
// ARN refused (images do take tags).
func TestTaggingAMicroVMIsRefusedNamingTheFinding(t *testing.T) {
	vmARN := "arn:aws:lambda:us-east-1:123456789012:microvm:microvm-a991cd0b-3321-3e2c-a982-d5c4db52b17a"
	vmID := "microvm-a991cd0b-3321-3e2c-a982-d5c4db52b17a"
	image := "arn:aws:lambda:us-east-1:123456789012:microvm-image:demo"
	for _, resource := range []string{vmARN, vmID} {
		for _, in := range []any{
			&TagResourceInput{Resource: aws.String(resource), Tags: map[string]string{"k": "v"}},
			&UntagResourceInput{Resource: aws.String(resource), TagKeys: []string{"k"}},
			&ListTagsInput{Resource: aws.String(resource)},
		} {
			var r *RefusalError
			if err := checkTraps(in); !errors.As(err, &r) || r.Finding != taxonomy.FindingTaggingImagesOnly {
				t.Errorf("%T of %s: %v, want a refusal naming %s", in, resource, err, taxonomy.FindingTaggingImagesOnly)
			}
		}
	}
	if err := checkTraps(&TagResourceInput{Resource: aws.String(image), Tags: map[string]string{"k": "v"}}); err != nil {
		t.Errorf("tagging an image refused: %v", err)
	}
}
