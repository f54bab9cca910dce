package cplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/gen/taxonomy"
)

// SDKError classifies an error of a client/lambdamicrovms call or waiter,
// op naming the call, into the client.Error taxonomy:
// local refusals are InvalidArg naming their finding; a
// MicroVM that died while the running waiter waited is LaunchDied; throttling,
// 5xx and unanswered requests are Retryable; 403s are Credentials (a
// null-message one naming unsupported-region); a ResourceNotFoundException
// is Precondition (the identifier names nothing); waits that ran out are Timeout
// or Interrupted; a wedged image build is BuildWedged and a failed one
// Platform, each naming its finding.
func SDKError(op string, err error) error {
	if err == nil {
		return nil
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return err
	}
	var (
		refusal *lambdamicrovms.RefusalError
		invalid smithy.InvalidParamsError
		failed  *lambdamicrovms.WaiterFailureError
		timeout *lambdamicrovms.WaiterTimeoutError
		region  *lambdamicrovms.UnsupportedRegionError
		signing *v4.SigningError
		sendErr *smithyhttp.RequestSendError
		apiErr  smithy.APIError
		wedged  *lambdamicrovms.WedgedBuildError
		broken  *lambdamicrovms.BuildFailedError
	)
	switch {
	case errors.As(err, &wedged):
		return client.Errorf(taxonomy.KindBuildWedged, taxonomy.FindingClientTokenPermanent, "%v", wedged).WithCause(err)
	case errors.As(err, &broken):
		return client.Errorf(taxonomy.KindPlatform, taxonomy.FindingBuildFailureOnBuild, "%v", broken).WithCause(err)
	case errors.As(err, &refusal):
		return client.Errorf(taxonomy.KindInvalidArg, refusal.Finding, "%s: %v", op, refusal).WithCause(err)
	case errors.As(err, &invalid):
		return client.Errorf(taxonomy.KindInvalidArg, "", "%s: %v", op, invalid).WithCause(err)
	case errors.As(err, &failed):
		reason := "no stateReason given"
		if failed.Reason != nil {
			reason = *failed.Reason
		}
		kind, finding := taxonomy.KindPlatform, taxonomy.FindingID("")
		if failed.Waiter == "MicrovmRunning" && failed.Err == nil {
			kind, finding = taxonomy.KindLaunchDied, taxonomy.MicrovmStateFinding
		}
		return client.Errorf(kind, finding, "%s: reached %s while waiting (%s waiter): %s", op, failed.State, failed.Waiter, reason).WithCause(err)
	case errors.As(err, &timeout), errors.Is(err, context.DeadlineExceeded):
		return client.Errorf(taxonomy.KindTimeout, "", "%s: deadline passed: %w", op, err)
	case errors.Is(err, context.Canceled):
		return client.Errorf(taxonomy.KindInterrupted, "", "%s: cancelled: %w", op, err)
	case errors.As(err, &region):
		return client.Errorf(taxonomy.KindCredentials, taxonomy.FindingUnsupportedRegion, "%s failed: %v", op, region).WithCause(err)
	case errors.As(err, &signing):
		return client.Errorf(taxonomy.KindCredentials, "", "%s: no usable AWS credentials: %v", op, err).WithCause(err)
	case errors.As(err, &apiErr):
		status := 0
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			status = re.HTTPStatusCode()
		}
		kind, finding, why := taxonomy.KindPlatform, taxonomy.FindingID(""), ""
		msg := apiErr.ErrorMessage()
		switch {
		case status == http.StatusTooManyRequests || status >= 500:
			kind, why = taxonomy.KindRetryable, "the identical request may succeed later"
		case status == http.StatusForbidden || isCredentialType(apiErr.ErrorCode()):
			kind, why = taxonomy.KindCredentials, "the identity was refused"
		case status == http.StatusBadRequest && msg == "":
			finding, why = taxonomy.FindingPaginationCursorEncoding, "a 400 with no message is the service's answer to a request it could not parse"
		case status == http.StatusBadRequest && strings.Contains(msg, "already exists"):
			finding, why = taxonomy.FindingDuplicateImageName, "an image name is taken; a new version of an existing image comes from UpdateMicrovmImage"
		case status == http.StatusNotFound && strings.Contains(msg, "No active version"):
			// A retire, not a deletion: the code alone reads as one
			// (finding inactive-retires).
			kind, finding = taxonomy.KindPrecondition, taxonomy.FindingInactiveRetires
			why = "the version exists but is INACTIVE (its state still reads SUCCESSFUL), or the image has no active version; UpdateMicrovmImageVersion sets it ACTIVE again"
		case apiErr.ErrorCode() == "ResourceNotFoundException":
			// Not transient and not the platform's failure: the identifier
			// names nothing in this account and region, and asking again
			// cannot change that.
			kind, why = taxonomy.KindPrecondition, "nothing by that identifier in this account and region; check the identifier and the region"
		}
		text := fmt.Sprintf("%s failed: HTTP %d %s", op, status, apiErr.ErrorCode())
		if msg != "" {
			text += fmt.Sprintf(", %q", msg)
		}
		if why != "" {
			text += ": " + why
		}
		return client.Errorf(kind, finding, "%s", text).WithCause(err)
	case errors.As(err, &sendErr):
		return client.Errorf(taxonomy.KindRetryable, "", "%s: no answer from the control plane: %w", op, err)
	}
	return client.Errorf(taxonomy.KindUnexpected, "", "%s: %w", op, err)
}

func isCredentialType(t string) bool {
	switch t {
	case "UnrecognizedClientException", "InvalidSignatureException", "IncompleteSignatureException",
		"ExpiredTokenException", "InvalidClientTokenId", "MissingAuthenticationTokenException":
		return true
	}
	return false
}

// IsNotFound reports whether err is (or wraps) the control plane's
// ResourceNotFoundException: the identifier names nothing in this account
// and region.
func IsNotFound(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "ResourceNotFoundException"
}
