package emulator

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// An object's ETag is the MD5 of its bytes, now that the MD5 is taken
// while the body is read rather than after.
// Catches: the hash fed nothing, or only part of a body read in several
// pieces.
func TestS3ETagIsTheBodysMD5(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	c := s3Client(base)
	s.CreateBucket("art")
	body := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, read in many pieces
	want := md5.Sum([]byte(body))
	out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("art"), Key: aws.String("k"), Body: strings.NewReader(body)})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Trim(aws.ToString(out.ETag), `"`); got != hex.EncodeToString(want[:]) {
		t.Fatalf("ETag %s, want the MD5 %x", got, want)
	}
}
