package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Store is where checkpoints live: one bucket, under Prefix. Objects are
// Prefix+"objects/sha256-<hex>.tar.zst" (their key is their digest, so the
// same tree saved twice is stored once) and manifests
// Prefix+"manifests/<name>.json", or "sha256-<hex>.json" for an unnamed one.
type Store struct {
	// S3 is an aws-sdk-go-v2 S3 client (the account's, or one pointed at
	// the emulator's URL with path-style addressing).
	S3 *s3.Client
	// Bucket holds the checkpoints.
	Bucket string
	// Prefix is the key prefix; empty is "checkpoints/".
	Prefix string
	// TempDir holds a checkpoint's object on this host between the sandbox
	// and the bucket; empty is os.TempDir().
	TempDir string
	// MaxObjectBytes bounds one object (compressed) held on this host;
	// zero is DefaultMaxObjectBytes.
	MaxObjectBytes int64
}

// DefaultMaxObjectBytes is the largest compressed object a Store writes or
// reads unless told otherwise.
const DefaultMaxObjectBytes = 8 << 30

func (s *Store) prefix() string {
	if s.Prefix == "" {
		return "checkpoints/"
	}
	return s.Prefix
}

func (s *Store) maxObject() int64 {
	if s.MaxObjectBytes > 0 {
		return s.MaxObjectBytes
	}
	return DefaultMaxObjectBytes
}

func (s *Store) objectKey(digest string) string {
	return s.prefix() + "objects/" + strings.Replace(digest, ":", "-", 1) + ".tar.zst"
}

func (s *Store) manifestKey(m Manifest) string {
	id := m.Name
	if id == "" {
		id = strings.Replace(m.Digest, ":", "-", 1)
	}
	return s.prefix() + "manifests/" + id + ".json"
}

func (s *Store) check() error {
	if s == nil || s.S3 == nil || s.Bucket == "" {
		return client.Errorf(taxonomy.KindInvalidArg, "", "a checkpoint store needs an S3 client and a bucket")
	}
	return nil
}

func notFound(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound")
}

func (s *Store) platformErr(what string, err error) error {
	return client.Errorf(taxonomy.KindPlatform, "", "%s in s3://%s: %w", what, s.Bucket, err).WithCause(err)
}

// partBytes is a multipart upload's part size: twice the transfer
// manager's default, so half the requests, while its buffers in flight (one
// part per concurrent upload, five by default) stay near 80 MiB.
const partBytes = 16 << 20

// putStaging uploads r, of a size not known yet, under a staging key as it
// is written (the transfer manager cuts it into parts and sends them while
// the rest is still being packed), so the object's digest, which names its
// final key, need not be known before its bytes leave. A failed upload
// leaves no parts behind (the transfer manager aborts it).
func (s *Store) putStaging(ctx context.Context, key string, r io.Reader) error {
	// The object's own sha256 is its key and is checked at every restore,
	// and each part still carries a signed CRC32 that S3 verifies; a
	// second sha256 per part for the signature over plain http is a pass
	// over every byte that buys nothing more.
	c := s3.New(s.S3.Options(), func(o *s3.Options) { o.APIOptions = append(o.APIOptions, unsignedOverHTTP) })
	tm := transfermanager.New(c, func(o *transfermanager.Options) {
		// Fewer, larger parts: each part is a request with its own
		// checksum pass and buffers on both ends.
		o.PartSizeBytes = partBytes
	})
	_, err := tm.UploadObject(ctx, &transfermanager.UploadObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String(key), Body: r,
		ContentType:       aws.String("application/zstd"),
		ChecksumAlgorithm: tmtypes.ChecksumAlgorithmCrc32,
	})
	if err != nil {
		return s.platformErr("storing the checkpoint object "+key, err)
	}
	return nil
}

// maxCopyBytes is the largest object one CopyObject copies (the S3 limit,
// 5 GiB); a larger one is copied part by part (UploadPartCopy). A variable
// so a test can take the part path with a small object.
var maxCopyBytes int64 = 5 << 30

// promote puts the staged object under its digest's key, server-side (no
// byte crosses this machine again), unless an object of that size is there
// already (the same bytes are never stored twice), and removes the staging
// key either way.
func (s *Store) promote(ctx context.Context, staging string, size int64, digest string) error {
	defer s.dropStaging(ctx, staging)
	key := s.objectKey(digest)
	if h, err := s.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)}); err == nil && aws.ToInt64(h.ContentLength) == size {
		return nil
	}
	src := s.Bucket + "/" + url.PathEscape(staging)
	src = strings.ReplaceAll(src, "%2F", "/")
	if size <= maxCopyBytes {
		_, err := s.S3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), CopySource: aws.String(src)})
		if err != nil {
			return s.platformErr("copying the checkpoint object to "+key, err)
		}
		return nil
	}
	up, err := s.S3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), ContentType: aws.String("application/zstd")})
	if err != nil {
		return s.platformErr("copying the checkpoint object to "+key, err)
	}
	var parts []s3types.CompletedPart
	for n, off := int32(1), int64(0); off < size; n, off = n+1, off+maxCopyBytes {
		end := min(off+maxCopyBytes, size) - 1
		out, err := s.S3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(n), CopySource: aws.String(src), CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", off, end))})
		if err != nil {
			_, _ = s.S3.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: up.UploadId})
			return s.platformErr("copying the checkpoint object to "+key, err)
		}
		parts = append(parts, s3types.CompletedPart{PartNumber: aws.Int32(n), ETag: out.CopyPartResult.ETag})
	}
	if _, err := s.S3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: up.UploadId,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		_, _ = s.S3.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: up.UploadId})
		return s.platformErr("copying the checkpoint object to "+key, err)
	}
	return nil
}

