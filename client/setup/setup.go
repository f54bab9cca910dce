package setup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/setupapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Call is one request setup sends, or in a dry run would send.
type Call struct {
	Service  string // "s3", "iam"
	Op       string // the operation's name, e.g. "CreateRole"
	Target   string // the bucket or role it acts on
	Mutating bool   // it changes the account
	Sent     bool   // false for a mutating call a dry run held back
}

func (c Call) String() string {
	verb := "read"
	switch {
	case c.Mutating && c.Sent:
		verb = "change"
	case c.Mutating:
		verb = "would change (dry run)"
	}
	return fmt.Sprintf("%s %s:%s %s", verb, c.Service, c.Op, c.Target)
}

// Options configure one setup, destroy or check.
type Options struct {
	IAM     *iam.Client
	S3      *s3.Client
	Account string // the caller's account id
	Region  string
	Prefix  string // empty is setupapi.DefaultPrefix
	DryRun  bool
	Log     func(Call) // sees each call before it is sent; nil ignores
}

// Names are the resources' names for one prefix, account and region.
type Names struct {
	Bucket        string
	BuildRole     string
	ExecutionRole string
}

// vars fills api/setup.yaml's placeholders.
func (o *Options) vars(bucket string) *strings.Replacer {
	prefix := o.Prefix
	if prefix == "" {
		prefix = setupapi.DefaultPrefix
	}
	return strings.NewReplacer("${Prefix}", prefix, "${Account}", o.Account, "${Region}", o.Region, "${Partition}", partition(o.Region), "${Bucket}", bucket)
}

func partition(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	}
	return "aws"
}

// Names are the bucket's and roles' names these options make.
func (o *Options) Names() Names {
	bucket := o.vars("").Replace(setupapi.BucketName)
	v := o.vars(bucket)
	n := Names{Bucket: bucket}
	for _, r := range setupapi.Roles {
		switch r.ID {
		case setupapi.RoleBuild:
			n.BuildRole = v.Replace(r.Name)
		case setupapi.RoleExecution:
			n.ExecutionRole = v.Replace(r.Name)
		}
	}
	return n
}

// RoleARN is a role's ARN in the options' account.
func (o *Options) RoleARN(name string) string {
	return "arn:" + partition(o.Region) + ":iam::" + o.Account + ":role/" + name
}

// EnvVar is one line to export.
type EnvVar struct{ Name, Value string }

// Env is what later commands read: the bucket, both role ARNs and the region.
func (o *Options) Env() []EnvVar {
	n := o.Names()
	return []EnvVar{
		{setupapi.BucketEnv, n.Bucket},
		{envOf(setupapi.RoleBuild), o.RoleARN(n.BuildRole)},
		{envOf(setupapi.RoleExecution), o.RoleARN(n.ExecutionRole)},
		{"AWS_REGION", o.Region},
	}
}

func envOf(id string) string {
	for _, r := range setupapi.Roles {
		if r.ID == id {
			return r.Env
		}
	}
	return ""
}

// TrustPolicy is the trust policy both roles carry.
func (o *Options) TrustPolicy() string {
	v := o.vars("")
	return mustJSON(map[string]any{
		"Version": "2012-10-17",
		"Statement": []any{map[string]any{
			"Effect":    "Allow",
			"Principal": map[string]any{"Service": setupapi.ServicePrincipal},
			"Action":    setupapi.TrustActions,
			"Condition": map[string]any{setupapi.TrustConditionTest: map[string]any{setupapi.TrustConditionKey: v.Replace(setupapi.TrustConditionValue)}},
		}},
	})
}

