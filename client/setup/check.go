package setup

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/microvms/microvms/gen/setupapi"
)

// Check is one finding of CheckAccount: what was checked, whether it
// holds, what was found, and the fix when it does not.
type Check struct {
	Name   string
	OK     bool
	Detail string
	Remedy string
	// Advisory is set on a check whose miss need not stop a build: a
	// setting of a bucket setup did not make.
	Advisory bool
}

// Given names the resources to check, as the environment names them (a
// role by its ARN); empty ones are skipped.
type Given struct {
	Bucket           string
	BuildRoleARN     string
	ExecutionRoleARN string
}

const fixSetup = "microvm setup (it makes what is missing and repairs what differs)"

// CheckAccount checks the bucket and roles: each exists, carries the
// settings setup gives it, trusts the service, and (by IAM's policy
// simulation) allows what a build and a run need.
func CheckAccount(ctx context.Context, o Options, g Given) []Check {
	var out []Check
	if g.Bucket != "" {
		out = append(out, checkBucket(ctx, o, g.Bucket)...)
	}
	for _, role := range setupapi.Roles {
		arn := map[string]string{setupapi.RoleBuild: g.BuildRoleARN, setupapi.RoleExecution: g.ExecutionRoleARN}[role.ID]
		if arn != "" {
			out = append(out, checkRole(ctx, o, role, arn, g.Bucket)...)
		}
	}
	return out
}

func checkBucket(ctx context.Context, o Options, name string) []Check {
	label := "bucket " + name
	if _, err := o.S3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &name}); err != nil {
		if missing(err) {
			return []Check{{Name: "bucket-exists", Detail: label + " does not exist", Remedy: fixSetup + ", or export " + setupapi.BucketEnv + " naming one that does"}}
		}
		return []Check{{Name: "bucket-exists", Detail: label + ": " + err.Error(), Remedy: "check the credentials may s3:ListBucket it"}}
	}
	out := []Check{{Name: "bucket-exists", OK: true, Detail: label + " exists"}}
	// A bucket setup did not make (no tag) is the user's to configure: its
	// settings are reported, but a miss there does not fail the doctor.
	ours := false
	if tags, err := o.S3.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &name}); err == nil {
		for _, t := range tags.TagSet {
			ours = ours || tagged(t.Key, t.Value)
		}
	}
	for _, s := range bucketSettings(name) {
		ok, err := s.check(ctx, o.S3)
		c := Check{Name: "bucket-" + s.name, OK: ok && err == nil, Advisory: !ours}
		switch {
		case c.OK:
			c.Detail = "as setup sets it"
		case err != nil:
			c.Detail, c.Remedy = "not set: "+err.Error(), fixSetup
		default:
			c.Detail, c.Remedy = "set, but not as api/setup.yaml declares it", fixSetup
		}
		if c.Advisory && !c.OK {
			c.Remedy = "the bucket is not setup's (no " + setupapi.TagKey + " tag): set this on it yourself, or use the bucket microvm setup makes"
		}
		out = append(out, c)
	}
	return out
}

func roleName(arn string) string { return arn[strings.LastIndexByte(arn, '/')+1:] }

func checkRole(ctx context.Context, o Options, role setupapi.Role, arn, bucket string) []Check {
	label := role.ID + "-role"
	name := roleName(arn)
	exists := label + "-exists"
	got, err := o.IAM.GetRole(ctx, &iam.GetRoleInput{RoleName: &name})
	if err != nil {
		if missing(err) {
			return []Check{{Name: exists, Detail: "role " + name + " does not exist", Remedy: fixSetup + ", or export " + role.Env + " naming one that does"}}
		}
		return []Check{{Name: exists, Detail: "role " + name + ": " + err.Error(), Remedy: "check the credentials may iam:GetRole"}}
	}
	out := []Check{{Name: exists, OK: true, Detail: "role " + name + " exists"}}
	trust := Check{Name: label + "-trust"}
	if ok, why := trusts(aws.ToString(got.Role.AssumeRolePolicyDocument)); ok {
		trust.OK, trust.Detail = true, "trusts "+setupapi.ServicePrincipal+" to "+strings.Join(setupapi.TrustActions, ", ")
	} else {
		trust.Detail, trust.Remedy = why, fixSetup+" (it rewrites the trust policy of a role it made)"
	}
	out = append(out, trust)
	// A need names the bucket setup would make; the given bucket is the
	// one a build will read.
	oo := o
	v := oo.vars(bucket)
	if bucket == "" {
		v = oo.vars(oo.Names().Bucket)
	}
	var actions []string
	for _, n := range role.Needs {
		actions = append(actions, n.Action)
	}
	perm := Check{Name: label + "-permissions"}
	denied, err := simulate(ctx, o, arn, role.Needs, v)
	switch {
	case err != nil:
		perm.Detail, perm.Remedy = "simulating "+strings.Join(actions, ", ")+": "+err.Error(), "check the credentials may iam:SimulatePrincipalPolicy"
	case len(denied) > 0:
		perm.Detail, perm.Remedy = "not allowed: "+strings.Join(denied, "; "), fixSetup+" (it writes the inline policy "+role.PolicyName+")"
	default:
		perm.OK, perm.Detail = true, "allows "+strings.Join(actions, ", ")+" on what a "+map[string]string{setupapi.RoleBuild: "build", setupapi.RoleExecution: "run"}[role.ID]+" uses"
	}
	return append(out, perm)
}

// simulate asks IAM whether arn may do each need, and names the denied.
func simulate(ctx context.Context, o Options, arn string, needs []setupapi.Need, v *strings.Replacer) ([]string, error) {
	var denied []string
	for _, n := range needs {
		res := v.Replace(n.Resource)
		out, err := o.IAM.SimulatePrincipalPolicy(ctx, &iam.SimulatePrincipalPolicyInput{PolicySourceArn: &arn, ActionNames: []string{n.Action}, ResourceArns: []string{res}})
		if err != nil {
			return nil, err
		}
		for _, r := range out.EvaluationResults {
			if r.EvalDecision != "allowed" {
				denied = append(denied, fmt.Sprintf("%s on %s (%s)", n.Action, res, r.EvalDecision))
			}
		}
	}
	return denied, nil
}

// trusts reads a trust policy (URL-encoded, as IAM answers it) and says
// whether it lets the service principal assume the role.
func trusts(doc string) (bool, string) {
	if d, err := url.QueryUnescape(doc); err == nil {
		doc = d
	}
	var p struct {
		Statement []struct {
			Effect    string
			Principal struct{ Service any }
			Action    any
		}
	}
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		return false, "the trust policy does not parse: " + err.Error()
	}
	list := func(v any) []string {
		switch t := v.(type) {
		case string:
			return []string{t}
		case []any:
			var out []string
			for _, e := range t {
				if s, ok := e.(string); ok {
					out = append(out, s)
				}
			}
			return out
		}
		return nil
	}
	for _, st := range p.Statement {
		if st.Effect == "Allow" && slices.Contains(list(st.Principal.Service), setupapi.ServicePrincipal) && slices.Contains(list(st.Action), "sts:AssumeRole") {
			return true, ""
		}
	}
	return false, "the trust policy does not let " + setupapi.ServicePrincipal + " sts:AssumeRole"
}
