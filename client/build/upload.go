package build

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Uploader puts the artifact where CreateMicrovmImage's codeArtifact.uri can
// read it and returns that s3:// URI.
type Uploader interface {
	Upload(ctx context.Context, key string, body []byte, progress func(sent, total int64)) (uri string, err error)
}

// S3Uploader uploads through aws-sdk-go-v2's S3 transfer manager, which
// switches to a multipart upload for large artifacts and reports progress.
type S3Uploader struct {
	TM     *transfermanager.Client
	Bucket string
}

// NewS3Uploader wraps an S3 client (s3.NewFromConfig's) for bucket.
func NewS3Uploader(s3c transfermanager.S3APIClient, bucket string) *S3Uploader {
	return &S3Uploader{TM: transfermanager.New(s3c), Bucket: bucket}
}

type progressFunc func(sent, total int64)

func (f progressFunc) OnObjectBytesTransferred(_ context.Context, e *transfermanager.ObjectBytesTransferredEvent) {
	f(e.BytesTransferred, e.TotalBytes)
}

// Upload implements Uploader.
func (u *S3Uploader) Upload(ctx context.Context, key string, body []byte, progress func(sent, total int64)) (string, error) {
	if u.Bucket == "" {
		return "", client.Errorf(taxonomy.KindInvalidArg, "", "no artifact bucket was given")
	}
	in := &transfermanager.UploadObjectInput{
		Bucket: aws.String(u.Bucket), Key: aws.String(key),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
	}
	var opts []func(*transfermanager.Options)
	if progress != nil {
		opts = append(opts, func(o *transfermanager.Options) {
			o.ObjectProgressListeners.ObjectBytesTransferred = append(o.ObjectProgressListeners.ObjectBytesTransferred, progressFunc(progress))
		})
	}
	if _, err := u.TM.UploadObject(ctx, in, opts...); err != nil {
		return "", client.Errorf(taxonomy.KindPlatform, "", "uploading the artifact to s3://%s/%s: %w", u.Bucket, key, err)
	}
	return fmt.Sprintf("s3://%s/%s", u.Bucket, key), nil
}

// DirUploader is the local artifact store the emulator reads: it writes the
// artifact under Dir and returns its file:// URI, which only an emulator on
// this machine can read. S3 stays the path on AWS.
type DirUploader struct {
	Dir string
}

// Upload implements Uploader.
func (u DirUploader) Upload(_ context.Context, key string, body []byte, progress func(sent, total int64)) (string, error) {
	if u.Dir == "" {
		return "", client.Errorf(taxonomy.KindInvalidArg, "", "no local artifact directory was given")
	}
	dir, err := filepath.Abs(u.Dir)
	if err != nil {
		return "", client.Errorf(taxonomy.KindPrecondition, "", "the artifact directory %s: %w", u.Dir, err)
	}
	path := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+key)))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", client.Errorf(taxonomy.KindPrecondition, "", "the artifact directory: %w", err)
	}
	if err := os.WriteFile(path, body, 0o600); err != nil {
		return "", client.Errorf(taxonomy.KindPrecondition, "", "writing the artifact: %w", err)
	}
	if progress != nil {
		progress(int64(len(body)), int64(len(body)))
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String(), nil
}

// PresetURI is an Uploader for an artifact already in place (--artifact-uri):
// it uploads nothing and returns URI.
type PresetURI string

// Upload implements Uploader.
func (p PresetURI) Upload(context.Context, string, []byte, func(sent, total int64)) (string, error) {
	return string(p), nil
}
