package iam

import (
	"net/url"
	"testing"
)

// FuzzIAMInput feeds IAM's form reader and policy grammar arbitrary
// bodies: neither may panic, a form it accepts names only members the
// action declares, and a read list never passes IAM's index bound.
func FuzzIAMInput(f *testing.F) {
	f.Add("CreateRole", "RoleName=r&AssumeRolePolicyDocument=%7B%7D&Tags.member.1.Key=k&Tags.member.1.Value=v")
	f.Add("SimulatePrincipalPolicy", "PolicySourceArn=arn:aws:iam::123456789012:role/r&ActionNames.member.1=s3:GetObject&ResourceArns.member.2=x")
	f.Add("PutRolePolicy", "RoleName=r&PolicyName=p&PolicyDocument=%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%5D%7D")
	f.Add("TagRole", "RoleName=r&Tags.member.999999999999.Key=k")
	f.Fuzz(func(t *testing.T, action, body string) {
		if _, ok := iamActions[action]; !ok {
			return
		}
		form, err := url.ParseQuery(body)
		if err != nil {
			return
		}
		in, fail := parseIAMInput(action, form)
		if fail == nil {
			for k := range in.scalar {
				if _, ok := iamActions[action][k]; !ok {
					t.Fatalf("accepted member %s", k)
				}
			}
			for _, l := range in.lists {
				if len(l) > 1000 {
					t.Fatalf("a list of %d", len(l))
				}
			}
		}
		for _, doc := range form["PolicyDocument"] {
			_, _ = parsePolicy(doc, false)
			_, _ = parsePolicy(doc, true)
		}
	})
}
