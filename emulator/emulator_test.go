package emulator

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

const auth = "AWS4-HMAC-SHA256 Credential=AKID/20260815/us-east-1/lambda/aws4_request, SignedHeaders=host;x-amz-date, Signature=00"

func do(t *testing.T, base, method, path, body, authz string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), string(b)
}

// Catches: an emulator more lenient than the service, which would let a
// client bug through every test: unsigned requests, a discriminator-style
// union, an unencoded cursor, a MicroVM ARN offered for tagging.
func TestEmulatorRefusesWhatTheServiceRefuses(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	arn := s.AddImage("img")
	cases := []struct {
		name, method, path, body, auth string
		status                         int
		errType, bodyHas               string
	}{
		{"unsigned", "GET", "/2025-09-09/microvm-images", "", "", 403, "IncompleteSignatureException", ""},
		{"wrong service", "GET", "/2025-09-09/microvm-images", "", strings.Replace(auth, "/lambda/", "/lambda-microvms/", 1), 403, "InvalidSignatureException", ""},
		{"unsupported region", "GET", "/2025-09-09/microvm-images", "", strings.Replace(auth, "us-east-1", "eu-central-1", 1), 403, "AccessDeniedException", `{"message":null}`},
		{"raw = in cursor", "GET", "/2025-09-09/microvm-images?nextToken=b2Zmc2V0OjE=", "", auth, 400, "ValidationException", `{"message":null}`},
		{"discriminator union", "POST", "/2025-09-09/microvms/x/auth-token", `{"expirationInMinutes":5,"allowedPorts":[{"type":"port","port":9000}]}`, auth, 400, "ValidationException", "exactly one"},
		{"two-key union", "POST", "/2025-09-09/microvms/x/auth-token", `{"expirationInMinutes":5,"allowedPorts":[{"port":9000,"allPorts":{}}]}`, auth, 400, "ValidationException", "exactly one"},
		{"bare connector", "POST", "/2025-09-09/microvms", `{"imageIdentifier":"` + arn + `","ingressNetworkConnectors":["ALL_INGRESS"]}`, auth, 400, "ValidationException", "Malformed network connector ARN"},
		// Catches counting the ceiling in characters: 2049 two-byte runes are
		// 4098 UTF-8 bytes, which the service refuses.
		{"payload 4098 bytes in 2049 runes", "POST", "/2025-09-09/microvms", `{"imageIdentifier":"` + arn + `","runHookPayload":"` + strings.Repeat("é", 2049) + `"}`, auth, 400, "ValidationException", "less than or equal to 4096"},
		{"payload 4097", "POST", "/2025-09-09/microvms", `{"imageIdentifier":"` + arn + `","runHookPayload":"` + strings.Repeat("x", 4097) + `"}`, auth, 400, "ValidationException", "less than or equal to 4096"},
		{"microvm not taggable", "GET", "/2017-03-31/tags/arn%3Aaws%3Alambda%3Aus-east-1%3A123456789012%3Amicrovm%3Amicrovm-1", "", auth, 400, "InvalidParameterValueException", ""},
		{"slash ARN", "GET", "/2025-09-09/microvm-images/" + strings.ReplaceAll(strings.Replace(arn, ":microvm-image:", ":microvm-image/", 1), "/", "%2F"), "", auth, 403, "AccessDeniedException", "not authorized"},
		{"colon ARN", "GET", "/2025-09-09/microvm-images/" + arn, "", auth, 200, "", `"state":"CREATED"`},
	}
	for _, tc := range cases {
		status, typ, body := do(t, base, tc.method, tc.path, tc.body, tc.auth)
		if status != tc.status || typ != tc.errType || !strings.Contains(body, tc.bodyHas) {
			t.Errorf("%s: %d %q %s; want %d %q containing %q", tc.name, status, typ, body, tc.status, tc.errType, tc.bodyHas)
		}
	}
}
