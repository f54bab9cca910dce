package control

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	smithy "github.com/aws/smithy-go"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

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
	statuses := []struct {
		status  int
		body    string
		kind    taxonomy.ErrorKind
		finding taxonomy.FindingID
	}{
		{429, `{"message":"slow"}`, taxonomy.KindRetryable, ""},
		{503, `<html>down</html>`, taxonomy.KindRetryable, ""},
		{403, `{"message":null}`, taxonomy.KindCredentials, taxonomy.FindingUnsupportedRegion},
		{403, `{"message":"User x is not authorized"}`, taxonomy.KindCredentials, ""},
		{400, `{"message":"Image web already exists"}`, taxonomy.KindPlatform, taxonomy.FindingDuplicateImageName},
		{404, `{"message":"not found"}`, taxonomy.KindPlatform, ""},
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
		requireKind(t, SDKError("GetMicrovm", err), st.kind, st.finding)
		srv.Close()
	}
}

// Catches: SDK() built with another endpoint, region or credentials than the
// control client it hangs off (its calls would miss the emulator, or be
// refused unsigned).
func TestSDKSharesTheClientsConfiguration(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := h.c.SDK().ListManagedMicrovmImages(ctx, &lambdamicrovms.ListManagedMicrovmImagesInput{})
	if err != nil {
		t.Fatal(SDKError("ListManagedMicrovmImages", err))
	}
	if len(out.Items) == 0 {
		t.Fatal("no managed images through SDK()")
	}
	if client.KindOf(SDKError("x", errors.New("odd"))) != taxonomy.KindUnexpected {
		t.Fatal("an unknown error must be Unexpected")
	}
}
