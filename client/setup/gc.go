package setup

import (
	"context"
	"sort"
	"strings"
	"time"

	"errors"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/setupapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The kinds of leftover gc finds.
const (
	KindImage        = "image"
	KindImageVersion = "image-version"
	KindLogGroup     = "log-group"
	KindArtifact     = "artifact"
	// KindCheckpoint is an object of a checkpoint (client/checkpoint keeps
	// them under CheckpointPrefix in the same bucket): named apart from a
	// build artifact so gc never deletes a checkpoint as one unseen.
	KindCheckpoint = "checkpoint"
)

// CheckpointPrefix is the key prefix client/checkpoint's Store uses by
// default.
const CheckpointPrefix = "checkpoints/"

// BuildLogGroupPrefix is where the service writes an image's build log
// (finding build-logs-location).
const BuildLogGroupPrefix = "/aws/lambda-microvms/"

// Leftover is one resource of this tool's still in the account.
type Leftover struct {
	Kind    string
	ID      string    // an image's ARN, "ARN@version", a log group's or object's name
	Created time.Time // zero when the service does not say
	Why     string    // "tag" or "ledger": how gc knows it is this tool's
}

// GCOptions configure FindLeftovers and Remove.
type GCOptions struct {
	Control *lambdamicrovms.Client
	Logs    *cloudwatchlogs.Client
	S3      *s3.Client // nil: no artifacts are looked for
	Bucket  string     // the artifact bucket setup made ("" for none)
	// Runs are the run ledger's records: their images and log groups are
	// this tool's even without a tag.
	Runs      []ledger.Run
	OlderThan time.Duration
	Now       time.Time
}

// FindLeftovers lists this tool's images (with their versions), their build
// log groups and the artifacts in its bucket, older than OlderThan. An
// image is this tool's by its tag or by the ledger; a log group only when
// it is an image of this tool's build log (named in the ledger, or of an
// image found here); an artifact only in a bucket carrying this tool's tag.
func FindLeftovers(ctx context.Context, o GCOptions) ([]Leftover, error) {
	old := func(t time.Time) bool { return o.OlderThan <= 0 || t.IsZero() || o.Now.Sub(t) >= o.OlderThan }
	ledgerImages, ledgerGroups := map[string]bool{}, map[string]bool{}
	for _, r := range o.Runs {
		if r.ImageOwned {
			ledgerImages[r.Image], ledgerImages[r.ImageARN] = true, true
		}
		if r.LogGroup != "" {
			ledgerGroups[r.LogGroup] = true
		}
	}
	delete(ledgerImages, "")
	var out []Leftover
	ourNames := map[string]bool{}
	pg := lambdamicrovms.NewListMicrovmImagesPaginator(o.Control, &lambdamicrovms.ListMicrovmImagesInput{})
	for pages := 0; pg.HasMorePages() && pages < 1000; pages++ {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, cplane.SDKError("ListMicrovmImages", err)
		}
		for _, im := range page.Items {
			arn, name := aws.ToString(im.ImageArn), aws.ToString(im.Name)
			why := ""
			if ledgerImages[name] || ledgerImages[arn] {
				why = "ledger"
			} else {
				tags, err := o.Control.ListTags(ctx, &lambdamicrovms.ListTagsInput{Resource: &arn})
				if err != nil {
					return nil, cplane.SDKError("ListTags", err)
				}
				if tags.Tags[setupapi.TagKey] == setupapi.TagValue {
					why = "tag"
				}
			}
			if why == "" {
				continue
			}
			ourNames[name] = true
			created := aws.ToTime(im.CreatedAt)
			if !old(created) {
				continue
			}
			out = append(out, Leftover{Kind: KindImage, ID: arn, Created: created, Why: why})
			vp := lambdamicrovms.NewListMicrovmImageVersionsPaginator(o.Control, &lambdamicrovms.ListMicrovmImageVersionsInput{ImageIdentifier: &arn})
			for vpages := 0; vp.HasMorePages() && vpages < 1000; vpages++ {
				vs, err := vp.NextPage(ctx)
				if err != nil {
					return nil, cplane.SDKError("ListMicrovmImageVersions", err)
				}
				for _, v := range vs.Items {
					out = append(out, Leftover{Kind: KindImageVersion, ID: arn + "@" + aws.ToString(v.ImageVersion), Created: aws.ToTime(v.CreatedAt), Why: why})
				}
			}
		}
	}
	if o.Logs != nil {
		lp := cloudwatchlogs.NewDescribeLogGroupsPaginator(o.Logs, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String(BuildLogGroupPrefix)})
		for pages := 0; lp.HasMorePages() && pages < 1000; pages++ {
			page, err := lp.NextPage(ctx)
			if err != nil {
				return nil, client.Errorf(client.KindOf(err), taxonomy.FindingBuildLogGroupSurvives, "DescribeLogGroups: %w", err)
			}
			for _, g := range page.LogGroups {
				name := aws.ToString(g.LogGroupName)
				why := ""
				switch {
				case ledgerGroups[name]:
					why = "ledger"
				case ourNames[strings.TrimPrefix(name, BuildLogGroupPrefix)]:
					why = "tag"
				}
				created := time.UnixMilli(aws.ToInt64(g.CreationTime))
				if why == "" || !old(created) {
					continue
				}
				out = append(out, Leftover{Kind: KindLogGroup, ID: name, Created: created, Why: why})
			}
		}
	}
	if o.S3 != nil && o.Bucket != "" {
		tags, err := o.S3.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &o.Bucket})
		ours := false
		if err == nil {
			for _, t := range tags.TagSet {
				ours = ours || tagged(t.Key, t.Value)
			}
		}
		if ours {
			lp := s3.NewListObjectsV2Paginator(o.S3, &s3.ListObjectsV2Input{Bucket: &o.Bucket})
			for pages := 0; lp.HasMorePages() && pages < 1000; pages++ {
				page, err := lp.NextPage(ctx)
				if err != nil {
					return nil, client.Errorf(client.KindOf(err), "", "ListObjectsV2 %s: %w", o.Bucket, err)
				}
				for _, obj := range page.Contents {
					if created := aws.ToTime(obj.LastModified); old(created) {
						kind := KindArtifact
						if strings.HasPrefix(aws.ToString(obj.Key), CheckpointPrefix) {
							kind = KindCheckpoint
						}
						out = append(out, Leftover{Kind: kind, ID: "s3://" + o.Bucket + "/" + aws.ToString(obj.Key), Created: created, Why: "tag"})
					}
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Remove deletes each leftover: an image with its versions (a version is
// gone with its image), a log group, an artifact. It goes on past a
// failure and returns the removed and the errors.
func Remove(ctx context.Context, o GCOptions, items []Leftover) (removed []Leftover, errs []error) {
	for _, it := range items {
		var err error
		switch it.Kind {
		case KindImageVersion:
			continue
		case KindImage:
			_, err = o.Control.DeleteMicrovmImage(ctx, &lambdamicrovms.DeleteMicrovmImageInput{ImageIdentifier: aws.String(it.ID)})
			err = cplane.SDKError("DeleteMicrovmImage", err)
		case KindLogGroup:
			_, err = o.Logs.DeleteLogGroup(ctx, &cloudwatchlogs.DeleteLogGroupInput{LogGroupName: aws.String(it.ID)})
			var nf *cwtypes.ResourceNotFoundException
			if errors.As(err, &nf) {
				err = nil
			}
		case KindArtifact, KindCheckpoint:
			bucket, key, _ := strings.Cut(strings.TrimPrefix(it.ID, "s3://"), "/")
			_, err = o.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key})
		}
		if err != nil {
			errs = append(errs, client.Errorf(client.KindOf(err), "", "deleting %s %s: %w", it.Kind, it.ID, err))
			continue
		}
		removed = append(removed, it)
		if it.Kind == KindImage {
			for _, v := range items {
				if v.Kind == KindImageVersion && strings.HasPrefix(v.ID, it.ID+"@") {
					removed = append(removed, v)
				}
			}
		}
	}
	return removed, errs
}
