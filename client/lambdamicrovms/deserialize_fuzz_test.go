package lambdamicrovms

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	smithy "github.com/aws/smithy-go"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
)

// fixedReply is an HTTPClient answering every request with one response, no
// network involved.
type fixedReply struct {
	status int
	header http.Header
	body   []byte
}

func (f fixedReply) Do(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: f.status, Header: f.header.Clone(), Body: io.NopCloser(bytes.NewReader(f.body)), Request: r}, nil
}

// FuzzDeserialize feeds arbitrary reply bodies, statuses and error-type
// headers through the generated deserializers of operations whose outputs
// hold every kind of shape (structures, unions, lists, maps, timestamps).
//
// Invariants, each with the wrong edit it catches:
//   - no panic (a type assertion on a JSON value without the ok form, a nil
//     union dereferenced);
//   - a non-2xx reply is always a smithy.APIError (a malformed error body
//     turned into a decoding failure the retryer cannot classify);
//   - a 2xx reply either decodes or fails as a *smithy.DeserializationError
//     (a decoder returning a bare error, or output without an error).
func FuzzDeserialize(f *testing.F) {
	seeds := []string{
		`{}`, ``, `null`, `[]`, `{"state":"RUNNING","startedAt":1755278248.5}`,
		`{"codeArtifact":{"uri":"s3://b/k"},"logging":{"disabled":{}},"tags":{"a":"b"},"cpuConfigurations":[{"architecture":"ARM_64"}]}`,
		`{"logging":{"unknownMember":{"x":1}}}`, `{"createdAt":"yesterday"}`, `{"items":[null,{"imageArn":7}]}`,
		`{"message":"m","resourceId":"r","resourceType":"t"}`, `<html>bad gateway</html>`, `{"authToken":{"X-aws-proxy-auth":"t"}}`,
	}
	for _, s := range seeds {
		f.Add(200, "", []byte(s))
		f.Add(404, "ResourceNotFoundException", []byte(s))
		f.Add(502, "", []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, errType string, body []byte) {
		if status < 200 || status > 599 {
			return
		}
		h := http.Header{}
		if errType != "" {
			h.Set("X-Amzn-ErrorType", errType)
		}
		c := New(Options{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:9"), HTTPClient: fixedReply{status: status, header: h, body: body}, RetryMaxAttempts: 1})
		ctx := context.Background()
		check := func(out any, err error) {
			switch {
			case status >= 300:
				var apiErr smithy.APIError
				if !errors.As(err, &apiErr) {
					t.Fatalf("HTTP %d: %T %v is not a smithy.APIError", status, err, err)
				}
			case err != nil:
				var de *smithy.DeserializationError
				if !errors.As(err, &de) {
					t.Fatalf("HTTP %d: %T %v is not a DeserializationError", status, err, err)
				}
			}
		}
		check(c.GetMicrovm(ctx, &GetMicrovmInput{MicrovmIdentifier: aws.String("m")}))
		check(c.GetMicrovmImageVersion(ctx, &GetMicrovmImageVersionInput{ImageIdentifier: aws.String("i"), ImageVersion: aws.String("1")}))
		check(c.ListMicrovmImageBuilds(ctx, &ListMicrovmImageBuildsInput{ImageIdentifier: aws.String("i"), ImageVersion: aws.String("1")}))
		check(c.CreateMicrovmAuthToken(ctx, &CreateMicrovmAuthTokenInput{MicrovmIdentifier: aws.String("m"), ExpirationInMinutes: aws.Int32(1), AllowedPorts: []types.PortSpecification{&types.PortSpecificationMemberPort{Value: 8080}}}))
	})
}
