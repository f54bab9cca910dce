package emulator

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Catches: a PutObject that ignores If-None-Match (a lease taken twice)
// or If-Match (a stale holder overwriting a taker's lease), and one that
// answers a failed condition with anything but S3's PreconditionFailed
// (or NoSuchKey for If-Match over nothing).
func TestS3ConditionalPut(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	c := s3Client(base)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("b")}); err != nil {
		t.Fatal(err)
	}
	put := func(body string, ifNone, ifMatch *string) (*s3.PutObjectOutput, error) {
		return c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("lease"), Body: strings.NewReader(body), IfNoneMatch: ifNone, IfMatch: ifMatch})
	}
	if _, err := put("x", nil, aws.String(`"abc"`)); err == nil || apiCode(t, err) != "NoSuchKey" {
		t.Fatalf("If-Match over no object: %v", err)
	}
	first, err := put("one", aws.String("*"), nil)
	if err != nil {
		t.Fatalf("If-None-Match over no object: %v", err)
	}
	if _, err := put("two", aws.String("*"), nil); err == nil || apiCode(t, err) != "PreconditionFailed" {
		t.Fatalf("If-None-Match over an object: %v", err)
	}
	second, err := put("two", nil, first.ETag)
	if err != nil {
		t.Fatalf("If-Match of the current ETag: %v", err)
	}
	if _, err := put("three", nil, first.ETag); err == nil || apiCode(t, err) != "PreconditionFailed" {
		t.Fatalf("If-Match of a replaced ETag: %v", err)
	}
	if got, _ := s.Object("b", "lease"); string(got) != "two" || aws.ToString(second.ETag) == aws.ToString(first.ETag) {
		t.Fatalf("the object is %q", got)
	}
}
