package emulator

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
)

var testCreds = credentials.NewStaticCredentialsProvider("AKIDEMULATOR", "emulator-secret", "")

func s3Client(base string) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", Credentials: testCreds, BaseEndpoint: aws.String(base), UsePathStyle: true})
}

func apiCode(t *testing.T, err error) string {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("not an API error: %v", err)
	}
	return ae.ErrorCode()
}

// Catches: an S3 slice the SDK's own client cannot drive (a body it cannot
// parse, an ETag the transfer manager rejects, aws-chunked bytes kept as
// the object, a multipart upload assembled out of order or with its
// framing), and errors in another service's shape.
func TestS3SliceThroughTheSDK(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	c := s3Client(base)

	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("art"), Key: aws.String("k"), Body: strings.NewReader("x")})
	var nsb *s3types.NoSuchBucket
	if !errors.As(err, &nsb) && apiCode(t, err) != "NoSuchBucket" {
		t.Fatalf("put into a missing bucket: %v", err)
	}
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("art")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("art")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("art")})
	var owned *s3types.BucketAlreadyOwnedByYou
	if !errors.As(err, &owned) {
		t.Fatalf("second create: %v", err)
	}

	tm := transfermanager.New(c)
	for _, size := range []int{1 << 10, 17 << 20} { // one PutObject; then past the 16 MiB threshold, multipart
		body := make([]byte, size)
		_, _ = rand.Read(body)
		key := "dir/artifact-" + strings.Repeat("x", size%7) + ".zip"
		if _, err := tm.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String("art"), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
			t.Fatalf("upload %d bytes: %v", size, err)
		}
		got, ok := s.Object("art", key)
		if !ok || !bytes.Equal(got, body) {
			t.Fatalf("stored %d bytes (ok %v), want the %d uploaded", len(got), ok, size)
		}
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("art"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		read, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if !bytes.Equal(read, body) {
			t.Fatalf("GetObject returned %d bytes", len(read))
		}
		if size > 16<<20 && !strings.HasSuffix(aws.ToString(out.ETag), `-3"`) {
			t.Fatalf("multipart ETag %s, want the parts' count suffix", aws.ToString(out.ETag))
		}
	}
	multipart := 0
	for _, r := range s.Requests() {
		if r.Service == "s3" && strings.Contains(r.RawQuery, "partNumber=") {
			multipart++
		}
	}
	if multipart != 3 {
		t.Fatalf("%d UploadPart requests, want 3 (8 MiB parts of 17 MiB)", multipart)
	}

	// Over TLS a body that cannot seek goes aws-chunked with a trailing
	// checksum: the object is the payload, not its framing.
	tlsSrv := httptest.NewTLSServer(s.Handler())
	defer tlsSrv.Close()
	tc := s3.New(s3.Options{Region: "us-east-1", Credentials: testCreds, BaseEndpoint: aws.String(tlsSrv.URL), UsePathStyle: true, HTTPClient: tlsSrv.Client()})
	streamed := bytes.Repeat([]byte("streamed "), 10000)
	if _, err := tc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("art"), Key: aws.String("streamed"), Body: struct{ io.Reader }{bytes.NewReader(streamed)}, ContentLength: aws.Int64(int64(len(streamed))), ChecksumAlgorithm: s3types.ChecksumAlgorithmCrc32}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Object("art", "streamed"); !bytes.Equal(got, streamed) {
		t.Fatalf("streamed object is %d bytes: %.60q", len(got), got)
	}
	chunked := false
	for _, r := range s.Requests() {
		chunked = chunked || strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked")
	}
	if !chunked {
		t.Fatal("no request was aws-chunked: the decoder went untested")
	}

	// A checksum that does not match the bytes is refused, as S3 refuses it.
	req, _ := http.NewRequestWithContext(ctx, "PUT", base+"/art/bad", strings.NewReader("payload"))
	req.Header.Set("Authorization", strings.Replace(auth, "/lambda/", "/s3/", 1))
	req.Header.Set("X-Amz-Checksum-Crc32", "AAAAAA==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "<Code>BadDigest</Code>") {
		t.Fatalf("wrong checksum: %d %s", resp.StatusCode, b)
	}
	if _, ok := s.Object("art", "bad"); ok {
		t.Fatal("an object with a wrong checksum was stored")
	}

	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("art"), Key: aws.String("absent")})
	var nsk *s3types.NoSuchKey
	if !errors.As(err, &nsk) {
		t.Fatalf("missing key: %v", err)
	}
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("art"), Key: aws.String("absent")})
	var nf *s3types.NotFound
	if !errors.As(err, &nf) {
		t.Fatalf("HEAD of a missing key: %v", err)
	}
	_, err = c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("art"), Key: aws.String("k"), UploadId: aws.String("nope"), PartNumber: aws.Int32(1), Body: strings.NewReader("x")})
	if code := apiCode(t, err); code != "NoSuchUpload" {
		t.Fatalf("part of an unknown upload: %v", err)
	}
	// Outside the slice: S3's own 501, never a silent success.
	_, err = c.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("art")})
	if code := apiCode(t, err); code != "NotImplemented" {
		t.Fatalf("GetBucketPolicy: %v", err)
	}
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("art")})
	if code := apiCode(t, err); code != "BucketNotEmpty" {
		t.Fatalf("DeleteBucket of a full bucket: %v", err)
	}
}

