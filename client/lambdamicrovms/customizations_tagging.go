package lambdamicrovms

import (
	"fmt"
	"strings"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. Only images take tags: a MicroVM's ARN and its bare id both
// fail the service's resource pattern, and RunMicrovm has no tags member, so
// a MicroVM can never carry a tag (finding tagging-images-only). The
// service's answer is a pattern-validation error that lists other resource
// types; the refusal here says what can be tagged instead.

func checkTaggable(opID, field string, resource *string) error {
	if resource == nil {
		return nil
	}
	s := *resource
	if !strings.Contains(s, ":microvm:") && !strings.HasPrefix(s, "microvm-") {
		return nil
	}
	return &RefusalError{
		Finding: taxonomy.FindingTaggingImagesOnly,
		Field:   opID + "Input." + field,
		Reason:  fmt.Sprintf("%q names a MicroVM, which the service cannot tag (RunMicrovm takes no tags either); tag its image (an ...:microvm-image:<name> ARN) instead", s),
	}
}
