package lambdamicrovms

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/smithy-go/middleware"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. In a region that does not carry MicroVMs (the endpoint
// resolves, because the signing name is Lambda's) the service answers an
// AccessDeniedException with a null message; a real IAM denial names the
// principal and the action (finding unsupported-region). Such an error is
// wrapped so its text says so; errors.As still reaches the
// *types.AccessDeniedException inside.

// UnsupportedRegionError is an AccessDeniedException with no message: the
// measured answer of a region without MicroVMs.
type UnsupportedRegionError struct {
	Region string
	// Err is the operation's error, the *types.AccessDeniedException inside.
	Err error
}

func (e *UnsupportedRegionError) Error() string {
	return fmt.Sprintf("AccessDeniedException with no message: region %s likely does not carry MicroVMs (or the request could not be parsed); this is not an IAM denial, which names the principal and the action (docs/PLATFORM.md: %s)",
		e.Region, taxonomy.FindingUnsupportedRegion.Title())
}

// Unwrap returns the operation's error.
func (e *UnsupportedRegionError) Unwrap() error { return e.Err }

type unsupportedRegionMiddleware struct{ region string }

func (*unsupportedRegionMiddleware) ID() string { return "UnsupportedRegionHint" }

func (m *unsupportedRegionMiddleware) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	out middleware.DeserializeOutput, metadata middleware.Metadata, err error,
) {
	out, metadata, err = next.HandleDeserialize(ctx, in)
	var ade *types.AccessDeniedException
	if err != nil && errors.As(err, &ade) && (ade.Message == nil || *ade.Message == "") {
		err = &UnsupportedRegionError{Region: m.region, Err: err}
	}
	return out, metadata, err
}
