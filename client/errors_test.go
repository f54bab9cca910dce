package client

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a WireError constructor that takes the error kind beside the wire
// kind (or hard-codes Protocol): every wire kind must carry exactly the kind
// the generated table gives it, e.g. Unauthorized → Credentials, never Protocol.
func TestWireErrorKindIsDerived(t *testing.T) {
	want := map[taxonomy.WireKind]taxonomy.ErrorKind{
		taxonomy.WireUnauthorized:    taxonomy.KindCredentials,
		taxonomy.WireProtocolError:   taxonomy.KindProtocol,
		taxonomy.WireNotFound:        taxonomy.KindProtocol,
		taxonomy.WireConflict:        taxonomy.KindProtocol,
		taxonomy.WireStdinClosed:     taxonomy.KindProtocol,
		taxonomy.WireTooLarge:        taxonomy.KindProtocol,
		taxonomy.WireRequestTimeout:  taxonomy.KindRetryable,
		taxonomy.WireNotBootstrapped: taxonomy.KindRetryable,
		taxonomy.WireServerError:     taxonomy.KindRetryable,
		taxonomy.WireTransport:       taxonomy.KindRetryable,
		taxonomy.WireAuthTokenMint:   taxonomy.KindRetryable,
		taxonomy.WireExecTimeout:     taxonomy.KindTimeout,
		taxonomy.WireOutputGap:       taxonomy.KindPlatform,
	}
	if len(want) != len(taxonomy.WireKinds) {
		t.Fatalf("table covers %d of %d wire kinds", len(want), len(taxonomy.WireKinds))
	}
	retryable := 0
	for _, w := range taxonomy.WireKinds {
		e := WireError(w, "x")
		if e.Kind() != want[w] {
			t.Errorf("%v: kind %v, want %v", w, e.Kind(), want[w])
		}
		if got, ok := e.WireKind(); !ok || got != w {
			t.Errorf("%v: WireKind() = %v, %v", w, got, ok)
		}
		if e.Retryable() {
			retryable++
		}
	}
	// Catches: StdinClosed (410) or Conflict becoming retryable.
	if retryable != 5 {
		t.Errorf("exactly five wire kinds are retryable, got %d", retryable)
	}
}

func TestErrorIsAs(t *testing.T) {
	err := error(WireError(taxonomy.WireNotFound, "no such file").WithCause(fs.ErrNotExist))
	wrapped := errors.Join(errors.New("reading /etc/x"), err)
	// Catches: Unwrap returning nil, which breaks the fs.ErrNotExist contract.
	if !errors.Is(wrapped, fs.ErrNotExist) {
		t.Error("errors.Is(fs.ErrNotExist) through the cause")
	}
	// Catches: Is matching on pointer identity only.
	if !errors.Is(wrapped, KindError(taxonomy.KindProtocol)) || !errors.Is(wrapped, WireKindError(taxonomy.WireNotFound)) {
		t.Error("errors.Is by kind and wire kind")
	}
	// Catches: Is ignoring the wire kind of the target.
	if errors.Is(wrapped, WireKindError(taxonomy.WireConflict)) {
		t.Error("a NotFound must not match a Conflict target")
	}
	var e *Error
	if !errors.As(wrapped, &e) || e.Kind() != taxonomy.KindProtocol {
		t.Error("errors.As")
	}
	// Catches: a 404 for an exec also claiming fs.ErrNotExist.
	if errors.Is(WireError(taxonomy.WireNotFound, "unknown exec"), fs.ErrNotExist) {
		t.Error("only file reads carry fs.ErrNotExist")
	}
	// Catches: Errorf dropping %w.
	inner := errors.New("dial refused")
	e2 := Errorf(taxonomy.KindPrecondition, "", "cannot reach: %w", inner)
	if !errors.Is(e2, inner) || e2.Error() != "cannot reach: dial refused" {
		t.Errorf("Errorf %%w: %v", e2)
	}
	// Catches: Error() dropping the finding title.
	e3 := Errorf(taxonomy.KindInvalidArg, taxonomy.FindingEndpointAuth, "too long")
	if !strings.Contains(e3.Error(), taxonomy.FindingEndpointAuth.Title()) {
		t.Errorf("title missing: %s", e3)
	}
}

func TestKindOf(t *testing.T) {
	cases := []struct {
		err     error
		want    taxonomy.ErrorKind
		catches string
	}{
		{nil, taxonomy.KindUnexpected, "nil classified as success-looking Retryable"},
		{errors.New("x"), taxonomy.KindUnexpected, "foreign errors treated as retryable"},
		{context.DeadlineExceeded, taxonomy.KindTimeout, "a deadline classified Unexpected"},
		{WireError(taxonomy.WireExecTimeout, "x").WithCause(context.Canceled), taxonomy.KindTimeout, "the context cause overriding the *Error's kind"},
	}
	for _, c := range cases {
		if got := KindOf(c.err); got != c.want {
			t.Errorf("KindOf(%v) = %v, want %v (catches: %s)", c.err, got, c.want, c.catches)
		}
	}
}

func TestRetryOnlyRetryable(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 4, BaseDelay: time.Microsecond, MaxDelay: time.Microsecond}
	cases := []struct {
		err      error
		attempts int
		catches  string
	}{
		{WireError(taxonomy.WireServerError, "500"), 4, "not retrying a retryable kind"},
		{WireError(taxonomy.WireNotBootstrapped, "503"), 4, "not retrying 503 before bootstrap"},
		{WireError(taxonomy.WireConflict, "409"), 1, "retrying a Protocol kind"},
		{WireError(taxonomy.WireStdinClosed, "410"), 1, "retrying StdinClosed, which can never succeed"},
		{WireError(taxonomy.WireUnauthorized, "401"), 1, "retrying bad credentials"},
		{WireError(taxonomy.WireExecTimeout, "t"), 1, "retrying a client-side timeout"},
		{errors.New("foreign"), 1, "retrying an unclassified error"},
	}
	for _, c := range cases {
		n := 0
		err := Retry(context.Background(), p, func(context.Context) error { n++; return c.err })
		if n != c.attempts || err != c.err {
			t.Errorf("%v: %d attempts, err %v; want %d (catches: %s)", c.err, n, err, c.attempts, c.catches)
		}
	}
	// Catches: a retry loop that ignores success.
	n := 0
	v, err := RetryValue(context.Background(), p, func(context.Context) (int, error) {
		n++
		if n < 3 {
			return 0, WireError(taxonomy.WireTransport, "reset")
		}
		return 42, nil
	})
	if v != 42 || err != nil || n != 3 {
		t.Errorf("RetryValue = %d, %v after %d", v, err, n)
	}
	// Catches: sleeping through a cancelled context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n = 0
	_ = Retry(ctx, RetryPolicy{MaxAttempts: 10, BaseDelay: time.Hour, MaxDelay: time.Hour}, func(context.Context) error {
		n++
		return WireError(taxonomy.WireTransport, "x")
	})
	if n != 1 {
		t.Errorf("cancelled context: %d attempts", n)
	}
}
