package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/microvms/microvms/gen/taxonomy"
)

// ctxErr classifies a failure caused by a context ending, cause being that
// context's Err. A deadline is the client-side timeout: the Timeout kind,
// wire kind ExecTimeout. A cancellation is the caller stopping the call: the
// Interrupted kind, with no wire kind, since nothing the daemon said is
// behind it. Either way the cause stays in the chain, so errors.Is(err,
// context.Canceled) and errors.Is(err, context.DeadlineExceeded) hold.
//
// Every place that turns ctx.Err() into an *Error goes through here, so a
// cancellation cannot be reported as a timeout at one site and not another.
func ctxErr(cause error, format string, args ...any) *Error {
	if errors.Is(cause, context.DeadlineExceeded) {
		return WireErrorf(taxonomy.WireExecTimeout, format, args...).WithCause(cause)
	}
	return Errorf(taxonomy.KindInterrupted, "", "%s", fmt.Sprintf(format, args...)).WithCause(cause)
}

// sleepCtx waits d, or until ctx ends, whichever is first, and returns
// ctx.Err() when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