// RolePolicy is a role's inline policy document.
func (o *Options) RolePolicy(r setupapi.Role) string {
	v := o.vars(o.Names().Bucket)
	var stmts []any
	for _, st := range r.Statements {
		res := make([]string, len(st.Resources))
		for i, s := range st.Resources {
			res[i] = v.Replace(s)
		}
		stmts = append(stmts, map[string]any{"Sid": st.Sid, "Effect": "Allow", "Action": st.Actions, "Resource": res})
	}
	return mustJSON(map[string]any{"Version": "2012-10-17", "Statement": stmts})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// sameJSON compares two JSON documents by value; IAM answers documents
// URL-encoded, so an encoded one is decoded first.
func sameJSON(a, b string) bool {
	if d, err := url.QueryUnescape(a); err == nil && !strings.HasPrefix(strings.TrimSpace(a), "{") {
		a = d
	}
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func tagged(key, value *string) bool {
	return aws.ToString(key) == setupapi.TagKey && aws.ToString(value) == setupapi.TagValue
}

// errCode is an AWS error's code, "" for none.
func errCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func missing(err error) bool {
	switch errCode(err) {
	case "NoSuchEntity", "NotFound", "NoSuchBucket", "404":
		return true
	}
	var nf *s3types.NotFound
	var ne *iamtypes.NoSuchEntityException
	return errors.As(err, &nf) || errors.As(err, &ne)
}

// Result is what Apply or Destroy did.
type Result struct {
	Names   Names
	Env     []EnvVar
	Calls   []Call
	Changed int // mutating calls sent (or, in a dry run, held back)
}

type run struct {
	o   *Options
	ctx context.Context
	res *Result
	// What claim read: whether the bucket exists, and each existing role
	// by id (absent: no such role). Every one that exists is this tool's.
	bucketExists bool
	roles        map[string]*iamtypes.Role
}

// claim reads, before any change, which of the resources exist, and
// refuses when one that does is not this tool's: a run that stops there has
// changed nothing.
func (r *run) claim() error {
	o, name := r.o, r.res.Names.Bucket
	r.bucketExists = true
	err := r.call(Call{Service: "s3", Op: "HeadBucket", Target: name}, func() error {
		_, err := o.S3.HeadBucket(r.ctx, &s3.HeadBucketInput{Bucket: &name})
		if missing(err) {
			r.bucketExists = false
			return nil
		}
		return err
	})
	if err != nil {
		return failed("HeadBucket", name, err)
	}
	if r.bucketExists {
		ours := false
		err := r.call(Call{Service: "s3", Op: "GetBucketTagging", Target: name}, func() error {
			out, err := o.S3.GetBucketTagging(r.ctx, &s3.GetBucketTaggingInput{Bucket: &name})
			if errCode(err) == "NoSuchTagSet" {
				return nil
			}
			for _, t := range outTags(out) {
				ours = ours || tagged(t.Key, t.Value)
			}
			return err
		})
		if err != nil {
			return failed("GetBucketTagging", name, err)
		}
		if !ours {
			return foreign("bucket", name)
		}
	}
	r.roles = map[string]*iamtypes.Role{}
	for _, role := range setupapi.Roles {
		rn := o.vars(name).Replace(role.Name)
		var got *iamtypes.Role
		err := r.call(Call{Service: "iam", Op: "GetRole", Target: rn}, func() error {
			out, err := o.IAM.GetRole(r.ctx, &iam.GetRoleInput{RoleName: &rn})
			if missing(err) {
				return nil
			}
			if err == nil {
				got = out.Role
			}
			return err
		})
		if err != nil {
			return failed("GetRole", rn, err)
		}
		if got == nil {
			continue
		}
		ours, err := r.roleTagged(rn)
		if err != nil {
			return err
		}
		if !ours {
			return foreign("role", rn)
		}
		r.roles[role.ID] = got
	}
	return nil
}

// call reports c and runs f unless c mutates in a dry run.
func (r *run) call(c Call, f func() error) error {
	c.Sent = !c.Mutating || !r.o.DryRun
	if c.Mutating {
		r.res.Changed++
	}
	r.res.Calls = append(r.res.Calls, c)
	if r.o.Log != nil {
		r.o.Log(c)
	}
	if !c.Sent {
		return nil
	}
	if err := f(); err != nil {
		return err
	}
	return nil
}

func foreign(what, name string) error {
	return client.Errorf(taxonomy.KindPrecondition, "", "%s %s exists and does not carry the tag %s=%s: it is not this tool's, so setup leaves it alone; choose another --prefix", what, name, setupapi.TagKey, setupapi.TagValue)
}

func failed(op, target string, err error) error {
	return client.Errorf(client.KindOf(err), "", "%s %s: %w", op, target, err)
}

// Apply makes what is missing and repairs what differs.
func Apply(ctx context.Context, o Options) (*Result, error) {
	r := &run{o: &o, ctx: ctx, res: &Result{Names: o.Names(), Env: o.Env()}}
	if err := r.claim(); err != nil {
		return r.res, err
	}
	if err := r.bucket(); err != nil {
		return r.res, err
	}
	for _, role := range setupapi.Roles {
		if err := r.role(role); err != nil {
			return r.res, err
		}
	}
	return r.res, nil
}

func (r *run) bucket() error {
	o, name := r.o, r.res.Names.Bucket
	exists := r.bucketExists
	if !exists {
		err := r.call(Call{Service: "s3", Op: "CreateBucket", Target: name, Mutating: true}, func() error {
			in := &s3.CreateBucketInput{Bucket: &name}
			if o.Region != "us-east-1" {
				in.CreateBucketConfiguration = &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraint(o.Region)}
			}
			_, err := o.S3.CreateBucket(r.ctx, in)
			return err
		})
		if err != nil {
			return failed("CreateBucket", name, err)
		}
		err = r.call(Call{Service: "s3", Op: "PutBucketTagging", Target: name, Mutating: true}, func() error {
			_, err := o.S3.PutBucketTagging(r.ctx, &s3.PutBucketTaggingInput{Bucket: &name, Tagging: &s3types.Tagging{TagSet: []s3types.Tag{{Key: aws.String(setupapi.TagKey), Value: aws.String(setupapi.TagValue)}}}})
			return err
		})
		if err != nil {
			return failed("PutBucketTagging", name, err)
		}
	}
	// Each setting: read it (a bucket just made has none worth reading),
	// and write it only when it differs.
	for _, s := range bucketSettings(name) {
		ok := false
		if exists {
			err := r.call(Call{Service: "s3", Op: s.get, Target: name}, func() error {
				var err error
				ok, err = s.check(r.ctx, o.S3)
				if missing(err) || strings.HasPrefix(errCode(err), "NoSuch") || strings.HasSuffix(errCode(err), "NotFoundError") {
					return nil
				}
				return err
			})
			if err != nil {
				return failed(s.get, name, err)
			}
		}
		if ok {
			continue
		}
		if err := r.call(Call{Service: "s3", Op: s.put, Target: name, Mutating: true}, func() error { return s.apply(r.ctx, o.S3) }); err != nil {
			return failed(s.put, name, err)
		}
	}
	return nil
}

func outTags(out *s3.GetBucketTaggingOutput) []s3types.Tag {
	if out == nil {
		return nil
	}
	return out.TagSet
}

// bucketSetting is one of the bucket's settings: how to read and check it,
// and how to write it.
type bucketSetting struct {
	name, get, put string
	check          func(context.Context, *s3.Client) (bool, error)
	apply          func(context.Context, *s3.Client) error
}

func bucketSettings(name string) []bucketSetting {
	return []bucketSetting{
		{
			name: "encryption", get: "GetBucketEncryption", put: "PutBucketEncryption",
			check: func(ctx context.Context, c *s3.Client) (bool, error) {
				out, err := c.GetBucketEncryption(ctx, &s3.GetBucketEncryptionInput{Bucket: &name})
				if err != nil {
					return false, err
				}
				for _, rule := range out.ServerSideEncryptionConfiguration.Rules {
					if d := rule.ApplyServerSideEncryptionByDefault; d != nil && string(d.SSEAlgorithm) == setupapi.BucketSSEAlgorithm {
						return true, nil
					}
				}
				return false, nil
			},
			apply: func(ctx context.Context, c *s3.Client) error {
				_, err := c.PutBucketEncryption(ctx, &s3.PutBucketEncryptionInput{Bucket: &name, ServerSideEncryptionConfiguration: &s3types.ServerSideEncryptionConfiguration{
					Rules: []s3types.ServerSideEncryptionRule{{ApplyServerSideEncryptionByDefault: &s3types.ServerSideEncryptionByDefault{SSEAlgorithm: s3types.ServerSideEncryption(setupapi.BucketSSEAlgorithm)}}},
				}})
				return err
			},
		},
		{
			name: "public-access-block", get: "GetPublicAccessBlock", put: "PutPublicAccessBlock",
			check: func(ctx context.Context, c *s3.Client) (bool, error) {
				out, err := c.GetPublicAccessBlock(ctx, &s3.GetPublicAccessBlockInput{Bucket: &name})
				if err != nil {
					return false, err
				}
				p := out.PublicAccessBlockConfiguration
				return p != nil && aws.ToBool(p.BlockPublicAcls) && aws.ToBool(p.BlockPublicPolicy) && aws.ToBool(p.IgnorePublicAcls) && aws.ToBool(p.RestrictPublicBuckets), nil
			},
			apply: func(ctx context.Context, c *s3.Client) error {
				_, err := c.PutPublicAccessBlock(ctx, &s3.PutPublicAccessBlockInput{Bucket: &name, PublicAccessBlockConfiguration: &s3types.PublicAccessBlockConfiguration{
					BlockPublicAcls: aws.Bool(true), BlockPublicPolicy: aws.Bool(true), IgnorePublicAcls: aws.Bool(true), RestrictPublicBuckets: aws.Bool(true),
				}})
				return err
			},
		},
		{
			name: "lifecycle", get: "GetBucketLifecycleConfiguration", put: "PutBucketLifecycleConfiguration",
			check: func(ctx context.Context, c *s3.Client) (bool, error) {
				out, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: &name})
				if err != nil {
					return false, err
				}
				for _, rule := range out.Rules {
					if aws.ToString(rule.ID) == setupapi.BucketLifecycleRuleID && rule.Status == s3types.ExpirationStatusEnabled &&
						rule.Expiration != nil && aws.ToInt32(rule.Expiration.Days) == setupapi.BucketExpireAfterDays {
						return true, nil
					}
				}
				return false, nil
			},
			apply: func(ctx context.Context, c *s3.Client) error {
				_, err := c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: &name, LifecycleConfiguration: &s3types.BucketLifecycleConfiguration{
					Rules: []s3types.LifecycleRule{{
						ID: aws.String(setupapi.BucketLifecycleRuleID), Status: s3types.ExpirationStatusEnabled,
						Filter:                         &s3types.LifecycleRuleFilter{Prefix: aws.String("")},
						Expiration:                     &s3types.LifecycleExpiration{Days: aws.Int32(setupapi.BucketExpireAfterDays)},
						AbortIncompleteMultipartUpload: &s3types.AbortIncompleteMultipartUpload{DaysAfterInitiation: aws.Int32(1)},
					}},
				}})
				return err
			},
		},
	}
}

