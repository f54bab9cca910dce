package cplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	smithy "github.com/aws/smithy-go"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Carried over from client/control: the closures and classification that
// moved here with it.

func requireKind(t *testing.T, err error, kind taxonomy.ErrorKind, finding taxonomy.FindingID) *client.Error {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want a *client.Error of kind %s, got %v", kind, err)
	}
	if ce.Kind() != kind || ce.Finding() != finding {
		t.Fatalf("got kind %s finding %q, want %s %q: %v", ce.Kind(), ce.Finding(), kind, finding, err)
	}
	return ce
}

// Catches: ParseImageRef accepting the slash-form ARN the service answers
// with a misleading AccessDeniedException, or its refusal not showing the
// colon form to send instead.
func TestSlashFormImageARNIsRefused(t *testing.T) {
	slash := "arn:aws:lambda:us-east-1:123456789012:microvm-image/x"
	_, err := ParseImageRef(slash)
	ce := requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingImageARNColon)
	if !strings.Contains(ce.Message(), "microvm-image:x") {
		t.Fatalf("refusal should show the colon form: %v", err)
	}
	for _, ok := range []string{"web-1", "arn:aws:lambda:us-east-1:123456789012:microvm-image:web-1"} {
		if _, err := ParseImageRef(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// Catches: a ceiling of 4095 or 4097, counting runes instead of bytes, or
// checking the token alone before the env is folded in.
func TestRunHookPayloadCeilingIsInclusiveOnTheWholeString(t *testing.T) {
	bare, _ := NewRunHookPayload("tok", map[string]string{"PAD": ""})
	pad := taxonomy.MaxRunHookPayloadBytes - bare.Len()
	at, err := NewRunHookPayload("tok", map[string]string{"PAD": strings.Repeat("x", pad)})
	if err != nil || at.Len() != taxonomy.MaxRunHookPayloadBytes {
		t.Fatalf("exactly %d bytes must pass: len %d, %v", taxonomy.MaxRunHookPayloadBytes, at.Len(), err)
	}
	_, err = NewRunHookPayload("tok", map[string]string{"PAD": strings.Repeat("x", pad+1)})
	ce := requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingRunHookPayloadCeiling)
	for _, want := range []string{"4097 bytes", "4096-byte ceiling", "launch env accounts for"} {
		if !strings.Contains(ce.Message(), want) {
			t.Errorf("refusal %q lacks %q", ce.Message(), want)
		}
	}
	// Multi-byte runes: 2-byte 'é' pushes a rune count under 4096 over in bytes.
	_, err = NewRunHookPayload("tok", map[string]string{"PAD": strings.Repeat("é", pad/2+1)})
	requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingRunHookPayloadCeiling)
	var decoded struct {
		AgentToken string            `json:"agent_token"`
		Env        map[string]string `json:"env"`
	}
	if err := json.Unmarshal([]byte(at.s), &decoded); err != nil || decoded.AgentToken != "tok" {
		t.Fatalf("payload does not carry agentd's fields: %s", at.s)
	}
	if strings.Contains(at.String(), "tok") {
		t.Fatal("String must not print the token")
	}
}

// Catches: the ceiling refusal reporting the env's share or the excess
// wrongly (a sign flipped or the subtraction turned into an addition): the
// env is the part a caller can shrink, so both numbers are the advice.
func TestRunHookPayloadRefusalNamesTheEnvShareAndTheExcess(t *testing.T) {
	bare, err := NewRunHookPayload("tok", map[string]string{"PAD": ""})
	if err != nil {
		t.Fatal(err)
	}
	pad := taxonomy.MaxRunHookPayloadBytes - bare.Len() + 10 // ten bytes over
	_, err = NewRunHookPayload("tok", map[string]string{"PAD": strings.Repeat("x", pad)})
	ce := requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingRunHookPayloadCeiling)
	full := taxonomy.MaxRunHookPayloadBytes + 10
	noEnv := len(`{"agent_token":"tok"}`)
	for _, want := range []string{
		"is " + strconv.Itoa(full) + " bytes",
		"accounts for " + strconv.Itoa(full-noEnv) + " of them across 1 variables",
		"so trim 10 bytes",
	} {
		if !strings.Contains(ce.Message(), want) {
			t.Errorf("refusal lacks %q: %s", want, ce.Message())
		}
	}
}

// TestRunHookPayloadNeverPrintsTheToken: the payload carries the agent token,
// so every way Go prints a value must redact it. Catches a payload type with
// String but no GoString/LogValue, where %#v or a structured log line prints
// the token verbatim.
func TestRunHookPayloadNeverPrintsTheToken(t *testing.T) {
	const token = "tok-secret-0123456789"
	p, err := NewRunHookPayload(token, map[string]string{"K": "V"})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("launch", "payload", p)
	outs := map[string]string{"slog": logged.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		outs[verb] = fmt.Sprintf(verb, p)
	}
	for name, out := range outs {
		if strings.Contains(out, token) {
			t.Errorf("%s prints the token: %s", name, out)
		}
	}
}

