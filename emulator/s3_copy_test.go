package emulator

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// CopyObject through the SDK's own client: the copy holds the source's
// bytes, ETag and content type under the new key (in the same bucket and
// in another), the source stays, a key with a slash and a space is read
// URL-encoded, and a missing source is S3's NoSuchKey or NoSuchBucket.
// Catches: a copy routed as an empty PutObject (the SDK's PUT carries no
// body), a CopyObjectResult the SDK cannot parse, the copy-source's
// encoding or leading slash kept as part of the key, and a copy that moves
// rather than copies.
func TestS3CopyObject(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	c := s3Client(base)
	s.CreateBucket("art")
	s.CreateBucket("other")
	body := bytes.Repeat([]byte("checkpoint "), 1<<12)
	src := "staging/a b"
	put, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("art"), Key: aws.String(src), Body: bytes.NewReader(body),
		ContentType: aws.String("application/zstd"), ChecksumAlgorithm: s3types.ChecksumAlgorithmCrc32})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ bucket, source string }{
		{"art", "art/" + url.PathEscape("staging") + "/" + url.PathEscape("a b")},
		{"other", "/art/staging/a%20b"},
	} {
		out, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(tc.bucket), Key: aws.String("objects/x"), CopySource: aws.String(tc.source)})
		if err != nil {
			t.Fatalf("copy from %s: %v", tc.source, err)
		}
		if out.CopyObjectResult == nil || aws.ToString(out.CopyObjectResult.ETag) != aws.ToString(put.ETag) || out.CopyObjectResult.LastModified == nil {
			t.Fatalf("CopyObjectResult %+v, want ETag %s and a time", out.CopyObjectResult, aws.ToString(put.ETag))
		}
		if aws.ToString(out.CopyObjectResult.ChecksumCRC32) != aws.ToString(put.ChecksumCRC32) {
			t.Fatalf("copy's CRC32 %q, want the source's %q", aws.ToString(out.CopyObjectResult.ChecksumCRC32), aws.ToString(put.ChecksumCRC32))
		}
		get, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(tc.bucket), Key: aws.String("objects/x")})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(get.Body)
		get.Body.Close()
		if !bytes.Equal(got, body) || aws.ToString(get.ContentType) != "application/zstd" {
			t.Fatalf("the copy in %s is %d bytes of %s, want the source's %d of application/zstd", tc.bucket, len(got), aws.ToString(get.ContentType), len(body))
		}
	}
	if _, ok := s.Object("art", src); !ok {
		t.Fatal("the source is gone after the copy")
	}
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("art"), Key: aws.String("y"), CopySource: aws.String("art/nothing")})
	if err == nil || apiCode(t, err) != "NoSuchKey" {
		t.Fatalf("copy of a missing key: %v, want NoSuchKey", err)
	}
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("art"), Key: aws.String("y"), CopySource: aws.String("nobucket/k")})
	if err == nil || apiCode(t, err) != "NoSuchBucket" {
		t.Fatalf("copy from a missing bucket: %v, want NoSuchBucket", err)
	}
	if _, ok := s.Object("art", "y"); ok {
		t.Fatal("a failed copy stored an object")
	}
}