// dropStaging removes a staging object, even when ctx has ended: a
// checkpoint leaves nothing of itself but its object and manifest.
func (s *Store) dropStaging(ctx context.Context, staging string) {
	_, _ = s.S3.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(staging)})
}

func (s *Store) stagingKey() string { return s.prefix() + "staging/" + randHex() + ".tar.zst" }

// unsignedOverHTTP marks a request's payload UNSIGNED-PAYLOAD before the
// SDK's checksum step, when the request goes over plain http (an
// emulator's endpoint): the SDK then computes the payload's CRC32 alone.
// Over https the SDK already streams a trailing checksum unsigned.
func unsignedOverHTTP(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("microvm:UnsignedPayloadOverHTTP",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if req, ok := in.Request.(*smithyhttp.Request); ok && !req.IsHTTPS() {
				ctx = v4.SetPayloadHash(ctx, "UNSIGNED-PAYLOAD")
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.Before)
}

func (s *Store) putManifest(ctx context.Context, m Manifest) error {
	b, err := encodeManifest(m)
	if err != nil {
		return err
	}
	key := s.manifestKey(m)
	_, err = s.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key),
		Body: strings.NewReader(string(b)), ContentLength: aws.Int64(int64(len(b))), ContentType: aws.String("application/json")})
	if err != nil {
		return s.platformErr("storing the checkpoint manifest "+key, err)
	}
	return nil
}

// Get reads the manifest of a checkpoint by name, or by digest
// ("sha256:<hex>": the unnamed checkpoint of that digest, else any
// checkpoint whose object it is).
func (s *Store) Get(ctx context.Context, ref string) (Manifest, error) {
	if err := s.check(); err != nil {
		return Manifest{}, err
	}
	id := ref
	if digestPattern().MatchString(ref) {
		id = strings.Replace(ref, ":", "-", 1)
	} else if !namePattern().MatchString(ref) {
		return Manifest{}, client.Errorf(taxonomy.KindInvalidArg, "", "%q is neither a checkpoint name nor a sha256:<hex> digest", ref)
	}
	m, err := s.getKey(ctx, s.prefix()+"manifests/"+id+".json")
	if err == nil || !notFound(errors.Unwrap(err)) || !digestPattern().MatchString(ref) {
		if err != nil && notFound(errors.Unwrap(err)) {
			return Manifest{}, client.Errorf(taxonomy.KindPrecondition, "", "no checkpoint %q in s3://%s/%s", ref, s.Bucket, s.prefix())
		}
		return m, err
	}
	all, err := s.List(ctx)
	if err != nil {
		return Manifest{}, err
	}
	for _, m := range all {
		if m.Digest == ref {
			return m, nil
		}
	}
	return Manifest{}, client.Errorf(taxonomy.KindPrecondition, "", "no checkpoint of digest %s in s3://%s/%s", ref, s.Bucket, s.prefix())
}

// getKey reads and decodes one manifest; a missing key's error wraps the
// SDK's so notFound(errors.Unwrap(err)) tells it.
func (s *Store) getKey(ctx context.Context, key string) (Manifest, error) {
	out, err := s.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	if err != nil {
		return Manifest{}, fmt.Errorf("reading %s: %w", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, MaxManifestBytes+1))
	if err != nil {
		return Manifest{}, s.platformErr("reading the manifest "+key, err)
	}
	return decodeManifest(b)
}

// List is every checkpoint's manifest, newest first. A manifest that does
// not decode is skipped, not fatal: one foreign key must not hide the rest.
func (s *Store) List(ctx context.Context) ([]Manifest, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var out []Manifest
	p := s3.NewListObjectsV2Paginator(s.S3, &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket), Prefix: aws.String(s.prefix() + "manifests/")})
	for pages := 0; p.HasMorePages() && pages < 10000; pages++ {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.platformErr("listing checkpoints", err)
		}
		for _, o := range page.Contents {
			m, err := s.getKey(ctx, aws.ToString(o.Key))
			if err != nil {
				continue
			}
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt > out[j].CreatedAt })
	return out, nil
}

// Remove deletes a checkpoint's manifest by name or digest, and its object
// when no other manifest names the same digest. It reports the keys it
// deleted.
func (s *Store) Remove(ctx context.Context, ref string) ([]string, error) {
	m, err := s.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	key := s.manifestKey(m)
	if _, err := s.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)}); err != nil {
		return nil, s.platformErr("removing "+key, err)
	}
	deleted := []string{key}
	rest, err := s.List(ctx)
	if err != nil {
		return deleted, err
	}
	for _, o := range rest {
		if o.Digest == m.Digest {
			return deleted, nil
		}
	}
	obj := s.objectKey(m.Digest)
	if _, err := s.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(obj)}); err != nil {
		return deleted, s.platformErr("removing "+obj, err)
	}
	return append(deleted, obj), nil
}
