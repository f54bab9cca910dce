package lambdamicrovms

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	smithy "github.com/aws/smithy-go"
	"github.com/microvms/microvms/api"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

func vmReply(state, reason string) reply {
	body := fmt.Sprintf(`{"microvmId":"mvm-1","state":%q,"endpoint":"mvm-1.example","imageArn":%q,"imageVersion":"1","maximumDurationInSeconds":3600,"startedAt":1755278248`, state, imageARN)
	if reason != "" {
		body += fmt.Sprintf(`,"stateReason":%q`, reason)
	}
	return reply{status: 200, header: map[string]string{"Content-Type": "application/json"}, body: body + "}"}
}

func quickRunning(o *MicrovmRunningWaiterOptions) {
	o.MinDelay, o.MaxDelay = time.Millisecond, 2*time.Millisecond
}

// A resumed MicroVM may still read SUSPENDED for a few polls before it is
// RUNNING again; the running waiter keeps polling through them.
//
// Catches: SUSPENDED or SUSPENDING treated as a terminal state of the running
// waiter, which fails a resume at its first poll and makes client/sandbox mark
// a live VM terminated.
func TestRunningWaiterWaitsThroughSuspendedAfterResume(t *testing.T) {
	srv := newStandIn(t, vmReply("SUSPENDED", ""), vmReply("SUSPENDED", ""), vmReply("SUSPENDED", ""), vmReply("PENDING", ""), vmReply("RUNNING", ""))
	c := testClient(srv.srv.URL)
	out, err := NewMicrovmRunningWaiter(c, quickRunning).WaitForOutput(ctxT(t), &GetMicrovmInput{MicrovmIdentifier: aws.String("mvm-1")}, 20*time.Second)
	if err != nil {
		t.Fatalf("running waiter after resume: %v", err)
	}
	if out.State != types.MicrovmStateRunning {
		t.Fatalf("state %s", out.State)
	}
	if n := len(srv.requests()); n != 5 {
		t.Fatalf("%d polls, want 5 (three SUSPENDED, one PENDING, one RUNNING)", n)
	}
}

// Catches: a launch that died (TERMINATED before RUNNING) polled until the
// wait times out instead of failing at once with its stateReason.
func TestRunningWaiterFailsAtOnceOnADeadLaunch(t *testing.T) {
	srv := newStandIn(t, vmReply("PENDING", ""), vmReply("TERMINATED", "Run hook returned 500"))
	c := testClient(srv.srv.URL)
	err := NewMicrovmRunningWaiter(c, quickRunning).Wait(ctxT(t), &GetMicrovmInput{MicrovmIdentifier: aws.String("mvm-1")}, 20*time.Second)
	var wf *WaiterFailureError
	if !errors.As(err, &wf) || wf.State != "TERMINATED" || wf.Reason == nil || *wf.Reason != "Run hook returned 500" {
		t.Fatalf("want a WaiterFailureError naming TERMINATED and the reason, got %v", err)
	}
	if n := len(srv.requests()); n != 2 {
		t.Fatalf("%d polls, want 2", n)
	}
}

// Catches: a waiter that sleeps before its first poll or polls at a fixed
// interval: with the defaults (1s..10s) a VM already RUNNING is answered by
// one request and no sleep.
func TestWaiterFirstPollIsImmediate(t *testing.T) {
	srv := newStandIn(t, vmReply("RUNNING", ""))
	c := testClient(srv.srv.URL)
	ctx, cancel := context.WithTimeout(ctxT(t), 900*time.Millisecond)
	defer cancel()
	if err := NewMicrovmRunningWaiter(c).Wait(ctx, &GetMicrovmInput{MicrovmIdentifier: aws.String("mvm-1")}, time.Minute); err != nil {
		t.Fatalf("an already-RUNNING VM: %v", err)
	}
}