// Catches: an STS answer the SDK's awsQuery decoder cannot read, an
// identity that is not the emulator's account, an unknown action answered
// with success or in another protocol's error shape.
func TestSTSSliceThroughTheSDK(t *testing.T) {
	s := New(Options{Account: "210987654321"})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := sts.New(sts.Options{Region: "us-east-1", Credentials: testCreds, BaseEndpoint: aws.String(base)})
	id, err := c.GetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(id.Account) != "210987654321" || aws.ToString(id.Arn) != "arn:aws:iam::210987654321:user/emulator" {
		t.Fatalf("%+v", id)
	}
	_, err = c.GetSessionToken(context.Background(), &sts.GetSessionTokenInput{})
	if code := apiCode(t, err); code != "InvalidAction" {
		t.Fatalf("GetSessionToken: %v", err)
	}
}

// Catches: a CloudWatch Logs operation outside the slice answered as if
// served, or in the control plane's restJson error shape.
func TestLogsSliceRefusesWhatItDoesNotServe(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s.AddImage("img")
	c := cloudwatchlogs.New(cloudwatchlogs.Options{Region: "us-east-1", Credentials: testCreds, BaseEndpoint: aws.String(base)})
	out, err := c.FilterLogEvents(context.Background(), &cloudwatchlogs.FilterLogEventsInput{LogGroupName: aws.String("/aws/lambda-microvms/img")})
	if err != nil || len(out.Events) == 0 {
		t.Fatalf("%v %v", out, err)
	}
	_, err = c.CreateLogGroup(context.Background(), &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("g")})
	if code := apiCode(t, err); code != "UnknownOperationException" {
		t.Fatalf("CreateLogGroup: %v", err)
	}
	_, err = c.DeleteLogGroup(context.Background(), &cloudwatchlogs.DeleteLogGroupInput{LogGroupName: aws.String("absent")})
	var nf *cwtypes.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("DeleteLogGroup of a missing group: %v", err)
	}
}

// Catches: a build whose s3:// artifact sits in the emulator's own S3 slice
// run with the emulator's agentd instead of the artifact's (the artifact
// ignored in silence), and a missing object that does not fail the build.
func TestBuildReadsItsArtifactFromTheS3Slice(t *testing.T) {
	s, base := serve(t, Options{WallClock: true, StateDir: t.TempDir()})
	daemon, err := os.ReadFile(agentdBin)
	if err != nil {
		t.Fatal(err)
	}
	zipped, err := os.ReadFile(strings.TrimPrefix(artifactZip(t, "FROM x\nCOPY agentd /agentd\nRUN dnf install -y git\nCMD [\"/agentd\"]\n", daemon), "file://"))
	if err != nil {
		t.Fatal(err)
	}
	c := s3Client(base)
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("artifacts")}); err != nil {
		t.Fatal(err)
	}
	if _, err := transfermanager.New(c).UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String("artifacts"), Key: aws.String("a/b.zip"), Body: bytes.NewReader(zipped)}); err != nil {
		t.Fatal(err)
	}
	createImage(t, base, "froms3", "s3://artifacts/a/b.zip")
	if _, _, out := do(t, base, "GET", "/2025-09-09/microvm-images/froms3", "", auth); !strings.Contains(out, `"CREATED"`) {
		t.Fatalf("%s", out)
	}
	if lines := strings.Join(s.LogLines("/aws/lambda-microvms/froms3"), "\n"); !strings.Contains(lines, "not performed by the emulator: RUN dnf install -y git") {
		t.Fatalf("the artifact's Dockerfile was not read: %s", lines)
	}
	createImage(t, base, "missing", "s3://artifacts/absent.zip")
	_, _, builds := do(t, base, "GET", "/2025-09-09/microvm-images/missing/versions/1.0/builds", "", auth)
	if !strings.Contains(builds, "NoSuchKey") || !strings.Contains(builds, `"FAILED"`) {
		t.Fatalf("a missing artifact object: %s", builds)
	}
}
