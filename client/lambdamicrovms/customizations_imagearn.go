package lambdamicrovms

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. An image ARN takes a colon before the name
// (...:microvm-image:<name>); the slash form is answered with an
// AccessDeniedException about a resource that exists and is permitted, which
// sends a reader to widen an IAM policy that was never too narrow (finding
// image-arn-colon). Every member naming an image is checked.

func init() { trapChecks = append(trapChecks, checkImageARNs) }

var imageARNMembers = []string{"ImageIdentifier", "BaseImageArn", "Resource"}

func checkImageARNs(opID string, input reflect.Value) error {
	for _, name := range imageARNMembers {
		s, ok := stringField(input, name)
		if !ok || !strings.Contains(s, ":microvm-image/") {
			continue
		}
		return &RefusalError{
			Finding: taxonomy.FindingImageARNColon,
			Field:   opID + "Input." + name,
			Reason: fmt.Sprintf("image ARN %q puts a slash before the name, which the service answers with a misleading AccessDeniedException; send %q",
				s, strings.Replace(s, ":microvm-image/", ":microvm-image:", 1)),
		}
	}
	return nil
}