// Catches: clientTokens from a source two clients can share (a seeded or
// injected reader): tokens must differ across calls and across clients, and
// a retried call must resend its own token.
func TestClientTokensAreFreshPerCallAndReusedByRetries(t *testing.T) {
	srv := newStandIn(t, reply{status: 500, body: `{"message":"boom"}`}, reply{status: 200, body: `{"microvmId":"mvm-1","state":"PENDING","endpoint":"e","imageArn":"a","imageVersion":"1","maximumDurationInSeconds":1,"startedAt":1}`})
	var minted []string
	observe := func(o *Options) { o.clientTokenObserver = func(_, tok string) { minted = append(minted, tok) } }
	a := testClient(srv.srv.URL, observe)
	b := testClient(srv.srv.URL, observe)
	in := &RunMicrovmInput{ImageIdentifier: aws.String("img")}
	if _, err := a.RunMicrovm(ctxT(t), in); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RunMicrovm(ctxT(t), in); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunMicrovm(ctxT(t), in); err != nil {
		t.Fatal(err)
	}
	var sent []string
	for _, r := range srv.requests() {
		var body struct{ ClientToken string }
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, body.ClientToken)
	}
	if len(sent) != 4 || sent[0] != sent[1] {
		t.Fatalf("the retry of the first call must resend its token: %v", sent)
	}
	if len(minted) != 3 || minted[0] == minted[1] || minted[1] == minted[2] || minted[0] == minted[2] {
		t.Fatalf("three calls on two clients must mint three different tokens: %v", minted)
	}
	if sent[0] != minted[0] || sent[2] != minted[1] || sent[3] != minted[2] {
		t.Fatalf("sent %v, minted %v", sent, minted)
	}
}

