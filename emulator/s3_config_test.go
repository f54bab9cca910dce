package emulator

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Catches: a bucket setting the SDK cannot read back as it wrote it (an
// element named off the model, a rule or flag dropped), a Get of a setting
// never made that does not answer S3's own NoSuch* code, a listing that
// pages wrong or leaks another prefix, and log groups listed past their
// prefix.
func TestS3BucketSettingsAndListing(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	c := s3Client(base)
	b := aws.String("cfg")
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: b}); err != nil {
		t.Fatal(err)
	}
	for name, get := range map[string]func() error{
		"NoSuchTagSet": func() error { _, err := c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: b}); return err },
		"NoSuchPublicAccessBlockConfiguration": func() error {
			_, err := c.GetPublicAccessBlock(ctx, &s3.GetPublicAccessBlockInput{Bucket: b})
			return err
		},
		"NoSuchLifecycleConfiguration": func() error {
			_, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: b})
			return err
		},
	} {
		if code := apiCode(t, get()); code != name {
			t.Fatalf("unset: %s, want %s", code, name)
		}
	}
	// A bucket never given an encryption answers SSE-S3, as S3 does.
	enc, err := c.GetBucketEncryption(ctx, &s3.GetBucketEncryptionInput{Bucket: b})
	if err != nil || enc.ServerSideEncryptionConfiguration.Rules[0].ApplyServerSideEncryptionByDefault.SSEAlgorithm != s3types.ServerSideEncryptionAes256 {
		t.Fatalf("%v %v", enc, err)
	}
	if _, err := c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: b, Tagging: &s3types.Tagging{TagSet: []s3types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}}); err != nil {
		t.Fatal(err)
	}
	tags, err := c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: b})
	if err != nil || len(tags.TagSet) != 1 || aws.ToString(tags.TagSet[0].Value) != "v" {
		t.Fatalf("%v %v", tags, err)
	}
	if _, err := c.PutPublicAccessBlock(ctx, &s3.PutPublicAccessBlockInput{Bucket: b, PublicAccessBlockConfiguration: &s3types.PublicAccessBlockConfiguration{
		BlockPublicAcls: aws.Bool(true), BlockPublicPolicy: aws.Bool(true), IgnorePublicAcls: aws.Bool(false), RestrictPublicBuckets: aws.Bool(true)}}); err != nil {
		t.Fatal(err)
	}
	pab, err := c.GetPublicAccessBlock(ctx, &s3.GetPublicAccessBlockInput{Bucket: b})
	if err != nil || !aws.ToBool(pab.PublicAccessBlockConfiguration.BlockPublicAcls) || aws.ToBool(pab.PublicAccessBlockConfiguration.IgnorePublicAcls) {
		t.Fatalf("%v %v", pab, err)
	}
	if _, err := c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: b, LifecycleConfiguration: &s3types.BucketLifecycleConfiguration{
		Rules: []s3types.LifecycleRule{{ID: aws.String("old"), Status: s3types.ExpirationStatusEnabled, Filter: &s3types.LifecycleRuleFilter{Prefix: aws.String("")}, Expiration: &s3types.LifecycleExpiration{Days: aws.Int32(7)}}}}}); err != nil {
		t.Fatal(err)
	}
	lc, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: b})
	if err != nil || len(lc.Rules) != 1 || aws.ToString(lc.Rules[0].ID) != "old" || aws.ToInt32(lc.Rules[0].Expiration.Days) != 7 {
		t.Fatalf("%v %v", lc, err)
	}

	for _, k := range []string{"a/1", "a/2", "a/3", "b/1"} {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	pg := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: b, Prefix: aws.String("a/"), MaxKeys: aws.Int32(2)})
	for pages := 0; pg.HasMorePages() && pages < 10; pages++ {
		out, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	if !slices.Equal(keys, []string{"a/1", "a/2", "a/3"}) {
		t.Fatalf("listed %v", keys)
	}

	s.mu.Lock()
	s.logf("/aws/lambda-microvms/x", "build", "one")
	s.logf("/other/y", "s", "two")
	s.mu.Unlock()
	lcl := cloudwatchlogs.New(cloudwatchlogs.Options{Region: "us-east-1", Credentials: testCreds, BaseEndpoint: aws.String(base)})
	groups, err := lcl.DescribeLogGroups(ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String("/aws/lambda-microvms/")})
	if err != nil || len(groups.LogGroups) != 1 || aws.ToString(groups.LogGroups[0].LogGroupName) != "/aws/lambda-microvms/x" {
		t.Fatalf("%v %v", groups, err)
	}
}
