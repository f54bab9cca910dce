package lambdamicrovms

import (
	"context"
	"fmt"

	"github.com/aws/smithy-go/middleware"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written: the local refusals of platform traps docs/PLATFORM.md
// measured, one typed check per file (customizations_<trap>.go), wired to
// the input members they inspect by api/traps.yaml (generated: traps.go),
// run after the generated validation and before anything is sent.

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

type trapRefusals struct{ opID string }

func (*trapRefusals) ID() string { return "MeasuredTrapRefusals" }

func (m *trapRefusals) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	out middleware.InitializeOutput, metadata middleware.Metadata, err error,
) {
	// checkTraps (traps.go) is generated from api/traps.yaml: each check
	// is called on its typed input member.
	if err := checkTraps(in.Parameters); err != nil {
		return out, metadata, err
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
