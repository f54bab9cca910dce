package lambdamicrovms

import (
	"context"
	"fmt"
	"reflect"

	"github.com/aws/smithy-go/middleware"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written: the local refusals of platform traps docs/PLATFORM.md
// measured, one file each (customizations_<trap>.go), run after the generated
// validation and before anything is sent.

// RefusalError is a request refused locally because the platform is measured
// to answer it badly. Finding names the docs/PLATFORM.md finding.
type RefusalError struct {
	Finding taxonomy.FindingID
	// Field is the input member refused.
	Field string
	// Reason says what is wrong and what to send instead.
	Reason string
}

func (e *RefusalError) Error() string {
	return fmt.Sprintf("%s: %s (docs/PLATFORM.md: %s)", e.Field, e.Reason, e.Finding.Title())
}

// trapCheck inspects one operation's input; a non-nil error refuses it.
type trapCheck func(opID string, input reflect.Value) error

// trapChecks are the customizations_*.go checks, registered by their files.
var trapChecks []trapCheck

type trapRefusals struct{ opID string }

func (*trapRefusals) ID() string { return "MeasuredTrapRefusals" }

func (m *trapRefusals) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	out middleware.InitializeOutput, metadata middleware.Metadata, err error,
) {
	v := reflect.ValueOf(in.Parameters)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		for _, check := range trapChecks {
			if err := check(m.opID, v.Elem()); err != nil {
				return out, metadata, err
			}
		}
	}
	return next.HandleInitialize(ctx, in)
}

// addCustomizations is called by every generated operation after its own
// middlewares.
func addCustomizations(stack *middleware.Stack, options Options, opID string) error {
	if err := stack.Initialize.Add(&trapRefusals{opID: opID}, middleware.After); err != nil {
		return err
	}
	return stack.Deserialize.Add(&unsupportedRegionMiddleware{region: options.Region}, middleware.Before)
}

// stringField reads the *string member name of input, if it has one set.
func stringField(input reflect.Value, name string) (string, bool) {
	f := input.FieldByName(name)
	if !f.IsValid() || f.Kind() != reflect.Pointer || f.IsNil() {
		return "", false
	}
	s, ok := f.Elem().Interface().(string)
	return s, ok
}
