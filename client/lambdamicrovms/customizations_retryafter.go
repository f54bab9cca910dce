package lambdamicrovms

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
)

// Hand-written. The model binds Retry-After to retryAfterSeconds on
// ThrottlingException and InternalServerException; aws-sdk-go-v2's retryer
// reads only x-amz-retry-after. The service's own figure is honoured here: a
// retry waits at least that long, never more than MaxRetryAfter.

// MaxRetryAfter caps a retry delay taken from the service's Retry-After.
const MaxRetryAfter = 20 * time.Second

// customizeRetryer wraps the configured retryer; the wrapper keeps the
// RetryerV2 behaviour (the adaptive mode's client-side rate limiting).
func customizeRetryer(r aws.Retryer) aws.Retryer {
	if r == nil {
		return nil
	}
	if _, done := r.(retryAfterRetryer); done {
		return r
	}
	v2, ok := r.(aws.RetryerV2)
	if !ok {
		v2 = retryerV2Shim{r}
	}
	return retryAfterRetryer{v2}
}

type retryerV2Shim struct{ aws.Retryer }

func (s retryerV2Shim) GetAttemptToken(context.Context) (func(error) error, error) {
	return s.GetInitialToken(), nil
}

type retryAfterRetryer struct{ aws.RetryerV2 }

func (r retryAfterRetryer) RetryDelay(attempt int, err error) (time.Duration, error) {
	d, derr := r.RetryerV2.RetryDelay(attempt, err)
	if derr != nil {
		return d, derr
	}
	if s := retryAfterSeconds(err); s != nil && *s > 0 {
		return max(d, min(time.Duration(*s)*time.Second, MaxRetryAfter)), nil
	}
	return d, nil
}

func retryAfterSeconds(err error) *int32 {
	var te *types.ThrottlingException
	if errors.As(err, &te) {
		return te.RetryAfterSeconds
	}
	var ie *types.InternalServerException
	if errors.As(err, &ie) {
		return ie.RetryAfterSeconds
	}
	return nil
}
