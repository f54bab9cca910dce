package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ServiceError is one non-2xx answer from the control plane, as sent. It is
// the cause inside the *client.Error the package returns, so errors.As
// reaches it for the status and the exception name.
type ServiceError struct {
	Status     int
	Type       string  // exception name, e.g. "ValidationException"; "" when none was sent
	Message    *string // nil when the service sent none or sent null
	RequestID  string
	RetryAfter *time.Duration
	HTML       bool // the body was a gateway's HTML page, not a service envelope
}

func (e *ServiceError) Error() string {
	typ := e.Type
	if typ == "" {
		typ = "an unnamed error"
	}
	msg := "no message"
	if e.Message != nil {
		msg = fmt.Sprintf("%q", *e.Message)
	}
	if e.HTML {
		msg = "an HTML page from the gateway"
	}
	return fmt.Sprintf("HTTP %d %s, %s", e.Status, typ, msg)
}

// parseServiceError reads the exception name from X-Amzn-ErrorType, then
// __type, then code, and the message from message or Message. A body that is
// not JSON is kept as "no message", never a parse failure.
func parseServiceError(resp *http.Response, body []byte) *ServiceError {
	se := &ServiceError{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Amzn-Requestid"), RetryAfter: retryAfter(resp.Header)}
	se.Type = errorTypeName(resp.Header.Get("X-Amzn-ErrorType"))
	var env struct {
		Type     string  `json:"__type"`
		Code     string  `json:"code"`
		Message  *string `json:"message"`
		Message2 *string `json:"Message"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		se.HTML = strings.Contains(strings.ToLower(resp.Header.Get("Content-Type")), "html") || strings.HasPrefix(strings.TrimSpace(string(body)), "<")
		return se
	}
	if se.Type == "" {
		se.Type = errorTypeName(env.Type)
	}
	if se.Type == "" {
		se.Type = errorTypeName(env.Code)
	}
	se.Message = env.Message
	if se.Message == nil {
		se.Message = env.Message2
	}
	if se.Message != nil && strings.TrimSpace(*se.Message) == "" {
		se.Message = nil
	}
	return se
}

// errorTypeName strips a namespace ("aws.lambda#X") and a URL suffix ("X:http://...").
func errorTypeName(s string) string {
	s, _, _ = strings.Cut(s, ":")
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}

// classify turns a failed attempt into the *client.Error the caller sees.
func classify(op string, err error, attempts int) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		return err
	}
	tries := ""
	if attempts > 1 {
		tries = fmt.Sprintf(" after %d attempts", attempts)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return client.Errorf(taxonomy.KindTimeout, "", "%s: deadline passed%s: %w", op, tries, err)
	case errors.Is(err, context.Canceled):
		return client.Errorf(taxonomy.KindInterrupted, "", "%s: cancelled%s: %w", op, tries, err)
	}
	var ne *noAnswerError
	if errors.As(err, &ne) {
		return client.Errorf(taxonomy.KindRetryable, "", "%s: no answer from the control plane%s: %w", op, tries, err)
	}
	var se *ServiceError
	if !errors.As(err, &se) {
		return client.Errorf(taxonomy.KindUnexpected, "", "%s: %w", op, err)
	}
	kind, finding, why := taxonomy.KindPlatform, taxonomy.FindingID(""), ""
	switch {
	case se.Status == http.StatusTooManyRequests:
		kind, why = taxonomy.KindRetryable, "throttled; the identical request may succeed later"
	case se.Status >= 500 && se.HTML:
		kind, why = taxonomy.KindRetryable, "the gateway in front of the service answered, so this says nothing about the request; the identical request may succeed"
	case se.Status >= 500:
		kind, why = taxonomy.KindRetryable, "a service fault; the identical request may succeed"
	case se.Status == http.StatusForbidden && se.Message == nil:
		kind, finding = taxonomy.KindCredentials, taxonomy.FindingUnsupportedRegion
		why = "an AccessDeniedException with no message is how the service answers in a region that does not carry MicroVMs (or a request it could not parse), not an IAM denial: a real denial names the principal and the action. Check the region before the policy"
	case se.Status == http.StatusForbidden || isCredentialType(se.Type):
		kind, why = taxonomy.KindCredentials, "the identity was refused"
	case se.Status == http.StatusBadRequest && se.Message == nil:
		finding = taxonomy.FindingPaginationCursorEncoding
		why = "a 400 with no message is the service's answer to a request it could not parse, such as a cursor whose '=' padding went unencoded"
	case se.Status == http.StatusBadRequest && se.Message != nil && strings.Contains(*se.Message, "already exists"):
		finding = taxonomy.FindingDuplicateImageName
		why = "an image name is taken; a new version of an existing image comes from UpdateMicrovmImage"
	case se.Status == http.StatusNotFound && se.Message != nil && strings.Contains(*se.Message, "No active version"):
		why = "the version exists but is INACTIVE (or there is no active one); UpdateMicrovmImageVersion sets it ACTIVE again"
	}
	msg := fmt.Sprintf("%s failed%s: %s", op, tries, se)
	if why != "" {
		msg += ": " + why
	}
	return client.Errorf(kind, finding, "%s", msg).WithCause(se)
}

func isCredentialType(t string) bool {
	switch t {
	case "UnrecognizedClientException", "InvalidSignatureException", "IncompleteSignatureException",
		"ExpiredTokenException", "InvalidClientTokenId", "MissingAuthenticationTokenException":
		return true
	}
	return false
}
