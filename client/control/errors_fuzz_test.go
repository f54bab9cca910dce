package control

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// FuzzParseServiceError feeds arbitrary status lines, headers and bodies —
// bytes a gateway or the service put on the network — through
// parseServiceError and classify, the path every failed control-plane call
// takes.
//
// Invariants, each with the wrong edit it catches:
//   - no panic (an index into an empty X-Amzn-ErrorType, a nil Message
//     dereferenced on a null "message");
//   - the result is always a *client.Error whose kind is one of the taxonomy's
//     and whose cause is the *ServiceError (a new branch returning a bare
//     error, or dropping WithCause, breaks errors.As for callers);
//   - a 5xx or a 429 is Retryable and never InvalidArg (a branch keyed on the
//     exception name that runs before the status check);
//   - a 403 is Credentials, and a 403 with no usable message names the
//     unsupported-region finding (the null-message AccessDeniedException);
//   - the exception name carries no namespace or ':' suffix and no
//     surrounding space, and a message is never present but blank;
//   - Retry-After is never negative (an overflowing seconds value turned
//     into an immediate retry of a throttled call).
func FuzzParseServiceError(f *testing.F) {
	type seed struct {
		status                       int
		errType, ctype, retry, reqID string
		body                         string
	}
	for _, s := range []seed{
		{400, "", "application/json", "", "r-1", `{"__type":"ValidationException","message":"name too long"}`},
		{400, "", "application/x-amz-json-1.1", "", "", `{"__type":"com.amazonaws.lambda#ValidationException","Message":"bad"}`},
		{400, "ValidationException:http://internal.amazon.com/coral/com.amazonaws.lambda/", "application/json", "", "", `{"message":"x"}`},
		{404, "ResourceNotFoundException:", "application/json", "", "", `{"message":"No active version of image"}`},
		{403, "AccessDeniedException", "application/json", "", "", `{"message":null}`},
		{403, "", "application/json", "", "", `{"__type":"AccessDeniedException","message":"   "}`},
		{403, "", "application/json", "", "", `{"Message":"User: arn:aws:iam::1:user/x is not authorized to perform: lambda:ListMicrovms"}`},
		{400, "", "application/json", "", "", `{"__type":"ValidationException","message":null}`},
		{400, "", "application/json", "", "", `{"code":"ConflictException","message":"image already exists"}`},
		{401, "UnrecognizedClientException", "", "", "", `{}`},
		{429, "ThrottlingException", "application/json", "3", "", `{"message":"Rate exceeded"}`},
		{429, "", "", "Wed, 21 Oct 2015 07:28:00 GMT", "", ``},
		{429, "", "", "99999999999999999", "", ``},
		{502, "", "text/html", "", "", "<html><body><h1>502 Bad Gateway</h1></body></html>"},
		{503, "", "", "", "", "  <!DOCTYPE html>"},
		{500, "InternalServerException", "application/json", "", "", `{"__type":"ServiceException:","message":""}`},
		{500, "", "", "", "", ""},
		{400, "", "", "", "", ""},
		{409, ":", "", "", "", `{"__type":"#"}`},
		{400, "", "application/json", "", "", `{"__type":12,"message":["x"]}`},
		{400, "", "", "", "", "null"},
		{599, "a#b#c:d:e", "", "-1", "", `{"message":"\u0000"}`},
	} {
		f.Add(s.status, s.errType, s.ctype, s.retry, s.reqID, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, status int, errType, ctype, retry, reqID string, body []byte) {
		status = 100 + abs(status)%900 // any status a response line can carry
		if status >= 200 && status < 300 {
			status += 200 // the parser only ever sees failures
		}
		h := http.Header{}
		for k, v := range map[string]string{"X-Amzn-ErrorType": errType, "Content-Type": ctype, "Retry-After": retry, "X-Amzn-Requestid": reqID} {
			if v != "" {
				h.Set(k, v)
			}
		}
		resp := &http.Response{StatusCode: status, Header: h}
		se := parseServiceError(resp, body)
		if se == nil {
			t.Fatal("nil ServiceError")
		}
		if se.Status != status {
			t.Fatalf("status %d became %d", status, se.Status)
		}
		if strings.ContainsAny(se.Type, ":#") || se.Type != strings.TrimSpace(se.Type) {
			t.Fatalf("exception name %q keeps a namespace, suffix or space", se.Type)
		}
		if se.Message != nil && strings.TrimSpace(*se.Message) == "" {
			t.Fatalf("a blank message %q must read as none", *se.Message)
		}
		if se.RetryAfter != nil && *se.RetryAfter < 0 {
			t.Fatalf("Retry-After %q parsed as %s", retry, *se.RetryAfter)
		}
		if msg := se.Error(); !strings.Contains(msg, "HTTP ") {
			t.Fatalf("ServiceError text %q", msg)
		}

		for _, attempts := range []int{1, 3} {
			err := classify("FuzzOp", se, attempts)
			var ce *client.Error
			if !errors.As(err, &ce) || err != error(ce) {
				t.Fatalf("classify returned %T %v, not a *client.Error", err, err)
			}
			if !slices.Contains(taxonomy.ErrorKinds, ce.Kind()) {
				t.Fatalf("kind %v is not in the taxonomy", ce.Kind())
			}
			var back *ServiceError
			if !errors.As(err, &back) || back != se {
				t.Fatalf("the *ServiceError is not the cause of %v", err)
			}
			if ce.Finding() != "" && ce.Finding().Title() == "" {
				t.Fatalf("finding %q is not a known finding", ce.Finding())
			}
			switch {
			case status >= 500 || status == http.StatusTooManyRequests:
				if ce.Kind() != taxonomy.KindRetryable {
					t.Fatalf("HTTP %d classified %v: %v", status, ce.Kind(), err)
				}
			case status == http.StatusForbidden:
				if ce.Kind() != taxonomy.KindCredentials {
					t.Fatalf("HTTP 403 classified %v", ce.Kind())
				}
				if se.Message == nil && ce.Finding() != taxonomy.FindingUnsupportedRegion {
					t.Fatalf("a 403 with no message must name the region finding, got %q", ce.Finding())
				}
			}
			if status >= 500 && ce.Kind() == taxonomy.KindInvalidArg {
				t.Fatalf("a 5xx blamed the caller: %v", err)
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == -n { // math.MinInt
			return 0
		}
		return -n
	}
	return n
}
