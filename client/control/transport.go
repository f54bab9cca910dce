package control

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// SigningName is the SigV4 service name from the model's aws.auth#sigv4
// trait. It is "lambda", not "lambda-microvms", which is also why the endpoint
// resolves for regions that do not carry the service.
const SigningName = "lambda"

// maxBody bounds what the transport reads of any reply; control-plane answers
// are small, and a gateway page is not worth more.
const maxBody = 4 << 20

// signingTransport is the generated client's HttpRequestDoer: it re-encodes
// path labels the way AWS SDKs do, signs each attempt, retries what may be
// retried, and turns every non-2xx answer into a *client.Error.
type signingTransport struct {
	http        *http.Client
	creds       aws.CredentialsProvider
	signer      *v4.Signer
	region      string
	now         func() time.Time
	retryer     *retry.Standard
	maxRetryAft time.Duration
}

func newSigningTransport(o *Options, creds aws.CredentialsProvider) *signingTransport {
	hc := o.HTTPClient
	if hc == nil {
		// Generous rather than tight: a control-plane call is not a hot path,
		// and a short timeout turns a slow answer into a retry storm.
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	maxBackoff := o.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 20 * time.Second
	}
	attempts := o.MaxAttempts
	if attempts <= 0 {
		attempts = 5
	}
	rt := retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = attempts
		so.MaxBackoff = maxBackoff
		so.Backoff = retry.NewExponentialJitterBackoff(maxBackoff)
		// Only what retryable() says; the SDK's defaults would also retry
		// some 4xx codes, and a 4xx is the answer.
		so.Retryables = []retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
			return aws.BoolTernary(retryable(err))
		})}
		so.RateLimiter = ratelimit.None
	})
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &signingTransport{http: hc, creds: creds, signer: v4.NewSigner(), region: o.Region.String(), now: now, retryer: rt, maxRetryAft: maxBackoff}
}

// retryable is the whole retry policy: throttling, any 5xx (including a
// gateway's HTML page), and a request that got no answer at all. Never a 4xx
// other than 429: the 4xx is the service's answer and repeating it cannot
// change it.
func retryable(err error) bool {
	var se *ServiceError
	if errors.As(err, &se) {
		return se.Status == http.StatusTooManyRequests || se.Status >= 500
	}
	var ne *noAnswerError
	return errors.As(err, &ne)
}

// noAnswerError is a request that produced no HTTP status.
type noAnswerError struct{ err error }

func (e *noAnswerError) Error() string { return e.err.Error() }
func (e *noAnswerError) Unwrap() error { return e.err }

// Do sends req, retrying as retryable allows. The body is read once and
// replayed for each attempt, so every attempt carries the same clientToken.
func (t *signingTransport) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	op := operationFrom(ctx)
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, client.Errorf(taxonomy.KindUnexpected, "", "%s: reading the request body: %w", op, err)
		}
		body = b
	}
	canonicalizePath(req.URL)
	for attempt := 1; ; attempt++ {
		resp, err := t.attempt(ctx, req, body)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil || !t.retryer.IsErrorRetryable(err) || attempt >= t.retryer.MaxAttempts() {
			return nil, classify(op, err, attempt)
		}
		delay, derr := t.retryer.RetryDelay(attempt, err)
		if derr != nil {
			return nil, classify(op, err, attempt)
		}
		var se *ServiceError
		if errors.As(err, &se) && se.RetryAfter != nil {
			// The service said when; believe it, within the same ceiling.
			delay = min(*se.RetryAfter, t.maxRetryAft)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, classify(op, err, attempt)
		case <-timer.C:
		}
	}
}

func (t *signingTransport) attempt(ctx context.Context, orig *http.Request, body []byte) (*http.Response, error) {
	req := orig.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	if len(body) > 0 && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := t.sign(ctx, req, body); err != nil {
		return nil, err
	}
	resp, err := t.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &noAnswerError{err: err}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return nil, parseServiceError(resp, raw)
}

// sign adds SigV4 headers for the lambda signing name and the client's region.
func (t *signingTransport) sign(ctx context.Context, req *http.Request, body []byte) error {
	creds, err := t.creds.Retrieve(ctx)
	if err != nil {
		return client.Errorf(taxonomy.KindCredentials, "",
			"no AWS credentials: the default chain (environment, shared config and profiles, SSO, a credential process, instance metadata) answered: %v", err).WithCause(err)
	}
	sum := sha256.Sum256(body)
	// Every request is signed, bodyless ones included: an empty body's hash
	// is part of the signature like any other.
	return t.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), SigningName, t.region, t.now().UTC())
}

// canonicalizePath re-encodes each path segment strictly (everything outside
// RFC 3986's unreserved set), as AWS SDKs encode URI labels. The generated
// client leaves ':' bare, and an image ARN is full of them.
func canonicalizePath(u *url.URL) {
	segs := strings.Split(u.EscapedPath(), "/")
	dec := make([]string, len(segs))
	for i, s := range segs {
		d, err := url.PathUnescape(s)
		if err != nil {
			return // leave a path we cannot read exactly as it was
		}
		dec[i] = d
		segs[i] = escapeLabel(d)
	}
	u.Path = strings.Join(dec, "/")
	u.RawPath = strings.Join(segs, "/")
}

func escapeLabel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// retryAfter parses a Retry-After header in seconds.
func retryAfter(h http.Header) *time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return nil
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 {
		// Clamped, not multiplied blindly: an overflowing product is negative,
		// which would turn "wait a long time" into "retry at once".
		d := time.Duration(math.MaxInt64)
		if n <= int64(math.MaxInt64/time.Second) {
			d = time.Duration(n) * time.Second
		}
		return &d
	}
	if at, err := http.ParseTime(v); err == nil {
		d := max(time.Until(at), 0)
		return &d
	}
	return nil
}

type opKey struct{}

// withOperation names the operation in ctx so errors can say which call failed.
func withOperation(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

func operationFrom(ctx context.Context) string {
	if op, ok := ctx.Value(opKey{}).(string); ok {
		return op
	}
	return "request"
}
