package lambdamicrovms

import (
	"fmt"
	"strings"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. An image ARN takes a colon before the name
// (...:microvm-image:<name>); the slash form is answered with an
// AccessDeniedException about a resource that exists and is permitted, which
// sends a reader to widen an IAM policy that was never too narrow (finding
// image-arn-colon). Every input member naming an image is checked
// (api/traps.yaml wires them).

func checkImageARN(opID, field string, arn *string) error {
	if arn == nil || !strings.Contains(*arn, ":microvm-image/") {
		return nil
	}
	s := *arn
	return &RefusalError{
		Finding: taxonomy.FindingImageARNColon,
		Field:   opID + "Input." + field,
		Reason: fmt.Sprintf("image ARN %q puts a slash before the name, which the service answers with a misleading AccessDeniedException; send %q",
			s, strings.Replace(s, ":microvm-image/", ":microvm-image:", 1)),
	}
}