func (r *run) role(role setupapi.Role) error {
	o := r.o
	name := o.vars(r.res.Names.Bucket).Replace(role.Name)
	got := r.roles[role.ID]
	trust, policy := o.TrustPolicy(), o.RolePolicy(role)
	if got == nil {
		err := r.call(Call{Service: "iam", Op: "CreateRole", Target: name, Mutating: true}, func() error {
			_, err := o.IAM.CreateRole(r.ctx, &iam.CreateRoleInput{RoleName: &name, AssumeRolePolicyDocument: &trust, Description: aws.String(role.Doc),
				Tags: []iamtypes.Tag{{Key: aws.String(setupapi.TagKey), Value: aws.String(setupapi.TagValue)}}})
			return err
		})
		if err != nil {
			return failed("CreateRole", name, err)
		}
	} else {
		if !sameJSON(aws.ToString(got.AssumeRolePolicyDocument), trust) {
			err := r.call(Call{Service: "iam", Op: "UpdateAssumeRolePolicy", Target: name, Mutating: true}, func() error {
				_, err := o.IAM.UpdateAssumeRolePolicy(r.ctx, &iam.UpdateAssumeRolePolicyInput{RoleName: &name, PolicyDocument: &trust})
				return err
			})
			if err != nil {
				return failed("UpdateAssumeRolePolicy", name, err)
			}
		}
	}
	same := false
	if got != nil {
		err := r.call(Call{Service: "iam", Op: "GetRolePolicy", Target: name + "/" + role.PolicyName}, func() error {
			out, err := o.IAM.GetRolePolicy(r.ctx, &iam.GetRolePolicyInput{RoleName: &name, PolicyName: aws.String(role.PolicyName)})
			if missing(err) {
				return nil
			}
			if err == nil {
				same = sameJSON(aws.ToString(out.PolicyDocument), policy)
			}
			return err
		})
		if err != nil {
			return failed("GetRolePolicy", name, err)
		}
	}
	if same {
		return nil
	}
	err := r.call(Call{Service: "iam", Op: "PutRolePolicy", Target: name + "/" + role.PolicyName, Mutating: true}, func() error {
		_, err := o.IAM.PutRolePolicy(r.ctx, &iam.PutRolePolicyInput{RoleName: &name, PolicyName: aws.String(role.PolicyName), PolicyDocument: &policy})
		return err
	})
	if err != nil {
		return failed("PutRolePolicy", name, err)
	}
	return nil
}

