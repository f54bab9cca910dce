package emulator

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/smithy-go"
)

func iamClient(t *testing.T) (*Server, *iam.Client, string) {
	t.Helper()
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s, iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: aws.String(base), Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")}), base
}

func iamCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

const testTrust = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}`

// Catches: a role answer the SDK cannot read (an unnamed result element),
// documents not URL-encoded as IAM answers them, a simulation that allows
// what no statement grants or denies what one does, a Deny that does not
// win, and a DeleteRole that drops a role with policies still on it.
func TestIAMRolesAndSimulation(t *testing.T) {
	ctx := context.Background()
	_, c, _ := iamClient(t)
	if _, err := c.CreateRole(ctx, &iam.CreateRoleInput{RoleName: aws.String("r"), AssumeRolePolicyDocument: aws.String(testTrust)}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String("r")})
	if err != nil || got.Role == nil || aws.ToString(got.Role.Arn) != "arn:aws:iam::123456789012:role/r" {
		t.Fatalf("%v %v", got, err)
	}
	if doc, _ := url.QueryUnescape(aws.ToString(got.Role.AssumeRolePolicyDocument)); doc != testTrust || aws.ToString(got.Role.AssumeRolePolicyDocument) == testTrust {
		t.Fatalf("the trust policy is answered URL-encoded: %q", aws.ToString(got.Role.AssumeRolePolicyDocument))
	}
	if _, err := c.CreateRole(ctx, &iam.CreateRoleInput{RoleName: aws.String("r"), AssumeRolePolicyDocument: aws.String(testTrust)}); iamCode(err) != "EntityAlreadyExists" {
		t.Fatalf("a second CreateRole: %v", err)
	}
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject","logs:*"],"Resource":["arn:aws:s3:::b/*","*"]},{"Effect":"Deny","Action":"logs:DeleteLogGroup","Resource":"*"}]}`
	if _, err := c.PutRolePolicy(ctx, &iam.PutRolePolicyInput{RoleName: aws.String("r"), PolicyName: aws.String("p"), PolicyDocument: aws.String(policy)}); err != nil {
		t.Fatal(err)
	}
	sim, err := c.SimulatePrincipalPolicy(ctx, &iam.SimulatePrincipalPolicyInput{PolicySourceArn: aws.String("arn:aws:iam::123456789012:role/r"),
		ActionNames: []string{"s3:GetObject", "s3:PutObject", "logs:PutLogEvents", "logs:DeleteLogGroup"}, ResourceArns: []string{"arn:aws:s3:::b/k"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"s3:GetObject": "allowed", "s3:PutObject": "implicitDeny", "logs:PutLogEvents": "allowed", "logs:DeleteLogGroup": "explicitDeny"}
	for _, r := range sim.EvaluationResults {
		if string(r.EvalDecision) != want[aws.ToString(r.EvalActionName)] {
			t.Fatalf("%s: %s, want %s", aws.ToString(r.EvalActionName), r.EvalDecision, want[aws.ToString(r.EvalActionName)])
		}
		delete(want, aws.ToString(r.EvalActionName))
	}
	if len(want) > 0 {
		t.Fatalf("not simulated: %v", want)
	}
	if _, err := c.DeleteRole(ctx, &iam.DeleteRoleInput{RoleName: aws.String("r")}); iamCode(err) != "DeleteConflict" {
		t.Fatalf("DeleteRole with a policy on it: %v", err)
	}
	if _, err := c.DeleteRolePolicy(ctx, &iam.DeleteRolePolicyInput{RoleName: aws.String("r"), PolicyName: aws.String("p")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteRole(ctx, &iam.DeleteRoleInput{RoleName: aws.String("r")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String("r")}); iamCode(err) != "NoSuchEntity" {
		t.Fatalf("GetRole after DeleteRole: %v", err)
	}
}

// Catches: an IAM request that breaks the members IAM declares (a name off
// its pattern, a missing required member, a member the action lacks, a
// policy that is not IAM's grammar) being accepted.
func TestIAMRefusesWhatIAMRefuses(t *testing.T) {
	ctx := context.Background()
	_, c, base := iamClient(t)
	if _, err := c.CreateRole(ctx, &iam.CreateRoleInput{RoleName: aws.String("bad name!"), AssumeRolePolicyDocument: aws.String(testTrust)}); iamCode(err) != "ValidationError" {
		t.Fatalf("a role name off the pattern: %v", err)
	}
	if _, err := c.CreateRole(ctx, &iam.CreateRoleInput{RoleName: aws.String("r"), AssumeRolePolicyDocument: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sts:AssumeRole"}]}`)}); iamCode(err) != "MalformedPolicyDocument" {
		t.Fatalf("a trust policy without a principal: %v", err)
	}
	post := func(form string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base, strings.NewReader(form))
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=a/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=x")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for form, code := range map[string]string{
		"Action=GetRole&Version=2010-05-08":                               "ValidationError", // RoleName missing
		"Action=GetRole&Version=2010-05-08&RoleName=r&Colour=r":           "ValidationError", // no such member
		"Action=ListUsers&Version=2010-05-08":                             "InvalidAction",
		"Action=GetRole&Version=2011-06-15&RoleName=r":                    "InvalidAction",
		"Action=TagRole&Version=2010-05-08&RoleName=r&Tags.member.1.Key=": "ValidationError",
		// A member IAM has and the slice does not model is named, not ignored.
		"Action=SimulatePrincipalPolicy&Version=2010-05-08&PolicySourceArn=arn:aws:iam::123456789012:role/r&ActionNames.member.1=s3:GetObject&CallerArn=arn:aws:iam::123456789012:user/u": "InvalidInput",
	} {
		st, body := post(form)
		if st != http.StatusBadRequest || !strings.Contains(body, "<Code>"+code+"</Code>") {
			t.Fatalf("%s: %d %s, want 400 %s", form, st, body, code)
		}
	}
}
