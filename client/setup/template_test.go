package setup

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/setupapi"
)

// cfnResolve turns the template's Fn::Sub values into the strings setup
// sends for o, leaving other values as they are.
func cfnResolve(v any, o *Options) any {
	pseudo := strings.NewReplacer("${AWS::AccountId}", o.Account, "${AWS::Region}", o.Region, "${AWS::Partition}", "aws",
		"${ArtifactBucket}", o.Names().Bucket, "${Prefix}", setupapi.DefaultPrefix)
	switch t := v.(type) {
	case map[string]any:
		if sub, ok := t["Fn::Sub"].(string); ok && len(t) == 1 {
			return pseudo.Replace(sub)
		}
		out := map[string]any{}
		for k, e := range t {
			out[k] = cfnResolve(e, o)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cfnResolve(e, o)
		}
		return out
	}
	return v
}

// Catches: the CloudFormation template and the setup code granting
// different things, trusting a different principal or naming different
// resources: they are generated from one declaration, and this holds the
// two renderings to each other (a hand edit of either output is the drift
// gate's).
func TestTemplateAndSetupAgree(t *testing.T) {
	raw, err := os.ReadFile("../../docs/setup/microvm-setup.cfn.json")
	if err != nil {
		t.Fatal(err)
	}
	var tmpl struct {
		Resources map[string]struct {
			Type       string
			Properties map[string]any
		}
	}
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	o := &Options{Account: "123456789012", Region: "us-east-1"}
	decode := func(s string) any {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	same := func(what string, a, b any) {
		t.Helper()
		x, _ := json.Marshal(a)
		y, _ := json.Marshal(b)
		if string(x) != string(y) {
			t.Fatalf("%s differs:\ntemplate %s\nsetup    %s", what, x, y)
		}
	}
	bucket := tmpl.Resources["ArtifactBucket"].Properties
	same("bucket name", cfnResolve(bucket["BucketName"], o), o.Names().Bucket)
	roles := 0
	for logical, r := range tmpl.Resources {
		if r.Type != "AWS::IAM::Role" {
			continue
		}
		roles++
		p := cfnResolve(r.Properties, o).(map[string]any)
		var role *setupapi.Role
		for i := range setupapi.Roles {
			if strings.EqualFold(setupapi.Roles[i].ID+"Role", logical) {
				role = &setupapi.Roles[i]
			}
		}
		if role == nil {
			t.Fatalf("template role %s is none of setup's", logical)
		}
		name := o.vars(o.Names().Bucket).Replace(role.Name)
		same(logical+" name", p["RoleName"], name)
		same(logical+" trust", p["AssumeRolePolicyDocument"], decode(o.TrustPolicy()))
		pol := p["Policies"].([]any)[0].(map[string]any)
		same(logical+" policy name", pol["PolicyName"], role.PolicyName)
		same(logical+" policy", pol["PolicyDocument"], decode(o.RolePolicy(*role)))
	}
	if roles != len(setupapi.Roles) {
		t.Fatalf("the template has %d roles, setup %d", roles, len(setupapi.Roles))
	}
}