// The model's own endpoint test cases replay against the generated resolver.
//
// Catches: a wrong DNS suffix or partition, a FIPS or dual-stack host spelt
// differently from the rules, a custom endpoint accepted beside FIPS.
func TestEndpointRulesReplayTheModelsTestCases(t *testing.T) {
	var doc struct {
		Shapes map[string]struct {
			Traits struct {
				Tests struct {
					TestCases []struct {
						Documentation string `json:"documentation"`
						Params        struct {
							Region       *string `json:"Region"`
							UseFIPS      bool    `json:"UseFIPS"`
							UseDualStack bool    `json:"UseDualStack"`
							Endpoint     *string `json:"Endpoint"`
						} `json:"params"`
						Expect struct {
							Endpoint *struct{ URL string } `json:"endpoint"`
							Error    string                `json:"error"`
						} `json:"expect"`
					} `json:"testCases"`
				} `json:"smithy.rules#endpointTests"`
			} `json:"traits"`
		} `json:"shapes"`
	}
	if err := json.Unmarshal(api.SmithyModel, &doc); err != nil {
		t.Fatal(err)
	}
	cases := doc.Shapes[ns+"LambdaMicrovms"].Traits.Tests.TestCases
	if len(cases) < 10 {
		t.Fatalf("only %d endpoint test cases in the model", len(cases))
	}
	r := NewDefaultEndpointResolverV2()
	for _, tc := range cases {
		ep, err := r.ResolveEndpoint(context.Background(), EndpointParameters{
			Region: tc.Params.Region, UseFIPS: aws.Bool(tc.Params.UseFIPS), UseDualStack: aws.Bool(tc.Params.UseDualStack), Endpoint: tc.Params.Endpoint,
		})
		switch {
		case tc.Expect.Error != "":
			if err == nil || !strings.Contains(err.Error(), tc.Expect.Error) {
				t.Errorf("%s: want error %q, got %v %v", tc.Documentation, tc.Expect.Error, ep.URI.String(), err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.Documentation, err)
		case ep.URI.String() != tc.Expect.Endpoint.URL:
			t.Errorf("%s: %s, want %s", tc.Documentation, ep.URI.String(), tc.Expect.Endpoint.URL)
		}
	}
}

// NewFromConfig honours the endpoint variable aws-sdk-go-v2 derives from
// this model's sdkId, ahead of AWS_ENDPOINT_URL, and the FIPS and dual-stack
// switches.
//
// Catches: reading Lambda's AWS_ENDPOINT_URL_LAMBDA instead of
// AWS_ENDPOINT_URL_LAMBDA_MICROVMS, the general variable winning over the
// service's, and AWS_USE_FIPS_ENDPOINT ignored.
func TestNewFromConfigEndpointEnvironment(t *testing.T) {
	srv := newStandIn(t, vmReply("RUNNING", ""))
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
	t.Setenv("AWS_ENDPOINT_URL_LAMBDA", "http://127.0.0.1:2")
	t.Setenv("AWS_ENDPOINT_URL_LAMBDA_MICROVMS", srv.srv.URL)
	cfg, err := config.LoadDefaultConfig(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	c := NewFromConfig(cfg)
	if got := aws.ToString(c.Options().BaseEndpoint); got != srv.srv.URL {
		t.Fatalf("BaseEndpoint %q, want the AWS_ENDPOINT_URL_LAMBDA_MICROVMS value %q", got, srv.srv.URL)
	}
	if _, err := c.GetMicrovm(ctxT(t), &GetMicrovmInput{MicrovmIdentifier: aws.String("mvm-1")}); err != nil {
		t.Fatal(err)
	}
	ua := srv.requests()[0].Header.Get("User-Agent")
	if !strings.Contains(ua, "api/lambdamicrovms#"+ModuleVersion) {
		t.Errorf("User-Agent %q does not name this client", ua)
	}

	t.Setenv("AWS_ENDPOINT_URL_LAMBDA_MICROVMS", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_USE_FIPS_ENDPOINT", "true")
	t.Setenv("AWS_USE_DUALSTACK_ENDPOINT", "true")
	cfg, err = config.LoadDefaultConfig(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	o := NewFromConfig(cfg).Options()
	ep, err := o.EndpointResolverV2.ResolveEndpoint(context.Background(), bindEndpointParams(o))
	if err != nil {
		t.Fatal(err)
	}
	if ep.URI.String() != "https://lambda-fips.us-east-1.api.aws" {
		t.Fatalf("FIPS and dual-stack from the environment resolved %s", ep.URI.String())
	}
}

// Catches: a signature over something other than what was sent (a path
// re-encoded after signing, an unsigned payload), by recomputing it from the
// received request with aws-sdk-go-v2's signer.
func TestSignatureRecomputesFromTheReceivedRequest(t *testing.T) {
	srv := newStandIn(t, reply{status: 200, body: `{}`})
	c := testClient(srv.srv.URL)
	if _, err := c.DeleteMicrovmImage(ctxT(t), &DeleteMicrovmImageInput{ImageIdentifier: aws.String(imageARN)}); err != nil {
		t.Fatal(err)
	}
	r := srv.requests()[0]
	req, _ := http.NewRequest(r.Method, srv.srv.URL+r.Path, nil)
	req.URL.RawPath = r.Path
	signed := strings.Split(strings.SplitN(r.Header.Get("Authorization"), "SignedHeaders=", 2)[1], ",")[0]
	for _, h := range strings.Split(signed, ";") {
		if h == "host" {
			continue
		}
		req.Header.Set(h, r.Header.Get(h))
	}
	creds, _ := testCreds.Retrieve(context.Background())
	sum := sha256.Sum256(r.Body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "lambda", "us-east-1", fixedNow); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Header.Get("Authorization"), req.Header.Get("Authorization"); got != want {
		t.Fatalf("signature does not recompute:\n sent %s\n want %s", got, want)
	}
}

// Catches: validation generated for some constraints only, or bypassed: each
// broken constraint is refused before anything is sent.
func TestValidationRefusesLocally(t *testing.T) {
	srv := newStandIn(t, reply{status: 200, body: `{}`})
	c := testClient(srv.srv.URL)
	ctx := ctxT(t)
	cases := map[string]func() error{
		"required": func() error { _, err := c.GetMicrovm(ctx, &GetMicrovmInput{}); return err },
		"range": func() error {
			_, err := c.RunMicrovm(ctx, &RunMicrovmInput{ImageIdentifier: aws.String("img"), MaximumDurationInSeconds: aws.Int32(28801)})
			return err
		},
		"pattern": func() error {
			_, err := c.CreateMicrovmImage(ctx, &CreateMicrovmImageInput{Name: aws.String("bad name"), BaseImageArn: aws.String("b"), BuildRoleArn: aws.String("arn:aws:iam::123456789012:role/r"), CodeArtifact: &types.CodeArtifactMemberUri{Value: "s3://b/k"}})
			return err
		},
		"length": func() error {
			_, err := c.GetMicrovmImage(ctx, &GetMicrovmImageInput{ImageIdentifier: aws.String(strings.Repeat("a", 257))})
			return err
		},
		"count": func() error {
			_, err := c.ListMicrovms(ctx, &ListMicrovmsInput{MaxResults: aws.Int32(51)})
			return err
		},
		"enum": func() error {
			_, err := c.UpdateMicrovmImageVersion(ctx, &UpdateMicrovmImageVersionInput{ImageIdentifier: aws.String("i"), ImageVersion: aws.String("1"), Status: "MAYBE"})
			return err
		},
		"nested": func() error {
			_, err := c.CreateMicrovmAuthToken(ctx, &CreateMicrovmAuthTokenInput{MicrovmIdentifier: aws.String("m"), ExpirationInMinutes: aws.Int32(5),
				AllowedPorts: []types.PortSpecification{&types.PortSpecificationMemberRange{Value: types.PortRange{StartPort: aws.Int32(1)}}}})
			return err
		},
	}
	for name, f := range cases {
		var ip smithy.InvalidParamsError
		if err := f(); !errors.As(err, &ip) {
			t.Errorf("%s: want smithy.InvalidParamsError, got %v", name, err)
		}
	}
	if n := len(srv.requests()); n != 0 {
		t.Fatalf("%d requests sent for invalid input", n)
	}
}

// Each hand-written trap refusal names its finding and sends nothing.
//
// Catches: a customization dropped from the stack, or one that lets the
// request through.
func TestTrapRefusals(t *testing.T) {
	srv := newStandIn(t, reply{status: 200, body: `{}`})
	c := testClient(srv.srv.URL)
	ctx := ctxT(t)
	cases := map[taxonomy.FindingID]func() error{
		taxonomy.FindingImageARNColon: func() error {
			_, err := c.GetMicrovmImage(ctx, &GetMicrovmImageInput{ImageIdentifier: aws.String("arn:aws:lambda:us-east-1:123456789012:microvm-image/x")})
			return err
		},
		taxonomy.FindingRunHookPayloadCeiling: func() error {
			// 2000 three-byte runes: inside the model's 4096-character length,
			// over the measured 4096-byte ceiling.
			_, err := c.RunMicrovm(ctx, &RunMicrovmInput{ImageIdentifier: aws.String("img"), RunHookPayload: aws.String(strings.Repeat("€", 2000))})
			return err
		},
		taxonomy.FindingNetworkConnectorsAreArns: func() error {
			_, err := c.RunMicrovm(ctx, &RunMicrovmInput{ImageIdentifier: aws.String("img"), IngressNetworkConnectors: []string{"ALL_INGRESS"}})
			return err
		},
		taxonomy.FindingEndpointAuth: func() error {
			_, err := c.CreateMicrovmAuthToken(ctx, &CreateMicrovmAuthTokenInput{MicrovmIdentifier: aws.String("m"), ExpirationInMinutes: aws.Int32(61),
				AllowedPorts: []types.PortSpecification{&types.PortSpecificationMemberPort{Value: 8080}}})
			return err
		},
	}
	for finding, f := range cases {
		var re *RefusalError
		if err := f(); !errors.As(err, &re) || re.Finding != finding {
			t.Errorf("%s: want a RefusalError naming it, got %v", finding, err)
		}
	}
	if n := len(srv.requests()); n != 0 {
		t.Fatalf("%d requests sent for refused input", n)
	}
}

// Catches: a retry policy that gives up on throttling or a gateway's 5xx
// page, or that retries a 4xx that is the service's answer.
func TestRetryPolicy(t *testing.T) {
	srv := newStandIn(t,
		reply{status: 429, header: map[string]string{"X-Amzn-ErrorType": "ThrottlingException"}, body: `{"message":"slow down"}`},
		reply{status: 502, header: map[string]string{"Content-Type": "text/html"}, body: `<html>bad gateway</html>`},
		vmReply("RUNNING", ""))
	c := testClient(srv.srv.URL)
	if _, err := c.GetMicrovm(ctxT(t), &GetMicrovmInput{MicrovmIdentifier: aws.String("mvm-1")}); err != nil {
		t.Fatalf("throttling then a gateway page then success: %v", err)
	}
	if n := len(srv.requests()); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	srv2 := newStandIn(t, reply{status: 400, header: map[string]string{"X-Amzn-ErrorType": "ValidationException"}, body: `{"message":"no"}`})
	c2 := testClient(srv2.srv.URL)
	_, err := c2.GetMicrovm(ctxT(t), &GetMicrovmInput{MicrovmIdentifier: aws.String("mvm-1")})
	var ve *types.ValidationException
	if !errors.As(err, &ve) || len(srv2.requests()) != 1 {
		t.Fatalf("a 400 must be answered once, not retried: %v after %d attempts", err, len(srv2.requests()))
	}
	// An exception the operation does not model is a GenericAPIError.
	srv3 := newStandIn(t, reply{status: 418, body: `{"__type":"aws.lambda#TeapotException","Message":"short and stout"}`})
	_, err = testClient(srv3.srv.URL).GetMicrovm(ctxT(t), &GetMicrovmInput{MicrovmIdentifier: aws.String("mvm-1")})
	var ge *smithy.GenericAPIError
	if !errors.As(err, &ge) || ge.Code != "TeapotException" || ge.Message != "short and stout" {
		t.Fatalf("unmodeled error: %#v", err)
	}
}

// Catches: the null-message AccessDeniedException of a region without
// MicroVMs read as an IAM denial, and the wrapper hiding the typed exception
// or the HTTP response (status, request id) from errors.As.
func TestUnsupportedRegionIsNamed(t *testing.T) {
	srv := newStandIn(t, reply{status: 403, header: map[string]string{"X-Amzn-ErrorType": "AccessDeniedException", "X-Amzn-Requestid": "req-1"}, body: `{"message":null}`})
	_, err := testClient(srv.srv.URL).GetMicrovm(ctxT(t), &GetMicrovmInput{MicrovmIdentifier: aws.String("mvm-1")})
	var ur *UnsupportedRegionError
	var ade *types.AccessDeniedException
	var re *awshttp.ResponseError
	if !errors.As(err, &ur) || !errors.As(err, &ade) || !errors.As(err, &re) || re.HTTPStatusCode() != 403 || re.ServiceRequestID() != "req-1" {
		t.Fatalf("want UnsupportedRegionError over the AccessDeniedException and the ResponseError, got %v", err)
	}
	if !strings.Contains(err.Error(), taxonomy.FindingUnsupportedRegion.Title()) {
		t.Fatalf("the error does not name the finding: %v", err)
	}
	// A real denial, with a message, is left alone.
	srv2 := newStandIn(t, reply{status: 403, header: map[string]string{"X-Amzn-ErrorType": "AccessDeniedException"}, body: `{"message":"User: arn:aws:iam::1:user/x is not authorized to perform: lambda:GetMicrovm"}`})
	_, err = testClient(srv2.srv.URL).GetMicrovm(ctxT(t), &GetMicrovmInput{MicrovmIdentifier: aws.String("mvm-1")})
	if errors.As(err, &ur) || !errors.As(err, &ade) {
		t.Fatalf("a real denial: %v", err)
	}
}

type fixedDelay struct{ aws.Retryer }

func (fixedDelay) RetryDelay(int, error) (time.Duration, error) { return 100 * time.Millisecond, nil }

// Catches: the model's Retry-After (retryAfterSeconds) ignored, or believed
// without a ceiling.
func TestRetryAfterIsHonoured(t *testing.T) {
	r := customizeRetryer(fixedDelay{retry.NewStandard()})
	for _, tc := range []struct {
		err  error
		want time.Duration
	}{
		{&types.ThrottlingException{RetryAfterSeconds: aws.Int32(3)}, 3 * time.Second},
		{&types.InternalServerException{RetryAfterSeconds: aws.Int32(3600)}, MaxRetryAfter},
		{&types.ThrottlingException{}, 100 * time.Millisecond},
	} {
		if d, err := r.RetryDelay(1, &smithy.OperationError{Err: tc.err}); err != nil || d != tc.want {
			t.Errorf("%T: delay %v, want %v", tc.err, d, tc.want)
		}
	}
	if _, ok := customizeRetryer(retry.NewAdaptiveMode()).(aws.RetryerV2); !ok {
		t.Fatal("wrapping the adaptive retryer lost its RetryerV2 rate limiting")
	}
}
