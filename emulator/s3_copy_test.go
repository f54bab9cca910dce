package emulator

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"strings"
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

// A multipart object is kept as its parts (Complete does not join them),
// so every read of it must see the parts as one: GetObject, HeadObject's
// length, a listing's size, and UploadPartCopy ranges that start and end
// inside different parts (each copied part's ETag the MD5 of its range).
// Catches: a part left out or repeated at a boundary, a range cut at the
// wrong offset within a part, and a copy that changes the source's pieces.
func TestS3MultipartObjectReadAcrossItsParts(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	c := s3Client(base)
	s.CreateBucket("art")
	body := make([]byte, 11<<20+12345)
	for i := range body {
		body[i] = byte(i*7 + i>>13)
	}
	upload := func(key string, part func(n int32, id *string) (string, error), n int32) {
		t.Helper()
		up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("art"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		var parts []s3types.CompletedPart
		for i := int32(1); i <= n; i++ {
			etag, err := part(i, up.UploadId)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, s3types.CompletedPart{PartNumber: aws.Int32(i), ETag: aws.String(etag)})
		}
		if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("art"), Key: aws.String(key), UploadId: up.UploadId,
			MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts}}); err != nil {
			t.Fatal(err)
		}
	}
	// Parts of 5 MiB, 5 MiB and the rest.
	cuts := []int{0, 5 << 20, 10 << 20, len(body)}
	upload("whole", func(n int32, id *string) (string, error) {
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("art"), Key: aws.String("whole"), UploadId: id, PartNumber: aws.Int32(n),
			Body: bytes.NewReader(body[cuts[n-1]:cuts[n]])})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.ETag), nil
	}, 3)
	want := func(key string, b []byte) {
		t.Helper()
		get, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("art"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(get.Body)
		get.Body.Close()
		if !bytes.Equal(got, b) || aws.ToInt64(get.ContentLength) != int64(len(b)) {
			t.Fatalf("%s: read %d bytes (Content-Length %d), want its %d", key, len(got), aws.ToInt64(get.ContentLength), len(b))
		}
		if stored, _ := s.Object("art", key); !bytes.Equal(stored, b) {
			t.Fatalf("%s: Object gives %d bytes, want %d", key, len(stored), len(b))
		}
		head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("art"), Key: aws.String(key)})
		if err != nil || aws.ToInt64(head.ContentLength) != int64(len(b)) {
			t.Fatalf("%s: HeadObject %v, length %d, want %d", key, err, aws.ToInt64(head.ContentLength), len(b))
		}
	}
	want("whole", body)
	// Ranges from inside the first part to inside the second (5 MiB and
	// a byte), and from there to inside the last part.
	ranges := [][2]int{{3 << 20, 8<<20 + 1}, {8<<20 + 2, len(body) - 100}}
	upload("ranges", func(n int32, id *string) (string, error) {
		r := ranges[n-1]
		out, err := c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("art"), Key: aws.String("ranges"), UploadId: id, PartNumber: aws.Int32(n),
			CopySource: aws.String("art/whole"), CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", r[0], r[1]))})
		if err != nil {
			return "", err
		}
		sum := md5.Sum(body[r[0] : r[1]+1])
		if got := strings.Trim(aws.ToString(out.CopyPartResult.ETag), `"`); got != hex.EncodeToString(sum[:]) {
			t.Fatalf("part %d's ETag %s, want the MD5 of its range %x", n, got, sum)
		}
		return aws.ToString(out.CopyPartResult.ETag), nil
	}, 2)
	want("ranges", body[3<<20:len(body)-99])
	want("whole", body)
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("art")})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.Contents {
		if aws.ToString(o.Key) == "whole" && aws.ToInt64(o.Size) != int64(len(body)) {
			t.Fatalf("listed size %d, want %d", aws.ToInt64(o.Size), len(body))
		}
	}
}