func (r *run) roleTagged(name string) (bool, error) {
	ours := false
	err := r.call(Call{Service: "iam", Op: "ListRoleTags", Target: name}, func() error {
		out, err := r.o.IAM.ListRoleTags(r.ctx, &iam.ListRoleTagsInput{RoleName: &name})
		if err != nil {
			return err
		}
		for _, t := range out.Tags {
			ours = ours || tagged(t.Key, t.Value)
		}
		return nil
	})
	if err != nil {
		return false, failed("ListRoleTags", name, err)
	}
	return ours, nil
}

// Destroy removes what Apply made: its inline policies, the roles once
// nothing else is attached, and the bucket with the artifacts in it. A
// resource without this tool's tag is left alone and named.
func Destroy(ctx context.Context, o Options) (*Result, error) {
	r := &run{o: &o, ctx: ctx, res: &Result{Names: o.Names(), Env: o.Env()}}
	if err := r.claim(); err != nil {
		return r.res, err
	}
	for _, role := range setupapi.Roles {
		if err := r.destroyRole(role); err != nil {
			return r.res, err
		}
	}
	return r.res, r.destroyBucket()
}

func (r *run) destroyRole(role setupapi.Role) error {
	o := r.o
	name := o.vars(r.res.Names.Bucket).Replace(role.Name)
	if r.roles[role.ID] == nil {
		return nil
	}
	var err error
	err = r.call(Call{Service: "iam", Op: "DeleteRolePolicy", Target: name + "/" + role.PolicyName, Mutating: true}, func() error {
		_, err := o.IAM.DeleteRolePolicy(r.ctx, &iam.DeleteRolePolicyInput{RoleName: &name, PolicyName: aws.String(role.PolicyName)})
		if missing(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return failed("DeleteRolePolicy", name, err)
	}
	err = r.call(Call{Service: "iam", Op: "DeleteRole", Target: name, Mutating: true}, func() error {
		_, err := o.IAM.DeleteRole(r.ctx, &iam.DeleteRoleInput{RoleName: &name})
		return err
	})
	if errCode(err) == "DeleteConflict" {
		return client.Errorf(taxonomy.KindPrecondition, "", "role %s still has policies setup did not attach; it is left, with them: %w", name, err)
	}
	if err != nil {
		return failed("DeleteRole", name, err)
	}
	return nil
}

func (r *run) destroyBucket() error {
	o, name := r.o, r.res.Names.Bucket
	if !r.bucketExists {
		return nil
	}
	// The bucket is this tool's, so every object in it is an artifact a
	// build of this tool uploaded.
	keys, err := r.listObjects(name)
	if err != nil {
		return err
	}
	for _, k := range keys {
		err := r.call(Call{Service: "s3", Op: "DeleteObject", Target: name + "/" + k, Mutating: true}, func() error {
			_, err := o.S3.DeleteObject(r.ctx, &s3.DeleteObjectInput{Bucket: &name, Key: aws.String(k)})
			return err
		})
		if err != nil {
			return failed("DeleteObject", name+"/"+k, err)
		}
	}
	err = r.call(Call{Service: "s3", Op: "DeleteBucket", Target: name, Mutating: true}, func() error {
		_, err := o.S3.DeleteBucket(r.ctx, &s3.DeleteBucketInput{Bucket: &name})
		return err
	})
	if err != nil {
		return failed("DeleteBucket", name, err)
	}
	return nil
}

func (r *run) listObjects(bucket string) ([]string, error) {
	var keys []string
	err := r.call(Call{Service: "s3", Op: "ListObjectsV2", Target: bucket}, func() error {
		pg := s3.NewListObjectsV2Paginator(r.o.S3, &s3.ListObjectsV2Input{Bucket: &bucket})
		for pages := 0; pg.HasMorePages() && pages < 1000; pages++ {
			out, err := pg.NextPage(r.ctx)
			if err != nil {
				return err
			}
			for _, obj := range out.Contents {
				keys = append(keys, aws.ToString(obj.Key))
			}
		}
		return nil
	})
	if err != nil {
		return nil, failed("ListObjectsV2", bucket, err)
	}
	return keys, nil
}