// Catches: loosening the version rule.
func TestImageVersionRules(t *testing.T) {
	for _, bad := range []string{"", "1 0", "1.0\n", strings.Repeat("9", taxonomy.MaxImageVersionLen+1)} {
		requireKind(t, CheckImageVersion(bad), taxonomy.KindInvalidArg, taxonomy.FindingImageVersionForm)
	}
	for _, ok := range []string{"1", "1.0", strings.Repeat("9", taxonomy.MaxImageVersionLen)} {
		if err := CheckImageVersion(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// Catches: whitespace refused only after the first byte (`i > 0`).
func TestImageVersionWithLeadingWhitespaceIsRefused(t *testing.T) {
	for _, v := range []string{" 1", "\t1.0"} {
		requireKind(t, CheckImageVersion(v), taxonomy.KindInvalidArg, taxonomy.FindingImageVersionForm)
	}
}

// Catches: a client built with no region.
func TestZeroRegionIsRefused(t *testing.T) {
	_, err := New(context.Background(), Options{Endpoint: "http://127.0.0.1:1"})
	requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingUnsupportedRegion)
}

// Catches: the endpoint override order (option, then the service-specific
// variable, then the global one), ignoring the opt-out, and another
// service's variable routing the control plane: Lambda's
// AWS_ENDPOINT_URL_LAMBDA once did, and S3's or CloudWatch Logs' must not.
func TestEndpointOverrideOrder(t *testing.T) {
	env := map[string]string{"AWS_ENDPOINT_URL_LAMBDA": "http://lambda.local", "AWS_ENDPOINT_URL_S3": "http://s3.local", "AWS_ENDPOINT_URL": "http://global.local"}
	get := func(k string) string { return env[k] }
	if got := ConfiguredEndpoint("", get); got != "http://global.local" {
		t.Errorf("Lambda's variable is not the control plane's: %s", got)
	}
	env["AWS_ENDPOINT_URL_LAMBDA_MICROVMS"] = "http://microvms.local"
	if got := ConfiguredEndpoint("", get); got != "http://microvms.local" {
		t.Errorf("the service's own variable first: %s", got)
	}
	if got := ConfiguredEndpoint("http://opt", get); got != "http://opt" {
		t.Errorf("option: %s", got)
	}
	for svc, want := range map[Service]string{ServiceS3: "http://s3.local", ServiceLogs: "http://global.local", ServiceSTS: "http://global.local", ServiceMicrovms: "http://microvms.local"} {
		if got := ServiceEndpoint(svc, get); got != want {
			t.Errorf("%s: %s, want %s", svc, got, want)
		}
	}
	delete(env, "AWS_ENDPOINT_URL_LAMBDA_MICROVMS")
	if got := ConfiguredEndpoint("", get); got != "http://global.local" {
		t.Errorf("global variable: %s", got)
	}
	env["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"] = "true"
	if got := ConfiguredEndpoint("", get); got != "" {
		t.Errorf("opt-out ignored: %s", got)
	}
	if got := ServiceEndpoint(ServiceS3, get); got != "" {
		t.Errorf("opt-out ignored for S3: %s", got)
	}
}

// Catches: an https:// prefix on the emulator's loopback endpoint (nothing
// there speaks TLS), http:// on a platform endpoint (the request carries two
// credentials), a host that merely starts with 127.0.0.1 taken for loopback,
// and a caller's explicit scheme rewritten.
func TestEndpointURLSchemes(t *testing.T) {
	for in, want := range map[string]string{
		"30d00336-db07.lambda-microvm.us-east-1.on.aws": "https://30d00336-db07.lambda-microvm.us-east-1.on.aws",
		"127.0.0.1:41234":            "http://127.0.0.1:41234",
		"127.0.0.1":                  "http://127.0.0.1",
		"127.9.9.9:80":               "http://127.9.9.9:80",
		"[::1]:41234":                "http://[::1]:41234",
		"localhost:9000":             "http://localhost:9000",
		"127.0.0.1.attacker.example": "https://127.0.0.1.attacker.example",
		"10.0.0.1:9000":              "https://10.0.0.1:9000",
		"https://127.0.0.1:1":        "https://127.0.0.1:1",
		"http://vm.example":          "http://vm.example",
	} {
		if got := EndpointURL(in); got != want {
			t.Errorf("EndpointURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Catches: an SDK error landing in the wrong client.Error kind, which changes
// the CLI's exit code and what client/sandbox does next (a dead launch not
// LaunchDied, a throttle not Retryable, a local refusal losing its finding).
func TestSDKErrorKinds(t *testing.T) {
	reason := "Run hook returned 500"
	cases := []struct {
		name    string
		err     error
		kind    taxonomy.ErrorKind
		finding taxonomy.FindingID
	}{
		{"wedged build", &lambdamicrovms.WedgedBuildError{Image: "x", Version: "1.0", Builds: 2}, taxonomy.KindBuildWedged, taxonomy.FindingClientTokenPermanent},
		{"failed build", &lambdamicrovms.BuildFailedError{Image: "x", Version: "1.0"}, taxonomy.KindPlatform, taxonomy.FindingBuildFailureOnBuild},
		{"dead launch", &lambdamicrovms.WaiterFailureError{Waiter: "MicrovmRunning", State: "TERMINATED", Reason: &reason}, taxonomy.KindLaunchDied, taxonomy.MicrovmStateFinding},
		{"failed suspend", &lambdamicrovms.WaiterFailureError{Waiter: "MicrovmSuspended", State: "TERMINATED"}, taxonomy.KindPlatform, ""},
		{"waited out", &lambdamicrovms.WaiterTimeoutError{Waiter: "MicrovmRunning"}, taxonomy.KindTimeout, ""},
		{"cancelled", context.Canceled, taxonomy.KindInterrupted, ""},
		{"refusal", &lambdamicrovms.RefusalError{Finding: taxonomy.FindingImageARNColon}, taxonomy.KindInvalidArg, taxonomy.FindingImageARNColon},
		{"invalid", smithy.InvalidParamsError{Context: "X"}, taxonomy.KindInvalidArg, ""},
	}
	for _, tc := range cases {
		ce := requireKind(t, SDKError("Op", tc.err), tc.kind, tc.finding)
		if tc.kind == taxonomy.KindLaunchDied && !strings.Contains(ce.Error(), reason) {
			t.Errorf("%s: the stateReason is missing from %v", tc.name, ce)
		}
	}
	if SDKError("Op", nil) != nil {
		t.Fatal("nil must stay nil")
	}
	// text is the tail of the message: the service's message quoted, then
	// why, each only when there is one. Catches: msg != "" or why != ""
	// negated in SDKError (an empty `, ""` or `: ` appended, the service's
	// own message or the explanation dropped).
	statuses := []struct {
		status  int
		body    string
		kind    taxonomy.ErrorKind
		finding taxonomy.FindingID
		text    string
	}{
		{429, `{"message":"slow"}`, taxonomy.KindRetryable, "", `, "slow": the identical request may succeed later`},
		{503, `<html>down</html>`, taxonomy.KindRetryable, "", `HTTP 503 UnknownError, "Service Unavailable": the identical request may succeed later`},
		{403, `{"message":null}`, taxonomy.KindCredentials, taxonomy.FindingUnsupportedRegion, ""},
		{403, `{"message":"User x is not authorized"}`, taxonomy.KindCredentials, "", `, "User x is not authorized": the identity was refused`},
		{400, `{"message":"Image web already exists"}`, taxonomy.KindPlatform, taxonomy.FindingDuplicateImageName, `, "Image web already exists": an image name is taken`},
		{404, `{"message":"not found"}`, taxonomy.KindPlatform, "", `HTTP 404 UnknownError, "not found"`},
		// Catches: a wrong MicroVM id classed Platform (or, through the
		// session's mint, Retryable: "the identical request may succeed").
		{404, `{"__type":"ResourceNotFoundException","message":"MicroVM m not found"}`, taxonomy.KindPrecondition, "", `HTTP 404 ResourceNotFoundException, "MicroVM m not found": nothing by that identifier`},
		// Catches: a retired version reported as a platform failure, or
		// without the finding that says it is a retire, not a deletion.
		{404, `{"__type":"ResourceNotFoundException","message":"No active version found for MicroVM image a and version 1.0"}`, taxonomy.KindPrecondition, taxonomy.FindingInactiveRetires, `the version exists but is INACTIVE`},
	}
	for _, st := range statuses {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if st.status == 403 {
				w.Header().Set("X-Amzn-ErrorType", "AccessDeniedException")
			}
			w.WriteHeader(st.status)
			_, _ = w.Write([]byte(st.body))
		}))
		c := lambdamicrovms.New(lambdamicrovms.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), RetryMaxAttempts: 1})
		_, err := c.GetMicrovm(context.Background(), &lambdamicrovms.GetMicrovmInput{MicrovmIdentifier: aws.String("m")})
		ce := requireKind(t, SDKError("GetMicrovm", err), st.kind, st.finding)
		if msg := ce.Error(); !strings.Contains(msg, st.text) || strings.Contains(msg, `, ""`) || strings.HasSuffix(msg, ": ") {
			t.Errorf("HTTP %d %s: message %q, want it to hold %q", st.status, st.body, msg, st.text)
		}
		srv.Close()
	}
}

// Catches: a base version spelled as the read-back spells it ("1.0") sent
// to CreateMicrovmImage (the service refuses it after the artifact upload),
// the hint not naming the bare spelling to send, a bare integer refused, and
// the image-version rules skipped for a base version.
func TestManagedBaseVersionIsABareInteger(t *testing.T) {
	for _, ok := range []string{"0", "1", "12"} {
		if err := CheckManagedBaseVersion(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"1.0", "v1", "latest", "1.1"} {
		requireKind(t, CheckManagedBaseVersion(bad), taxonomy.KindInvalidArg, taxonomy.FindingManagedBaseVersions)
	}
	if err := CheckManagedBaseVersion("1.0"); err == nil || !strings.Contains(err.Error(), `send "1"`) {
		t.Errorf("the read-back spelling's refusal does not say what to send: %v", err)
	}
	requireKind(t, CheckManagedBaseVersion(" 1"), taxonomy.KindInvalidArg, taxonomy.FindingImageVersionForm)
}
