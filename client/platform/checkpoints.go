package platform

import (
	"context"
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/gen/taxonomy"
)

// LocalCheckpointBucket is the bucket an emulator's S3 slice keeps
// checkpoints in when no --bucket names one: a local build keeps its
// artifact in a directory store, not S3, so there is no build bucket to
// share, and a fixed name lets separate processes against one `microvm
// emulator` find each other's checkpoints.
const LocalCheckpointBucket = "microvm-checkpoints"

// CheckpointStore is where this platform's checkpoints live: bucket on
// AWS (required there), an emulator's S3 slice locally (bucket, or
// LocalCheckpointBucket, made if missing). A local control plane whose S3
// resolves to AWS is refused, as the build's artifact upload is.
func (p *Platform) CheckpointStore(ctx context.Context, bucket string) (*checkpoint.Store, error) {
	bucket = strings.TrimSpace(bucket)
	if err := p.localService("S3", p.s3Endpoint, "AWS_ENDPOINT_URL_S3"); err != nil {
		return nil, err
	}
	if bucket == "" && !p.local {
		return nil, client.Errorf(taxonomy.KindPrecondition, "",
			"no --bucket (MICROVM_BUCKET): checkpoints are kept in an S3 bucket on AWS; `microvm setup` makes one")
	}
	s3c, err := p.s3Client(ctx)
	if err != nil {
		return nil, err
	}
	if bucket == "" {
		bucket = LocalCheckpointBucket
	}
	if p.local {
		if p.emu != nil && p.emu.CreateBucket != nil {
			p.emu.CreateBucket(bucket)
		} else if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			var owned *s3types.BucketAlreadyOwnedByYou
			var exists *s3types.BucketAlreadyExists
			if !errors.As(err, &owned) && !errors.As(err, &exists) {
				return nil, client.Errorf(taxonomy.KindPrecondition, "", "the emulator's S3 slice: CreateBucket %s: %w", bucket, err)
			}
		}
	}
	return &checkpoint.Store{S3: s3c, Bucket: bucket}, nil
}
