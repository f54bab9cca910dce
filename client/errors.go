package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Error is the one error type of the client library. Its kind decides the CLI
// exit code; when it came from the session plane it also carries the wire kind
// the daemon's status was classified into, and the kind is derived from that
// wire kind rather than chosen beside it, so the two cannot disagree.
//
// A refusal raised by a trap closure names the docs/PLATFORM.md finding that
// measured the behaviour; Error() appends the finding's title so a reader can
// find the measurement without knowing the id.
type Error struct {
	kind    taxonomy.ErrorKind
	wire    taxonomy.WireKind // 0 when the failure never reached agentd
	finding taxonomy.FindingID
	slug    string // agentd's machine-readable error slug, when it sent one
	msg     string
	cause   error
}

// Errorf builds an error of kind that names finding (may be "" when no
// measurement is behind it). The format follows fmt.Errorf, including %w.
func Errorf(kind taxonomy.ErrorKind, finding taxonomy.FindingID, format string, args ...any) *Error {
	e := fmt.Errorf(format, args...)
	return &Error{kind: kind, finding: finding, msg: e.Error(), cause: errors.Unwrap(e)}
}

// WireError builds a session-plane failure classified as wire. Its kind is
// wire.ErrorKind(); there is deliberately no way to pass a different one.
func WireError(wire taxonomy.WireKind, msg string) *Error {
	return &Error{kind: wire.ErrorKind(), wire: wire, msg: msg}
}

// WireErrorf is WireError with a fmt.Errorf format, including %w.
func WireErrorf(wire taxonomy.WireKind, format string, args ...any) *Error {
	e := fmt.Errorf(format, args...)
	return &Error{kind: wire.ErrorKind(), wire: wire, msg: e.Error(), cause: errors.Unwrap(e)}
}

// WithFinding returns a copy of e that names finding.
func (e *Error) WithFinding(finding taxonomy.FindingID) *Error {
	c := *e
	c.finding = finding
	return &c
}

// WithCause returns a copy of e whose Unwrap is cause, so errors.Is and
// errors.As see through it (e.g. to fs.ErrNotExist or context.Canceled).
func (e *Error) WithCause(cause error) *Error {
	c := *e
	c.cause = cause
	return &c
}

func (e *Error) withSlug(slug string) *Error {
	c := *e
	c.slug = slug
	return &c
}

// Kind is the error kind; it alone decides the CLI exit code.
func (e *Error) Kind() taxonomy.ErrorKind { return e.kind }

// WireKind is the wire kind the failure was classified into, and false for a
// failure that never reached agentd (a local refusal, a control-plane error).
func (e *Error) WireKind() (taxonomy.WireKind, bool) { return e.wire, e.wire != 0 }

// Finding is the docs/PLATFORM.md finding the error names, or "".
func (e *Error) Finding() taxonomy.FindingID { return e.finding }

// Slug is agentd's machine-readable error slug (e.g. "still_running"), or ""
// when the daemon sent none.
func (e *Error) Slug() string { return e.slug }

// Code is the kind's stable ERR_* string.
func (e *Error) Code() string { return e.kind.Code() }

// Retryable reports whether the identical call may succeed later. It is a
// property of the kind, so it cannot drift from it.
func (e *Error) Retryable() bool { return e.kind.Retryable() }

// Message is the message without the finding's title.
func (e *Error) Message() string { return e.msg }

// Error is the message followed by the title of the finding it names.
func (e *Error) Error() string {
	if e.finding == "" {
		return e.msg
	}
	var b strings.Builder
	b.WriteString(e.msg)
	b.WriteString(" (docs/PLATFORM.md: \"")
	if t := e.finding.Title(); t != "" {
		b.WriteString(t)
	} else {
		b.WriteString(string(e.finding))
	}
	b.WriteString("\")")
	return b.String()
}

// Unwrap is the underlying cause, or nil.
func (e *Error) Unwrap() error { return e.cause }

// Is makes errors.Is(err, target) match a target *Error by its fields: the
// kind always, and the wire kind and finding when the target sets them. Use
// KindError or WireKindError to build such a target.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.kind != e.kind {
		return false
	}
	if t.wire != 0 && t.wire != e.wire {
		return false
	}
	return t.finding == "" || t.finding == e.finding
}

// KindError is a target for errors.Is that matches any *Error of kind.
func KindError(kind taxonomy.ErrorKind) error { return &Error{kind: kind} }

// WireKindError is a target for errors.Is that matches any *Error of wire.
func WireKindError(wire taxonomy.WireKind) error { return &Error{kind: wire.ErrorKind(), wire: wire} }

// KindOf classifies any error: the kind of the first *Error in its chain;
// Timeout for a context deadline and Interrupted for a cancellation that no
// *Error classified; Unexpected for everything else and for nil.
func KindOf(err error) taxonomy.ErrorKind {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.kind
	case errors.Is(err, context.DeadlineExceeded):
		return taxonomy.KindTimeout
	case errors.Is(err, context.Canceled):
		return taxonomy.KindInterrupted
	}
	return taxonomy.KindUnexpected
}

// RetryPolicy bounds Retry: how many attempts in all, and the exponential
// backoff between them (each delay is drawn from [d/2, d]).
type RetryPolicy struct {
	MaxAttempts int           // attempts in all, the first included; < 1 means 1
	BaseDelay   time.Duration // delay after the first failure
	MaxDelay    time.Duration // ceiling on any one delay
}

// DefaultRetryPolicy is what a Session uses unless told otherwise.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 4, BaseDelay: 200 * time.Millisecond, MaxDelay: 5 * time.Second}

func (p RetryPolicy) delay(attempt int) time.Duration {
	d := p.BaseDelay
	for i := 0; i < attempt && d < p.MaxDelay; i++ {
		d *= 2
	}
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Retry calls op until it succeeds, fails with a kind that is not Retryable,
// runs out of attempts, or ctx ends. Only the Retryable kind is retried: a
// Protocol, Credentials or Timeout failure returns at once, because the
// identical call cannot succeed. The last error is returned unchanged.
func Retry(ctx context.Context, p RetryPolicy, op func(context.Context) error) error {
	_, err := RetryValue(ctx, p, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, op(ctx)
	})
	return err
}

// RetryValue is Retry for an operation that returns a value.
func RetryValue[T any](ctx context.Context, p RetryPolicy, op func(context.Context) (T, error)) (T, error) {
	attempts := max(p.MaxAttempts, 1)
	for attempt := 0; ; attempt++ {
		v, err := op(ctx)
		if err == nil || attempt+1 >= attempts || KindOf(err) != taxonomy.KindRetryable {
			return v, err
		}
		t := time.NewTimer(p.delay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
	}
}
